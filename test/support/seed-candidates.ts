import { sha256Hex } from "#shared/hash.js";
import type { Client } from "../../runner/src/coordinator/client.js";
import { SEED_CONTRACT, SEED_PROMOTE_EVERY, SEED_T0, seedProposal, seedReport } from "./seed-plan.js";

export { SEED_PROMOTE_EVERY };

// A loop with thousands of decided candidates, seeded through the real coordinator's API as a runner
// drives it (bench/scale.ts): each candidate is proposed with its lease in the same request (as the
// runner's session asks for it), then its observation is reported as a difference from t0's collected
// set. For bench/dashboard.ts (issue 27: the dashboard at scale).
//
// The loop and its reports are seed-plan.ts's: every candidate reports the best-so-far's failing set
// (rejected), except every `promoteEvery`-th, which fixes one more test (promoted). A candidate is judged against the best-so-far when it reports, and a report under a lease granted before
// the best moved is requeued, so the rejected candidates of one stretch between two promotions are seeded
// `concurrency` at a time and each promotion alone, once they are all decided: the verdicts are the same
// whatever order the coordinator sees them in.

/** Creates a loop to seed (idempotent by `key`), with t0 measured already; answers its id. */
export async function createSeedLoop(client: Client, key: string): Promise<string> {
  const created = await client.createLoop({
    idempotency_key: `seed-${key}`,
    contract: SEED_CONTRACT,
    t0: { commit: sha256Hex(`seed ${key} t0`).slice(0, 40), observation: SEED_T0 },
  });
  return created.loop.loop_id;
}

export interface SeedOptions {
  /** Candidates in flight at once between two promotions (default 12). */
  concurrency?: number;
  /** Every this-many-th candidate of the loop is promoted (default SEED_PROMOTE_EVERY). */
  promoteEvery?: number;
  /** Told after each stretch between two promotions: candidates seeded so far of `count`. */
  onProgress?: (seeded: number, count: number) => void;
}

export interface SeedResult {
  /** Candidates this call proposed and saw decided. */
  candidates: number;
  promoted: number;
  rejected: number;
  /** HTTP requests sent (a lease asked apart when the proposal's answer had none counts too). */
  requests: number;
  ms: number;
  /** The loop after this call: its decided candidates, and the tests failing in its best. */
  loop: { iteration: number; best_failing_tests: number };
}

/**
 * Proposes, leases and reports `count` more candidates on a loop made by `createSeedLoop`, continuing
 * where it stands (so a loop seeded to 1,000 can be seeded on to 5,000): the loop's k-th candidate is
 * promoted when k is a multiple of `promoteEvery`, every other one rejected. Throws when a verdict is not
 * the one planned, or when the loop halts.
 */
export async function seedCandidates(client: Client, loopId: string, count: number, options: SeedOptions = {}): Promise<SeedResult> {
  const concurrency = options.concurrency ?? 12;
  const promoteEvery = options.promoteEvery ?? SEED_PROMOTE_EVERY;
  const started = performance.now();
  const before = await client.getLoop(loopId);
  if (before.halt) throw new Error(`loop ${loopId} halted: ${before.halt.halt_reason}`);
  // The summary counts the failing gate as one more failing test (DESIGN §5): it fails while any test does.
  let best = Math.max(0, before.best.failing - 1);
  let requests = 1;
  let promoted = 0;
  let rejected = 0;
  let last = before;

  /** One candidate through the API, keyed by its index in the loop; its verdict must be `expected`. */
  const one = async (index: number, failing: number, expected: "promoted" | "rejected", runnerId: string) => {
    const key = `${loopId}-${index}`;
    const proposed = await client.proposeCandidate(loopId, { ...seedProposal(key), lease: { runner_id: runnerId, labels: {} } });
    requests++;
    // The lease is the oldest queued candidate's, perhaps another worker's: every rejected one reports the same.
    let lease = proposed.lease ?? null;
    if (!lease) {
      lease = await client.leaseJob(loopId, { runner_id: runnerId });
      requests++;
    }
    if (!lease) throw new Error(`no lease after proposing ${proposed.candidate.candidate_id}`);
    const answer = await client.report(lease.lease_id, { fencing_token: lease.fencing_token, observation: seedReport(failing) });
    requests++;
    if (answer.verdict.decision !== expected) {
      throw new Error(
        `${answer.verdict.candidate_id}: ${answer.verdict.decision} (${"reason" in answer.verdict ? answer.verdict.reason : ""}), expected ${expected}`,
      );
    }
    if (answer.loop.halt) throw new Error(`loop ${loopId} halted while seeded: ${answer.loop.halt.halt_reason}: ${answer.loop.halt.detail}`);
    if (answer.loop.iteration > last.iteration) last = answer.loop;
  };

  let next = before.iteration + 1;
  const end = before.iteration + count;
  while (next <= end) {
    // The rejected candidates up to the next promotion (or the end), `concurrency` at a time.
    const promotion = Math.ceil(next / promoteEvery) * promoteEvery;
    const stretchEnd = Math.min(promotion - 1, end);
    let cursor = next;
    const workers = Array.from({ length: Math.min(concurrency, stretchEnd - next + 1) }, async (_, worker) => {
      while (cursor <= stretchEnd) {
        const index = cursor++;
        await one(index, best, "rejected", `seed-${worker}`);
        rejected++;
      }
    });
    await Promise.all(workers);
    next = stretchEnd + 1;
    if (next === promotion && next <= end) {
      await one(next, best - 1, "promoted", "seed-promote");
      promoted++;
      best--;
      next++;
    }
    options.onProgress?.(next - 1 - before.iteration, count);
  }
  return {
    candidates: count,
    promoted,
    rejected,
    requests,
    ms: performance.now() - started,
    loop: { iteration: last.iteration, best_failing_tests: best },
  };
}

/** A dashboard session for `token` through a one-time login link (login-routes.ts): answers the `Cookie` header to send. */
export async function dashboardSession(url: string, token: string): Promise<string> {
  const linked = await fetch(`${url}/v1/dashboard/links`, { method: "POST", headers: { authorization: `Bearer ${token}` } });
  if (linked.status !== 201) throw new Error(`POST /v1/dashboard/links: ${linked.status} ${await linked.text()}`);
  const { url: link } = (await linked.json()) as { url: string };
  const opened = await fetch(link, { redirect: "manual" });
  await opened.arrayBuffer();
  const cookie = opened.headers.getSetCookie().find((header) => header.startsWith("lw_session="));
  if (opened.status !== 200 || !cookie) throw new Error(`GET ${link}: ${opened.status}, no session cookie`);
  return cookie.split(";")[0] ?? "";
}

/** One GET, timed from before it is sent until its whole body is read: its round trip on 127.0.0.1, an upper bound of the server's time. */
export async function timedGet(url: string, cookie?: string): Promise<{ status: number; ms: number; bytes: number; body: string }> {
  const started = performance.now();
  const response = await fetch(url, cookie ? { headers: { cookie } } : {});
  const body = await response.text();
  return { status: response.status, ms: performance.now() - started, bytes: Buffer.byteLength(body), body };
}
