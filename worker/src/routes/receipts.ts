import { eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { Hono } from "hono";
import { utf8 } from "@scure/base";
import { foldEvents, LoopEvent } from "../../../shared/engine/index.js";
import { Envelope, fromBase64, ReceiptStatement } from "../../../shared/receipts/index.js";
import { ReceiptId } from "../../../shared/wire/api.js";
import { VERIFY_SCRIPT } from "../../../dist/page/verify-script.js";
import { receipts, type ReceiptRow } from "../db/schema.js";
import { ApiError, refusalError } from "../http-errors.js";
import { RECEIPT_READER } from "../auth.js";
import { loopStub } from "../loops.js";
import { receiptPage } from "../page/receipt-page.js";
import { keySetOf } from "../receipt-keys.js";

// The public face of a loop (DESIGN §8, §9): a receipt's envelope and the log it signs, by the
// receipt's unguessable id, and the keys that verify it. No login; a receipt never changes, so both
// are served as immutable.

const IMMUTABLE = "public, max-age=31536000, immutable";

/** Receipt routes, mounted at the root. */
export const receiptRoutes = new Hono<{ Bindings: Env }>();

receiptRoutes.get("/.well-known/loopwarden/keys.json", async (c) => {
  c.header("Cache-Control", "public, max-age=300");
  return c.json(await keySetOf(c.env));
});

/** The stored receipt of an id, or 404 (a malformed id too, without a query). */
async function receiptOf(env: Env, id: string) {
  if (!ReceiptId.safeParse(id).success) throw new ApiError(404, "not_found", "no such receipt");
  const row = await drizzle(env.DB).select().from(receipts).where(eq(receipts.id, id)).get();
  if (!row) throw new ApiError(404, "not_found", "no such receipt");
  return row;
}

receiptRoutes.get("/r/:file{rc_[0-9a-f]+\\.json}", async (c) => {
  const row = await receiptOf(c.env, c.req.param("file").slice(0, -".json".length));
  return c.body(row.envelope, 200, { "Content-Type": "application/json; charset=utf-8", "Cache-Control": IMMUTABLE });
});

/** The loop's log up to the receipt's signed head, page by page (pages are bounded in bytes): exactly what was signed. */
async function signedLog(env: Env, row: Pick<ReceiptRow, "id" | "loopId" | "headSeq">): Promise<string[]> {
  const stub = loopStub(env, row.loopId);
  const lines: string[] = [];
  while (lines.length < row.headSeq) {
    const page = await stub.events({ caller: RECEIPT_READER, after: lines.length, limit: Math.min(1_000, row.headSeq - lines.length) });
    if (!page.ok) throw refusalError(page);
    if (page.events.length === 0) throw new Error(`loop ${row.loopId} has fewer events than its receipt ${row.id} signs`);
    lines.push(...page.events);
  }
  return lines;
}

receiptRoutes.get("/r/:id/events.jsonl", async (c) => {
  const row = await receiptOf(c.env, c.req.param("id"));
  const lines = await signedLog(c.env, row);
  return c.body(lines.map((line) => `${line}\n`).join(""), 200, { "Content-Type": "application/x-ndjson; charset=utf-8", "Cache-Control": IMMUTABLE });
});

// The page's verifier: the shared verifier bundled for browsers at build time (dist/page).
receiptRoutes.get("/r/assets/verify.js", (c) =>
  c.body(VERIFY_SCRIPT, 200, { "Content-Type": "text/javascript; charset=utf-8", "Cache-Control": "public, max-age=3600" }),
);

receiptRoutes.get("/r/:id{rc_[0-9a-f]{32}}", async (c) => {
  const row = await receiptOf(c.env, c.req.param("id"));
  const envelope = Envelope.parse(JSON.parse(row.envelope));
  const statement = ReceiptStatement.parse(JSON.parse(utf8.encode(fromBase64(envelope.payload))));
  const state = foldEvents((await signedLog(c.env, row)).map((line) => LoopEvent.parse(JSON.parse(line))));
  if (!state) throw new Error(`receipt ${row.id}: the loop's log is empty`);
  c.header("Cache-Control", IMMUTABLE);
  return c.html(receiptPage({ receiptId: row.id, statement, state, url: new URL(c.req.url).href }));
});
