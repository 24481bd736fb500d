import { describe, expect, it } from "vitest";
import { decide, foldEvents, LoopEvent, verifyChain, type LoopState } from "#shared/engine/index.js";
import { rederive } from "#shared/receipts/verify.js";
import type { Lease, ReportResponse } from "#shared/wire/api.js";
import type { ContractInput } from "#shared/wire/contract.js";
import type { Observation } from "#shared/wire/observation.js";
import { TEST_IDS, call, candidateBody, commitOf, createLoopBody, logOf, ndjson, observationOf, parseJsonl, postJson } from "./fixtures.js";

// Parallel evaluation without stale evidence (DESIGN §1.2, §6.3, §11), through the worker and its
// LoopObject: two candidates of one loop leased at once by two runners, both against the same best;
// the first report promotes, the second — evaluated against a best that has since changed — is
// re-queued, leased again against the new best under a new fencing token, and decided exactly once.
// Every assertion on order is read from the loop's own event log.

const [A, B, C] = TEST_IDS;

const METRIC = { run: "node bench.js", name: "parse_ms", direction: "lower" as const, min_effect: "2%", samples: { min: 5, max: 40 } };

/** Readings around `center` with a small deterministic spread (±1%): a prefix of more readings is the same readings. */
function readings(center: number, count: number, offset = 0): number[] {
  return Array.from({ length: count }, (_, index) => center * (1 + 0.01 * Math.sin(index + offset)));
}

/** Creates a loop (t0 fails `t0Failing`); an optimize loop's t0 reads 100. Answers its id and t0's commit. */
async function createLoopOf(key: string, t0Failing: readonly string[], contract: Partial<ContractInput> = {}): Promise<{ loopId: string; t0: string }> {
  const body = createLoopBody(key, t0Failing, contract);
  const t0 =
    contract.mode === "optimize" ? { ...body.t0, observation: { ...body.t0.observation, samples: { best: [], candidate: readings(100, 5) } } } : body.t0;
  const created = await postJson("/v1/loops", { ...body, t0 });
  expect(created.status).toBe(201);
  return { loopId: ((await created.json()) as { loop: { loop_id: string } }).loop.loop_id, t0: body.t0.commit };
}

async function propose(loopId: string, key: string): Promise<string> {
  const proposed = await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(key));
  expect(proposed.status).toBe(201);
  return ((await proposed.json()) as { candidate: { candidate_id: string } }).candidate.candidate_id;
}

/** The job a runner leases (200), or a failure naming what it got instead. */
async function lease(loopId: string, runnerId: string): Promise<Lease> {
  const leased = await postJson(`/v1/loops/${loopId}/leases`, { runner_id: runnerId });
  expect(leased.status, `lease for ${runnerId}`).toBe(200);
  return (await leased.json()) as Lease;
}

function report(held: Lease, observation: Observation): Promise<Response> {
  return postJson(`/v1/leases/${held.lease_id}/report`, { fencing_token: held.fencing_token, observation });
}

async function answerOf(response: Response): Promise<ReportResponse> {
  expect(response.status, await response.clone().text()).toBe(200);
  return (await response.json()) as ReportResponse;
}

/** A check_fixpoint report of `failing` echoing the lease's compare_to, as a runner does. */
function echoing(held: Lease, failing: readonly string[]): Observation {
  return { ...observationOf(failing), compared_to: held.job.compare_to?.commit };
}

/** Optimize readings: `pairs` pairs of the lease's compare_to (around `best`) and its candidate, echoing compare_to. */
function measured(held: Lease, best: number, candidate: number, pairs: number): Observation {
  return { ...echoing(held, []), samples: { best: readings(best, pairs), candidate: readings(candidate, pairs, 1) } };
}

/** The loop's whole event log, as the LoopObject stores it, parsed by the event schema. */
async function eventsOf(loopId: string): Promise<LoopEvent[]> {
  const response = await call(`/v1/loops/${loopId}/events?after=0`);
  expect(response.status).toBe(200);
  return parseJsonl(await ndjson(response)).map((event) => LoopEvent.parse(event));
}

