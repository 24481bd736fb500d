import { env, exports } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { sha256Hex } from "#shared/hash.js";
import { OWNER_TEAM, type Caller } from "../../worker/src/http/auth.js";
import type { ContractInput } from "#shared/wire/contract.js";
import type { ArtifactRef, FullObservation } from "#shared/wire/observation.js";

// Requests and readings shared by the worker tests. Storage is isolated per test file, not per test,
// so every test picks its own idempotency keys (pass a label unique within the file).

/** The suite every fixture observation measures. */
export const TEST_IDS = ["parse.empty", "parse.nested", "parse.unicode", "parse.numbers"] as const;

const ORIGIN = "http://lw.test";

/** The instance owner as the LoopObject sees it: reaches every loop, creates the owner team's. */
export const OWNER_CALLER: Caller = { owner: true, team_id: OWNER_TEAM, token_id: null };

/**
 * A request to the worker under test, as a client would send it: with the instance owner's token unless
 * the request names its own `Authorization` (or `token` is null: no token at all).
 */
export function call(path: string, init: RequestInit = {}, token: string | null = env.OWNER_TOKEN ?? null): Promise<Response> {
  const headers = new Headers(init.headers);
  if (token !== null && !headers.has("authorization")) headers.set("authorization", `Bearer ${token}`);
  return exports.default.fetch(`${ORIGIN}${path}`, { ...init, headers });
}

/** A JSON POST (with the owner's token unless another is given). */
export function postJson(path: string, body: unknown, token?: string | null): Promise<Response> {
  return call(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }, token);
}

/** A 40-hex commit id derived from a label. */
export function commitOf(label: string): string {
  return sha256Hex(`commit ${label}`).slice(0, 40);
}

/** An observation where exactly `failing` fail, optionally citing a gate log artifact. */
export function observationOf(failing: readonly string[], log: ArtifactRef | null = null): FullObservation {
  return {
    gates: [{ name: "unit", exit_code: failing.length > 0 ? 1 : 0, signal: null, timed_out: false, duration_ms: 250, log }],
    tests: { passing: TEST_IDS.filter((id) => !failing.includes(id)), failing: [...failing] },
  };
}

/** A `POST /v1/loops` body. */
export function createLoopBody(key: string, t0Failing: readonly string[], contract: Partial<ContractInput> = {}) {
  return {
    idempotency_key: `loop-key-${key}`,
    contract: {
      name: `loop-${key}`,
      mode: "check_fixpoint",
      gates: [{ name: "unit", run: "npm test" }],
      agent: { run: "agent --fix-one" },
      ...contract,
    },
    t0: { commit: commitOf(`t0-${key}`), observation: observationOf(t0Failing) },
  };
}

/** A `POST /v1/loops/:id/candidates` body. */
export function candidateBody(key: string, change: { exit_code?: number; empty?: boolean } = {}) {
  return {
    idempotency_key: `cand-key-${key}`,
    commit: commitOf(`cand-${key}`),
    diff_sha256: sha256Hex(`diff ${key}`),
    empty: change.empty ?? false,
    proposer: { kind: "command", command: "agent --fix-one" },
    agent: { exit_code: change.exit_code ?? 0, timed_out: false, duration_ms: 1_000 },
  };
}

interface LoopSummaryBody {
  loop_id: string;
  contract_hash: string;
  status: string;
  iteration: number;
  halt: { halt_reason: string; exit_class: number } | null;
  head: { seq: number; hash: string };
}

/** Creates a loop over HTTP and answers its summary. */
export async function createLoop(key: string, t0Failing: readonly string[], contract: Partial<ContractInput> = {}): Promise<LoopSummaryBody> {
  const response = await postJson("/v1/loops", createLoopBody(key, t0Failing, contract));
  if (response.status !== 201) throw new Error(`create answered ${response.status}: ${await response.text()}`);
  return ((await response.json()) as { loop: LoopSummaryBody }).loop;
}

