import { eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { Hono, type Context, type MiddlewareHandler } from "hono";
import { utf8 } from "@scure/base";
import { foldEvents, LoopEvent } from "#shared/engine/index.js";
import { Envelope, fromBase64, ReceiptStatement } from "#shared/receipts/index.js";
import { ReceiptId } from "#shared/wire/api.js";
import { VERIFY_SCRIPT } from "../../../dist/page/verify-script.js";
import { VERSION } from "#shared/version.js";
import { loops, receipts, type ReceiptRow } from "../db/schema.js";
import { ApiError, refusalError } from "../http/http-errors.js";
import { OWNER_TEAM, RECEIPT_READER } from "../http/auth.js";
import { loopStub } from "../http/loop-access.js";
import { receiptPage } from "../page/receipt-page.js";
import { keySetOf } from "../receipt-keys.js";
import { artifactStorage } from "../artifacts/artifact-storage-mode.js";
import { artifactLimits } from "../artifacts/artifact-limits.js";
import { damagedArtifact, storedToServe } from "../artifacts/artifact-store.js";
import { downloadHeaders } from "../artifacts/artifact-names.js";
import { inStorage } from "../artifacts/artifact-upload.js";
import { teamQuotaOf } from "../team-limits.js";

// The public face of a loop (DESIGN §8, §9): a receipt's envelope, the log it signs and the files that
// log names as evidence (DESIGN §10: gate logs, metric output, the contract's artifacts), by the
// receipt's unguessable id, and the keys that verify it. No login; a receipt never changes, so all of
// it is served as immutable.
//
// And cached (DESIGN §11: public receipt routes are cached and limited; app.ts limits them per client
// address): the envelope, the log and the page are kept in the Cache API (`caches.default`) under their
// URL, so a repeated request reads neither D1 nor the loop's object and renders nothing; a receipt id
// that does not exist is cached as a 404 for NOT_FOUND_MAX_AGE_S. The files route keeps, per receipt,
// the digests its log names (so its log is read and parsed once, not on every request), and its 404 for
// a digest the log does not name; a file's bytes are read from storage each time (they may be gigabytes,
// and whether storage still holds them verified can change). The Cache API is per data centre, and
// answers nothing on a workers.dev address (a custom domain has it); Miniflare, locally and in the worker
// tests, keeps a cache of its own. Keys carry the worker's version, so a new version renders anew.
// The key set reads neither D1 nor an object (the keys are imported once per isolate) and is not kept:
// after a rotation its new keys must show at once; browsers keep it for 5 minutes.

const IMMUTABLE = "public, max-age=31536000, immutable";

/**
 * How long a receipt id with no receipt is cached as a 404, in seconds: short, for a receipt is
 * written to D1 just before its URL is answered, and a write that failed is retried by its loop's alarm
 * 5 seconds later.
 */
export const NOT_FOUND_MAX_AGE_S = 10;

/** Receipt routes, mounted at the root. */
export const receiptRoutes = new Hono<{ Bindings: Env }>();

type ReceiptContext = Context<{ Bindings: Env }>;

receiptRoutes.get("/.well-known/loopwarden/keys.json", async (c) => {
  c.header("Cache-Control", "public, max-age=300");
  return c.json(await keySetOf(c.env));
});

/** The Cache API's default cache, or null in a runtime without one. */
function responseCache(): Cache | null {
  return typeof caches === "undefined" ? null : caches.default;
}

/**
 * The request a response is cached under: the route's path on this origin, the query it reads (only
 * that, so a made-up query cannot miss the cache on purpose) and the worker's version.
 */
function cacheKey(c: ReceiptContext, path: string, query: Record<string, string> = {}): Request {
  const url = new URL(path, c.req.url);
  for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
  url.searchParams.set("v", VERSION);
  return new Request(url.href);
}

/** Runs `work` after the response (waitUntil) where the runtime allows, else before it. */
async function afterResponse(c: ReceiptContext, work: Promise<unknown>): Promise<void> {
  let context: { waitUntil(promise: Promise<unknown>): void } | undefined;
  try {
    context = c.executionCtx;
  } catch {
    // A request handled without an execution context (app.request in a test): nothing runs after it.
  }
  const quiet = work.catch((error: unknown) => console.error("loopwarden: caching a receipt response failed", error));
  if (context) context.waitUntil(quiet);
  else await quiet;
}

/**
 * Answers from the cache when the response is there; otherwise runs the route and keeps its answer when
 * its status is one of `statuses` and it says it is public (a 404 that may change, such as a file not
 * stored yet, says nothing and is not kept).
 */
function cached(keyOf: (c: ReceiptContext) => Request, statuses: readonly number[] = [200, 404]): MiddlewareHandler<{ Bindings: Env }> {
  return async (c, next) => {
    const cache = responseCache();
    if (!cache) return next();
    const key = keyOf(c);
    const hit = await cache.match(key);
    if (hit) return new Response(hit.body, hit);
    await next();
    if (statuses.includes(c.res.status) && /\bpublic\b/.test(c.res.headers.get("Cache-Control") ?? "")) {
      await afterResponse(c, cache.put(key, c.res.clone()));
    }
  };
}

/** The 404 of a receipt id with no receipt: cached, briefly. */
function noSuchReceipt(): ApiError {
  return new ApiError(404, "not_found", "no such receipt", undefined, { "Cache-Control": `public, max-age=${NOT_FOUND_MAX_AGE_S}` });
}

/** The stored receipt of an id, or 404 (a malformed id too, without a query). */
async function receiptOf(env: Env, id: string) {
  if (!ReceiptId.safeParse(id).success) throw noSuchReceipt();
  const row = await drizzle(env.DB).select().from(receipts).where(eq(receipts.id, id)).get();
  if (!row) throw noSuchReceipt();
  return row;
}

/** A route's own path, with no query, as its cache key. */
const byPath = (c: ReceiptContext) => cacheKey(c, c.req.path);

receiptRoutes.get("/r/:file{rc_[0-9a-f]+\\.json}", cached(byPath), async (c) => {
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

receiptRoutes.get("/r/:id/events.jsonl", cached(byPath), async (c) => {
  const row = await receiptOf(c.env, c.req.param("id"));
  const lines = await signedLog(c.env, row);
  return c.body(lines.map((line) => `${line}\n`).join(""), 200, { "Content-Type": "application/x-ndjson; charset=utf-8", "Cache-Control": IMMUTABLE });
});

// The page's verifier: the shared verifier bundled for browsers at build time (dist/page).
receiptRoutes.get("/r/assets/verify.js", (c) =>
  c.body(VERIFY_SCRIPT, 200, { "Content-Type": "text/javascript; charset=utf-8", "Cache-Control": "public, max-age=3600" }),
);

/**
 * What the page shows of the query: the candidates' table is paged (`?page=N`; anything else is the
 * first page), and one candidate's files may be listed in full (`?files=cN`; an unknown one lists none).
 */
function pageQuery(c: ReceiptContext): { page: number; files: string | undefined } {
  const page = Number(/^[1-9]\d{0,5}$/.exec(c.req.query("page") ?? "")?.[0] ?? 1);
  const files = /^c[1-9]\d{0,6}$/.exec(c.req.query("files") ?? "")?.[0];
  return { page, files };
}

/** The page's cache key: its path and the query it reads, as it reads it (`?page=x` is the first page's). */
function pageKey(c: ReceiptContext): Request {
  const { page, files } = pageQuery(c);
  return cacheKey(c, c.req.path, { ...(page === 1 ? {} : { page: String(page) }), ...(files ? { files } : {}) });
}

receiptRoutes.get("/r/:id{rc_[0-9a-f]{32}}", cached(pageKey), async (c) => {
  const row = await receiptOf(c.env, c.req.param("id"));
  const envelope = Envelope.parse(JSON.parse(row.envelope));
  const statement = ReceiptStatement.parse(JSON.parse(utf8.encode(fromBase64(envelope.payload))));
  const state = foldEvents((await signedLog(c.env, row)).map((line) => LoopEvent.parse(JSON.parse(line))));
  if (!state) throw new Error(`receipt ${row.id}: the loop's log is empty`);
  const { page, files } = pageQuery(c);
  c.header("Cache-Control", IMMUTABLE);
  return c.html(receiptPage({ receiptId: row.id, statement, state, url: new URL(`/r/${row.id}`, c.req.url).href, page, ...(files ? { files } : {}) }));
});

/**
 * The digests the signed log names as an evaluation's evidence: a gate's or task's log, or a file (the
 * contract's artifacts, `metric.log`) of t0's observation or of a reported one. A candidate's bundle (its
 * commits) is not evidence a receipt publishes: the code stays the team's.
 */
function evidenceDigests(lines: readonly string[]): Set<string> {
  const digests = new Set<string>();
  for (const line of lines) {
    const event = LoopEvent.parse(JSON.parse(line));
    const observation = event.type === "loop_created" ? event.data.t0.observation : event.type === "observation_reported" ? event.data.observation : null;
    if (!observation) continue;
    const refs = [...observation.gates, ...(observation.tasks ?? [])].flatMap((gate) => (gate.log ? [gate.log] : [])).concat(observation.artifacts ?? []);
    for (const ref of refs) digests.add(ref.sha256);
  }
  return digests;
}

/** What the files route needs of a receipt: its loop, the loop's team, and the digests its log names. */
interface ReceiptEvidence {
  loop_id: string;
  team_id: string;
  digests: string[];
}

/**
 * A receipt's evidence (`evidenceDigests`), read and parsed from its signed log once and then kept in
 * the cache under a key of the receipt's no route serves; 404 for a receipt id with none. The loop's team
 * is D1's (its row drained before the receipt's, through the same outbox): what an object adopted on the
 * way to a download counts toward.
 */
async function evidenceOf(c: ReceiptContext, id: string): Promise<ReceiptEvidence> {
  const cache = responseCache();
  const key = cacheKey(c, `/r/${id}/files/`);
  const hit = await cache?.match(key);
  if (hit) return (await hit.json()) as ReceiptEvidence;
  const row = await receiptOf(c.env, id);
  const db = drizzle(c.env.DB);
  const [lines, loop] = await Promise.all([signedLog(c.env, row), db.select({ teamId: loops.teamId }).from(loops).where(eq(loops.id, row.loopId)).get()]);
  const evidence: ReceiptEvidence = { loop_id: row.loopId, team_id: loop?.teamId ?? OWNER_TEAM, digests: [...evidenceDigests(lines)] };
  if (cache) {
    const kept = new Response(JSON.stringify(evidence), { headers: { "Content-Type": "application/json", "Cache-Control": IMMUTABLE } });
    await afterResponse(c, cache.put(key, kept));
  }
  return evidence;
}

/**
 * A file the receipt's signed log names (`evidenceOf`), served as the authenticated download route
 * serves it (`downloadHeaders`: plain UTF-8 text inline, anything else an attachment, never sniffed,
 * sandboxed): what the page links, so anyone with the receipt can read the evidence it cites. Only what
 * the coordinator recorded (verified) is served; a digest the log does not name is 404 whether stored or
 * not, so the route says nothing about the loop's other files.
 */
receiptRoutes.get("/r/:id{rc_[0-9a-f]{32}}/files/:sha256{[0-9a-f]{64}}", cached(byPath, [404]), async (c) => {
  const evidence = await evidenceOf(c, c.req.param("id"));
  const sha256 = c.req.param("sha256");
  // What the log names never changes: this 404 is kept, as the cached ones above are.
  if (!evidence.digests.includes(sha256))
    throw new ApiError(404, "not_found", "the receipt's log names no such file", undefined, { "Cache-Control": IMMUTABLE });
  // Recorded (verified) only, and only while storage holds the bytes verified (its ETag): an object
  // stored but not yet recorded (S3 mode's presigned PUT) is verified first; one written since is not served.
  const storage = await inStorage(() => artifactStorage(c.env));
  const scope = {
    storage,
    db: drizzle(c.env.DB),
    loopId: evidence.loop_id,
    quotaBytes: artifactLimits(c.env).quotaBytes,
    team: teamQuotaOf(c.env, evidence.team_id),
  };
  const served = await storedToServe(scope, sha256);
  if (served === "not_recorded") throw new ApiError(404, "not_found", "the file the receipt's log names is not stored");
  if (served === "damaged") throw damagedArtifact(sha256);
  const { row: artifact, object } = served;
  return c.body(object.body, 200, { ...downloadHeaders(artifact), "Content-Length": String(object.size), ETag: object.httpEtag, "Cache-Control": IMMUTABLE });
});