/**
 * What parallel evaluation guarantees, read from a log: every candidate has at most one final verdict
 * (exactly one when `decided` names it); every promotion rests on the observation reported right before
 * it, under a lease whose compare_to — and the observation's compared_to — is the best at decision time;
 * the chain verifies and every verdict and re-queue re-derives with the engine.
 */
function assertSerialisedPromotions(events: readonly LoopEvent[], decided: readonly string[]): void {
  expect(verifyChain(events).ok).toBe(true);
  expect(rederive(events)).toMatchObject({ ok: true });
  const finals = new Map<string, number>();
  for (const event of events) {
    if (event.type === "verdict" && event.data.decision !== "need_samples") finals.set(event.data.candidate_id, (finals.get(event.data.candidate_id) ?? 0) + 1);
  }
  for (const [id, count] of finals) expect(count, `${id} has ${count} final verdicts`).toBe(1);
  for (const id of decided) expect(finals.get(id), `${id} is decided`).toBe(1);

  const leases = new Map(events.flatMap((event) => (event.type === "lease_granted" ? [[event.data.lease_id, event.data] as const] : [])));
  events.forEach((event, index) => {
    if (event.type !== "verdict" || event.data.decision !== "promoted") return;
    const reported = events[index - 1];
    if (reported?.type !== "observation_reported") throw new Error(`promotion of ${event.data.candidate_id} does not follow its observation`);
    expect(reported.data.candidate_id).toBe(event.data.candidate_id);
    const before: LoopState | null = foldEvents(events.slice(0, index - 1));
    if (!before) throw new Error("no loop");
    const best = { candidate_id: before.best.candidate_id, commit: before.best.commit };
    expect(leases.get(reported.data.lease_id)?.compare_to, `the lease ${event.data.candidate_id} was promoted under`).toEqual(best);
    expect(reported.data.observation.compared_to, `what ${event.data.candidate_id}'s observation compared with`).toBe(best.commit);
  });
}