/** Proposes a candidate and leases it to a runner; answers the lease. */
export async function proposeAndLease(loopId: string, key: string): Promise<{ lease_id: string; fencing_token: number; job: { candidate_id: string } }> {
  const proposed = await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(key));
  if (proposed.status !== 201) throw new Error(`propose answered ${proposed.status}: ${await proposed.text()}`);
  const leased = await postJson(`/v1/loops/${loopId}/leases`, { runner_id: `runner-${key}` });
  if (leased.status !== 200) throw new Error(`lease answered ${leased.status}: ${await leased.text()}`);
  return leased.json();
}

/** The stub of a loop's object, addressed the way the routes address it. */
export function loopObject(loopId: string) {
  return env.LOOPS.get(env.LOOPS.idFromName(loopId));
}

/** What a LoopObject holds: its tables, and its event count and head when it has a log. */
export async function readLoopObject(
  loopId: string,
): Promise<{ tables: string[]; events: number; head: { seq: number; hash: string } | null; outbox: number }> {
  return runInDurableObject(loopObject(loopId), (_instance, state) => {
    const sql = state.storage.sql;
    const tables = sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf%' ESCAPE '\\' AND name NOT LIKE 'sqlite%' ORDER BY name",
      )
      .toArray()
      .map((row) => row.name);
    if (!tables.includes("events")) return { tables, events: 0, head: null, outbox: 0 };
    const events = sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM events").one().n;
    const last = sql.exec<{ seq: number; hash: string }>("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").toArray()[0] ?? null;
    const outbox = sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM outbox").one().n;
    return { tables, events, head: last ? { seq: last.seq, hash: last.hash } : null, outbox };
  });
}

/** A loop's pending baseline record as its object stores it (its lease, its holder), or null when it has none. */
export async function pendingBaselineOf(loopId: string): Promise<string | null> {
  return runInDurableObject(loopObject(loopId), (_instance, state) => {
    const sql = state.storage.sql;
    const hasMeta = sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").toArray().length > 0;
    if (!hasMeta) return null;
    return sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'pending_baseline'").toArray()[0]?.value ?? null;
  });
}

/** A loop's event count and head: what "nothing was appended" compares. (The outbox drains on its own.) */
export async function logOf(loopId: string): Promise<{ events: number; head: { seq: number; hash: string } | null }> {
  const { events, head } = await readLoopObject(loopId);
  return { events, head };
}

/**
 * Runs the loop's alarm until its outbox is empty, so the D1 projection is complete. The alarm may
 * already be running on its own (it is set for at most DRAIN_DELAY_MS after every append), in which case
 * runDurableObjectAlarm finds nothing scheduled and the drain is still in flight: wait for it.
 */
export async function drainOutbox(loopId: string): Promise<void> {
  for (let attempt = 0; attempt < 100; attempt++) {
    await runDurableObjectAlarm(loopObject(loopId));
    if ((await readLoopObject(loopId)).outbox === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`the outbox of ${loopId} did not drain`);
}

/** Row counts of the D1 projection for one loop id. */
export async function projectionRows(loopId: string): Promise<{ loops: number; candidates: number; events: number }> {
  const count = async (sql: string) => (await env.DB.prepare(sql).bind(loopId).first<{ n: number }>())?.n ?? 0;
  return {
    loops: await count("SELECT COUNT(*) AS n FROM loops WHERE id = ?"),
    candidates: await count("SELECT COUNT(*) AS n FROM candidates WHERE loop_id = ?"),
    events: await count("SELECT COUNT(*) AS n FROM events_index WHERE loop_id = ?"),
  };
}

/** An NDJSON response's text, decoded by hand: workerd warns about `.text()` on an NDJSON body. */
export async function ndjson(response: Response): Promise<string> {
  return new TextDecoder().decode(await response.arrayBuffer());
}

/** Parses a JSONL body into raw event objects. */
export function parseJsonl(text: string): Record<string, unknown>[] {
  return text
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}
