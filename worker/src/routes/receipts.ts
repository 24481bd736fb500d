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
import { artifactStorage } from "../artifact-storage-mode.js";
import { artifactLimits } from "../artifact-limits.js";
import { damagedArtifact, storedToServe } from "../artifact-store.js";
import { downloadHeaders } from "../artifact-names.js";
import { inStorage } from "../artifact-upload.js";

// The public face of a loop (DESIGN §8, §9): a receipt's envelope, the log it signs and the files that
// log names as evidence (DESIGN §10: gate logs, metric output, the contract's artifacts), by the
// receipt's unguessable id, and the keys that verify it. No login; a receipt never changes, so all of
// it is served as immutable.

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
  // The candidates' table is paged (`?page=N`; anything else is the first page), and one candidate's files
  // may be listed in full (`?files=cN`; an unknown one lists none).
  const page = Number(/^[1-9]\d{0,5}$/.exec(c.req.query("page") ?? "")?.[0] ?? 1);
  const files = /^c[1-9]\d{0,6}$/.exec(c.req.query("files") ?? "")?.[0];
  c.header("Cache-Control", IMMUTABLE);
  return c.html(receiptPage({ receiptId: row.id, statement, state, url: new URL(`/r/${row.id}`, c.req.url).href, page, ...(files ? { files } : {}) }));
});

/**
 * Whether the signed log names `sha256` as an evaluation's evidence: a gate's or task's log, or a file
 * (the contract's artifacts, `metric.log`) of t0's observation or of a reported one. A candidate's bundle
 * (its commits) is not evidence a receipt publishes: the code stays the team's.
 */
function namesEvidence(lines: readonly string[], sha256: string): boolean {
  for (const line of lines) {
    const event = LoopEvent.parse(JSON.parse(line));
    const observation = event.type === "loop_created" ? event.data.t0.observation : event.type === "observation_reported" ? event.data.observation : null;
    if (!observation) continue;
    const refs = [...observation.gates, ...(observation.tasks ?? [])].flatMap((gate) => (gate.log ? [gate.log] : [])).concat(observation.artifacts ?? []);
    if (refs.some((ref) => ref.sha256 === sha256)) return true;
  }
  return false;
}

/**
 * A file the receipt's signed log names (`namesEvidence`), served as the authenticated download route
 * serves it (`downloadHeaders`: plain UTF-8 text inline, anything else an attachment, never sniffed,
 * sandboxed): what the page links, so anyone with the receipt can read the evidence it cites. Only what
 * the coordinator recorded (verified) is served; a digest the log does not name is 404 whether stored or
 * not, so the route says nothing about the loop's other files.
 */
receiptRoutes.get("/r/:id{rc_[0-9a-f]{32}}/files/:sha256{[0-9a-f]{64}}", async (c) => {
  const row = await receiptOf(c.env, c.req.param("id"));
  const sha256 = c.req.param("sha256");
  if (!namesEvidence(await signedLog(c.env, row), sha256)) throw new ApiError(404, "not_found", "the receipt's log names no such file");
  // Recorded (verified) only, and only while storage holds the bytes verified (its ETag): an object
  // stored but not yet recorded (S3 mode's presigned PUT) is verified first; one written since is not served.
  const storage = await inStorage(() => artifactStorage(c.env));
  const served = await storedToServe({ storage, db: drizzle(c.env.DB), loopId: row.loopId, quotaBytes: artifactLimits(c.env).quotaBytes }, sha256);
  if (served === "not_recorded") throw new ApiError(404, "not_found", "the file the receipt's log names is not stored");
  if (served === "damaged") throw damagedArtifact(sha256);
  const { row: artifact, object } = served;
  return c.body(object.body, 200, { ...downloadHeaders(artifact), "Content-Length": String(object.size), ETag: object.httpEtag, "Cache-Control": IMMUTABLE });
});