describe("parallel evaluation: promotions serialised in the LoopObject, stale comparisons re-queued", () => {
  it("check_fixpoint: two candidates leased at once against t0; the first promotes, the second is re-queued, leased again against it and decided once", async () => {
    const { loopId, t0 } = await createLoopOf("parallel-fixpoint", [A, B, C]);
    expect(await propose(loopId, "pf-fix-a")).toBe("c1");
    expect(await propose(loopId, "pf-fix-b")).toBe("c2");
    const one = await lease(loopId, "runner-a");
    const two = await lease(loopId, "runner-b");
    const T0 = { candidate_id: "t0", commit: t0 };
    expect(one.job).toMatchObject({ candidate_id: "c1", compare_to: T0 });
    expect(two.job).toMatchObject({ candidate_id: "c2", compare_to: T0 });

    // c1 fixes A: promoted against t0.
    expect((await answerOf(await report(one, echoing(one, [B, C])))).verdict).toMatchObject({ decision: "promoted", candidate_id: "c1" });
    const C1 = { candidate_id: "c1", commit: commitOf("cand-pf-fix-a") };

    // c2 fixes B but breaks nothing t0 passed: against t0 it would be promoted (3 → 2 failing). Its best moved on.
    const before = await logOf(loopId);
    const staleObservation = echoing(two, [A, C]);
    const stale = await answerOf(await report(two, staleObservation));
    expect(stale.verdict).toEqual({
      candidate_id: "c2",
      decision: "requeued",
      reason: "stale_comparison",
      detail: expect.stringContaining("the best is now c1"),
      compare_to: T0,
      best: C1,
    });
    expect(stale.loop).toMatchObject({ best: { candidate_id: "c1" }, iteration: 1 });
    const afterRequeue = await eventsOf(loopId);
    expect(afterRequeue.slice(before.events).map((event) => event.type)).toEqual(["lease_requeued"]);
    expect(afterRequeue.at(-1)).toMatchObject({
      type: "lease_requeued",
      data: { lease_id: two.lease_id, candidate_id: "c2", fencing_token: two.fencing_token, compare_to: T0, compared_to: t0, best: C1 },
    });
    expect(afterRequeue.some((event) => event.type === "observation_reported" && event.data.candidate_id === "c2")).toBe(false);
    expect(afterRequeue.some((event) => event.type === "verdict" && event.data.candidate_id === "c2")).toBe(false);

    // A retry answers the same and appends nothing; the old lease is dead for heartbeats and other reports.
    const head = await logOf(loopId);
    expect((await answerOf(await report(two, staleObservation))).verdict).toEqual(stale.verdict);
    const heartbeat = await postJson(`/v1/leases/${two.lease_id}/heartbeat`, { fencing_token: two.fencing_token });
    expect(heartbeat.status).toBe(409);
    const other = await report(two, echoing(two, [C]));
    expect(other.status).toBe(409);
    expect(await logOf(loopId)).toEqual(head);

    // Leasable again, against c1, under a new fencing token; runner B takes it again and is judged once, against c1.
    const again = await lease(loopId, "runner-b");
    expect(again.job).toMatchObject({ candidate_id: "c2", compare_to: C1 });
    expect(again.fencing_token).toBeGreaterThan(two.fencing_token);
    expect(again.lease_id).not.toBe(two.lease_id);
    const decided = await answerOf(await report(again, echoing(again, [A, C])));
    expect(decided.verdict).toMatchObject({ candidate_id: "c2", decision: "rejected", reason: "regressed", regressed: [A] });
    // Nothing left to lease.
    expect((await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "runner-c" })).status).toBe(204);

    const events = await eventsOf(loopId);
    assertSerialisedPromotions(events, ["c1", "c2"]);
    expect(events.filter((event) => event.type === "lease_requeued")).toHaveLength(1);
    // c2's one observation is the second lease's, compared with c1.
    const c2Reports = events.flatMap((event) => (event.type === "observation_reported" && event.data.candidate_id === "c2" ? [event.data] : []));
    expect(c2Reports).toEqual([expect.objectContaining({ lease_id: again.lease_id, observation: expect.objectContaining({ compared_to: C1.commit }) })]);
  });

  it("optimize: readings paired with the old best are never judged; the re-queued candidate's new runner is judged on its own readings alone", async () => {
    const { loopId, t0 } = await createLoopOf("parallel-optimize", [], { mode: "optimize", metric: METRIC, stop: { max_iterations: 10, no_progress: 10 } });
    expect(await propose(loopId, "po-fast")).toBe("c1");
    expect(await propose(loopId, "po-less-fast")).toBe("c2");
    const one = await lease(loopId, "runner-a");
    const two = await lease(loopId, "runner-b");
    expect([one.job.compare_to, two.job.compare_to]).toEqual([
      { candidate_id: "t0", commit: t0 },
      { candidate_id: "t0", commit: t0 },
    ]);

    // Runner B's first pairs against t0 are undecided: it is asked for more, on the same lease.
    const early = await answerOf(await report(two, measured(two, 100, 98, 5)));
    expect(early.verdict).toMatchObject({ candidate_id: "c2", decision: "need_samples", metric: { pairs: 5 } });
    // Meanwhile runner A's c1 is clearly faster than t0: promoted, the best reads about 70.
    expect((await answerOf(await report(one, measured(one, 100, 70, 8)))).verdict).toMatchObject({ candidate_id: "c1", decision: "promoted" });
    const C1 = { candidate_id: "c1", commit: commitOf("cand-po-fast") };

    // B's next report, cumulative over its lease and 15% better than t0, would promote c2 over a faster c1.
    const staleReadings = measured(two, 100, 85, 9);
    const loopThen = foldEvents(await eventsOf(loopId));
    if (!loopThen) throw new Error("no loop");
    expect(decide(loopThen, loopThen.contract, "c2", staleReadings, new Date().toISOString()).verdict.decision).toBe("promoted");
    const stale = await answerOf(await report(two, staleReadings));
    expect(stale.verdict).toMatchObject({ candidate_id: "c2", decision: "requeued", compare_to: { candidate_id: "t0" }, best: C1 });

    // Runner C leases it against c1 and measures its own pairs: judged on those alone, never pooled with B's.
    const three = await lease(loopId, "runner-c");
    expect(three.job).toMatchObject({ candidate_id: "c2", compare_to: C1 });
    expect(three.fencing_token).toBeGreaterThan(two.fencing_token);
    const decided = await answerOf(await report(three, measured(three, 70, 85, 6)));
    expect(decided.verdict).toMatchObject({ candidate_id: "c2", decision: "rejected", reason: "not_improved", metric: { pairs: 6 } });
    expect(decided.loop).toMatchObject({ best: { candidate_id: "c1" } });

    const events = await eventsOf(loopId);
    assertSerialisedPromotions(events, ["c1", "c2"]);
    // c2's recorded observations: B's undecided 5 pairs (against t0, on B's lease) and C's 6 (against c1, on C's):
    // each lease's readings are its own runner's, and the verdict counts C's pairs only.
    const c2Reports = events.flatMap((event) => (event.type === "observation_reported" && event.data.candidate_id === "c2" ? [event.data] : []));
    expect(c2Reports.map((data) => [data.lease_id, data.observation.compared_to, data.observation.samples?.best.length])).toEqual([
      [two.lease_id, t0, 5],
      [three.lease_id, C1.commit, 6],
    ]);
    const runnerOf = new Map(events.flatMap((event) => (event.type === "lease_granted" ? [[event.data.lease_id, event.data.runner_id] as const] : [])));
    expect(c2Reports.map((data) => runnerOf.get(data.lease_id))).toEqual(["runner-b", "runner-c"]);
    const c2Verdicts = events.flatMap((event) => (event.type === "verdict" && event.data.candidate_id === "c2" ? [event.data] : []));
    expect(c2Verdicts.map((verdict) => [verdict.decision, verdict.metric?.pairs])).toEqual([
      ["need_samples", 5],
      ["rejected", 6],
    ]);
  });
});

describe("a report that does not echo its lease's compare_to", () => {
  it("optimize: refused 422 invalid_observation, recording nothing; the same lease's echoed report is then judged", async () => {
    const { loopId, t0 } = await createLoopOf("unnamed-optimize", [], { mode: "optimize", metric: METRIC });
    await propose(loopId, "uo-fast");
    const held = await lease(loopId, "runner-a");
    expect(held.job.compare_to).toEqual({ candidate_id: "t0", commit: t0 });
    const { compared_to: _echo, ...unnamed } = measured(held, 100, 70, 8);
    const before = await logOf(loopId);
    const refused = await report(held, unnamed);
    expect(refused.status).toBe(422);
    expect(await refused.json()).toMatchObject({ error: { code: "invalid_observation", message: expect.stringContaining("must echo it as compared_to") } });
    expect(await logOf(loopId)).toEqual(before);
    const promoted = await answerOf(await report(held, measured(held, 100, 70, 8)));
    expect(promoted.verdict).toMatchObject({ candidate_id: "c1", decision: "promoted" });
    assertSerialisedPromotions(await eventsOf(loopId), ["c1"]);
  });

  it("optimize, once its best has moved: re-queued like any stale report, with compared_to null", async () => {
    const { loopId } = await createLoopOf("unnamed-moved", [], { mode: "optimize", metric: METRIC });
    await propose(loopId, "um-fast");
    await propose(loopId, "um-other");
    const one = await lease(loopId, "runner-a");
    const two = await lease(loopId, "runner-b");
    await answerOf(await report(one, measured(one, 100, 70, 8)));
    const { compared_to: _echo, ...unnamed } = measured(two, 100, 85, 8);
    expect((await answerOf(await report(two, unnamed))).verdict).toMatchObject({ decision: "requeued", best: { candidate_id: "c1" } });
    expect((await eventsOf(loopId)).at(-1)).toMatchObject({ type: "lease_requeued", data: { candidate_id: "c2", compared_to: null } });
  });

  it("check_fixpoint: judged while the best is its lease's, as a runner that predates compared_to was (the engine does the comparing)", async () => {
    const { loopId } = await createLoopOf("unnamed-fixpoint", [A, B]);
    await propose(loopId, "uf-fix-a");
    const held = await lease(loopId, "runner-a");
    expect((await answerOf(await report(held, observationOf([B])))).verdict).toMatchObject({ candidate_id: "c1", decision: "promoted" });
    const events = await eventsOf(loopId);
    expect(rederive(events)).toMatchObject({ ok: true });
    expect(events.find((event) => event.type === "observation_reported")?.data).not.toHaveProperty("observation.compared_to");
  });
});
