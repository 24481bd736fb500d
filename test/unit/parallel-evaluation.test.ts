import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decide, foldEvents, labelsSatisfy, type EventDraft, type GrantedLease, type Outcome, type ReportAnswer } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { rederive } from "#shared/receipts/verify.js";
import type { ContractInput, Labels } from "#shared/wire/contract.js";
import type { Observation } from "#shared/wire/observation.js";
import { LoopHarness, TEST_IDS, commitOf, observationOf, optimizeLoop, readings, requestHashOf, sealedLog } from "./engine-harness.js";

// Parallel evaluation without stale evidence (DESIGN §6.3, §11): runners get jobs by their labels; a
// lease names the best it is compared against; a report whose comparison went stale while it ran is
// not judged but re-queued, to be compared with the new best; readings are never pooled across leases.

const [A, B, C, D] = TEST_IDS;
const T0 = { candidate_id: "t0", commit: commitOf("t0") };

/** The lease an outcome granted; throws when none was. */
function granted(outcome: Outcome<GrantedLease | null>): GrantedLease {
  if (!outcome.ok || !outcome.value) throw new Error("no lease granted");
  return outcome.value;
}

/** The answer of a report that was accepted; throws on a refusal. */
function answered(outcome: Outcome<ReportAnswer>): ReportAnswer {
  if (!outcome.ok) throw new Error(`report refused: ${outcome.error.code}`);
  return outcome.value;
}

/** A report of `failing` that echoes its lease's compare_to, as a runner of this version does. */
function echoing(lease: GrantedLease, failing: readonly string[]): Observation {
  return { ...observationOf(failing), ...(lease.compare_to ? { compared_to: lease.compare_to.commit } : {}) };
}

/** Paired readings of the lease's compare_to (at `best`) and its candidate (at `candidate`), echoing compare_to. */
function measured(lease: GrantedLease, best: number, candidate: number, pairs: number): Observation {
  return { ...echoing(lease, []), samples: { best: readings(best, pairs), candidate: readings(candidate, pairs, 1) } };
}

describe("labels: which runner gets a job (DESIGN §11)", () => {
  it.each<[string, Labels, Labels, boolean]>([
    ["nothing required, nothing offered", {}, {}, true],
    ["nothing required, labels offered", {}, { gpu: "h100" }, true],
    ["the required label, and more", { gpu: "h100" }, { gpu: "h100", os: "linux" }, true],
    ["every required label", { gpu: "h100", os: "linux" }, { os: "linux", gpu: "h100" }, true],
    ["the key with another value", { gpu: "h100" }, { gpu: "a100" }, false],
    ["no labels", { gpu: "h100" }, {}, false],
    ["one of two required labels", { gpu: "h100", os: "linux" }, { gpu: "h100" }, false],
    ["values that differ only in case", { os: "linux" }, { os: "Linux" }, false],
    ["a key every object inherits", { constructor: "x" }, {}, false],
    ["a key every object inherits, offered", { toString: "x" }, { toString: "x" }, true],
  ])("labelsSatisfy: %s → %s", (_what, required, offered, expected) => {
    expect(labelsSatisfy(required, offered)).toBe(expected);
  });

  const labels = fc.dictionary(fc.stringMatching(/^[a-z]{1,3}$/), fc.stringMatching(/^[a-z0-9]{1,3}$/), { maxKeys: 6 });
  it("property: a runner that offers the required labels is always satisfied; dropping or changing any one of them never is", () => {
    fc.assert(
      fc.property(labels, labels, fc.nat(), (required, extra, pick) => {
        const offered = { ...extra, ...required };
        expect(labelsSatisfy(required, offered)).toBe(true);
        const keys = Object.keys(required);
        const key = keys[pick % Math.max(1, keys.length)];
        if (key === undefined) return;
        const { [key]: _dropped, ...without } = offered;
        expect(labelsSatisfy(required, without)).toBe(false);
        expect(labelsSatisfy(required, { ...offered, [key]: `${offered[key] ?? ""}-other` })).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it.each<[string, Labels, boolean]>([
    ["no labels", {}, false],
    ["one of the two", { gpu: "h100" }, false],
    ["the GPU with another value", { gpu: "a100", os: "linux" }, false],
    ["both", { gpu: "h100", os: "linux" }, true],
    ["both and more", { gpu: "h100", os: "linux", region: "eu" }, true],
  ])("a contract that requires gpu=h100 and os=linux leases to a runner offering %s: %s", (_what, offered, leases) => {
    const harness = new LoopHarness([A], { evaluate: { labels: { gpu: "h100", os: "linux" } } });
    harness.propose("one");
    const count = harness.events.length;
    const outcome = harness.lease("runner-1", 60_000, offered);
    if (leases) {
      expect(outcome).toMatchObject({ ok: true, events: [{ type: "lease_granted" }], value: { candidate: { candidate_id: "c1" } } });
    } else {
      // No job for this runner is not an error: another runner may have the labels.
      expect(outcome).toEqual({ ok: true, events: [], value: null });
      expect(harness.events).toHaveLength(count);
      expect(harness.state.candidates.c1?.status).toBe("queued");
    }
  });

  it("records the runner's labels with its lease, and a log whose lease went to a runner without the contract's is not verified", () => {
    const harness = new LoopHarness([A], { evaluate: { labels: { gpu: "h100" } } });
    harness.propose("one");
    harness.lease("gpu-box", 60_000, { gpu: "h100", os: "linux" });
    expect(harness.state.candidates.c1?.lease?.labels).toEqual({ gpu: "h100", os: "linux" });
    const at = harness.events.findIndex((draft) => draft.type === "lease_granted");
    const granted = harness.events[at];
    if (granted?.type !== "lease_granted") throw new Error("no lease_granted");
    expect(granted.data.labels).toEqual({ gpu: "h100", os: "linux" });
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
    // The same lease, recorded as granted to a runner that lacked the label.
    const forged = sealedLog([...harness.events.slice(0, at), { ...granted, data: { ...granted.data, labels: { os: "linux" } } }]);
    expect(rederive(forged)).toEqual({ ok: false, detail: expect.stringContaining("labelled os=linux, without the contract's gpu=h100") });
  });

  it("a contract that requires no label leases to any runner, labelled or not", () => {
    const harness = new LoopHarness([A]);
    harness.propose("one");
    harness.propose("two");
    expect(harness.lease("plain", 60_000, {})).toMatchObject({ ok: true, value: { candidate: { candidate_id: "c1" } } });
    expect(harness.lease("labelled", 60_000, { gpu: "h100" })).toMatchObject({ ok: true, value: { candidate: { candidate_id: "c2" } } });
  });
});

describe("compare_to: what a lease is judged against", () => {
  it("names the best-so-far at lease time, in the lease_granted event, the loop's state and the granted lease", () => {
    const harness = new LoopHarness([A, B, C]);
    harness.propose("fix-a");
    const first = granted(harness.lease());
    expect(first.compare_to).toEqual(T0);
    expect(harness.events.at(-1)).toMatchObject({ type: "lease_granted", data: { candidate_id: "c1", compare_to: T0 } });
    expect(harness.state.candidates.c1?.lease?.compare_to).toEqual(T0);
    expect(answered(harness.report(first, echoing(first, [B, C])))).toMatchObject({ decision: "promoted" });

    harness.propose("fix-b");
    const second = granted(harness.lease());
    const c1 = { candidate_id: "c1", commit: commitOf("fix-a") };
    expect(second.compare_to).toEqual(c1);
    expect(harness.events.at(-1)).toMatchObject({ type: "lease_granted", data: { compare_to: c1 } });
    // A heartbeat keeps what the lease compares against; only a new lease names a new best.
    expect(harness.renew(second)).toMatchObject({ ok: true, value: { compare_to: c1 } });
  });

  it("a lease granted before leases named compare_to folds with none, and its report is judged at report time as it was then", () => {
    const harness = new LoopHarness([A, B, C]);
    harness.propose("fix-a");
    harness.propose("fix-b");
    // Two leases as an older coordinator recorded them: without compare_to.
    const leaseOfOldFormat = (runner: string) => {
      const outcome = granted(harness.lease(runner));
      const event = harness.events.at(-1);
      if (event?.type !== "lease_granted") throw new Error("no lease_granted");
      const { compare_to: _named, ...data } = event.data;
      harness.events[harness.events.length - 1] = { ...event, data };
      harness.state = foldEvents(harness.events) ?? harness.state;
      return outcome;
    };
    const one = leaseOfOldFormat("runner-1");
    const two = leaseOfOldFormat("runner-2");
    expect(harness.state.candidates.c2?.lease?.compare_to).toBeNull();
    expect(answered(harness.report(one, observationOf([B, C])))).toMatchObject({ decision: "promoted" });
    // The best moved on while c2 was out, but its lease promised nothing: judged against c1, as before.
    expect(answered(harness.report(two, observationOf([C])))).toMatchObject({ decision: "promoted", failing_before: 3 });
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
  });
});

describe("stale comparisons are re-queued, never judged", () => {
  /** t0 fails A, B and C; c1 (fixes A) and c2 (fixes B) are leased at once by two runners, both against t0. */
  const twoInParallel = () => {
    const harness = new LoopHarness([A, B, C]);
    harness.propose("fix-a");
    harness.propose("fix-b");
    const one = granted(harness.lease("runner-1"));
    const two = granted(harness.lease("runner-2"));
    return { harness, one, two };
  };
  const C1 = { candidate_id: "c1", commit: commitOf("fix-a") };

  it("the second of two parallel evaluations, compared with a best that has since changed, is re-queued: no observation, no verdict", () => {
    const { harness, one, two } = twoInParallel();
    expect([one.compare_to, two.compare_to]).toEqual([T0, T0]);
    expect(answered(harness.report(one, echoing(one, [B, C])))).toMatchObject({ decision: "promoted" });
    const count = harness.events.length;
    const observation = echoing(two, [A, C]);
    const outcome = harness.report(two, observation);
    expect(outcome).toEqual({
      ok: true,
      events: [
        {
          type: "lease_requeued",
          at: expect.any(String),
          data: {
            lease_id: two.lease_id,
            candidate_id: "c2",
            fencing_token: two.fencing_token,
            request_hash: requestHashOf({ fencing_token: two.fencing_token, observation }),
            reason: "stale_comparison",
            compare_to: T0,
            compared_to: T0.commit,
            best: C1,
          },
        },
      ],
      value: {
        candidate_id: "c2",
        decision: "requeued",
        reason: "stale_comparison",
        detail: expect.stringContaining("the best is now c1"),
        compare_to: T0,
        best: C1,
      },
    });
    expect(harness.typesSince(count)).toEqual(["lease_requeued"]);
    expect(harness.state.candidates.c2).toMatchObject({ status: "queued", lease: null, report: null, verdict: null, pending: null });
    expect(harness.state.iterations).toBe(1);
    expect(harness.state.best.candidate_id).toBe("c1");
  });

  it("answers a retry of the re-queued report the same with no event; any other report or heartbeat under that lease is stale_lease", () => {
    const { harness, one, two } = twoInParallel();
    harness.report(one, echoing(one, [B, C]));
    const observation = echoing(two, [A, C]);
    const first = harness.report(two, observation);
    const count = harness.events.length;
    expect(harness.report(two, observation)).toEqual({ ok: true, events: [], value: answered(first) });
    expect(harness.report(two, echoing(two, [C]))).toMatchObject({ ok: false, error: { code: "stale_lease" } });
    expect(harness.renew(two)).toMatchObject({ ok: false, error: { code: "stale_lease" } });
    expect(harness.events).toHaveLength(count);
    // Still the same once the candidate was judged under its next lease.
    const again = granted(harness.lease("runner-3"));
    harness.report(again, echoing(again, [C]));
    const judged = harness.events.length;
    expect(harness.report(two, observation)).toEqual({ ok: true, events: [], value: answered(first) });
    expect(harness.events).toHaveLength(judged);
  });

  it("leases the re-queued candidate again, before newer ones, against the new best, and judges it against that best", () => {
    const { harness, one, two } = twoInParallel();
    harness.report(one, echoing(one, [B, C]));
    harness.report(two, echoing(two, [A, C]));
    harness.propose("later");
    const again = granted(harness.lease("runner-3"));
    expect(again).toMatchObject({ candidate: { candidate_id: "c2" }, compare_to: C1 });
    expect(again.fencing_token).toBeGreaterThan(two.fencing_token);
    // Fixing B alone was fewer failures than t0, but it fails A, which passes in c1: against c1 it regressed.
    expect(answered(harness.report(again, echoing(again, [A, C])))).toMatchObject({ decision: "rejected", reason: "regressed", regressed: [A] });
    expect(granted(harness.lease("runner-3")).candidate.candidate_id).toBe("c3");
  });

  it("optimize: readings paired with the old best never promote; re-measured against the new best, the candidate is rejected", () => {
    const harness = optimizeLoop();
    harness.propose("fast");
    harness.propose("less-fast");
    const one = granted(harness.lease("runner-1"));
    const two = granted(harness.lease("runner-2"));
    expect(answered(harness.report(one, measured(one, 100, 70, 8)))).toMatchObject({ decision: "promoted" });
    expect(harness.state.best.metric).toBeCloseTo(70, 0);
    // c2's readings against t0 show 15% better: judged, they would have made it the best over a faster c1.
    const stale = measured(two, 100, 85, 8);
    expect(decide(harness.state, harness.state.contract, "c2", stale, harness.now()).verdict.decision).toBe("promoted");
    expect(answered(harness.report(two, stale))).toMatchObject({ decision: "requeued" });
    const again = granted(harness.lease("runner-2"));
    expect(again.compare_to).toEqual({ candidate_id: "c1", commit: commitOf("fast") });
    expect(answered(harness.report(again, measured(again, 70, 85, 8)))).toMatchObject({ decision: "rejected", reason: "not_improved" });
    expect(harness.state.best.candidate_id).toBe("c1");
  });

  it("a runner that compared with another commit than its lease named is re-queued, though the best did not change", () => {
    const harness = new LoopHarness([A, B]);
    harness.propose("fix-a");
    const lease = granted(harness.lease());
    const elsewhere = { ...observationOf([B]), compared_to: commitOf("elsewhere") };
    expect(answered(harness.report(lease, elsewhere))).toMatchObject({
      decision: "requeued",
      detail: expect.stringContaining(`it was compared with ${commitOf("elsewhere").slice(0, 12)}`),
      best: T0,
    });
    expect(harness.events.at(-1)).toMatchObject({ type: "lease_requeued", data: { compared_to: commitOf("elsewhere"), compare_to: T0, best: T0 } });
    const again = granted(harness.lease());
    expect(answered(harness.report(again, echoing(again, [B])))).toMatchObject({ decision: "promoted" });
  });

  it("check_fixpoint: a report that does not say what it compared with is judged while the best is still its lease's (the engine compares, not the runner)", () => {
    const harness = new LoopHarness([A, B]);
    harness.propose("fix-a");
    expect(answered(harness.report(granted(harness.lease()), observationOf([B])))).toMatchObject({ decision: "promoted" });
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
  });

  it("optimize: readings that do not name the best they measured are refused invalid_observation, recording nothing; echoed, the same lease is judged", () => {
    const harness = optimizeLoop();
    harness.propose("fast");
    const lease = granted(harness.lease("runner-1"));
    expect(lease.compare_to).toEqual(T0);
    const { compared_to: _echo, ...unnamed } = measured(lease, 100, 70, 8);
    // Judged, these readings would promote: only the echo says they are readings of t0.
    expect(decide(harness.state, harness.state.contract, "c1", unnamed, harness.now()).verdict.decision).toBe("promoted");
    const count = harness.events.length;
    expect(harness.report(lease, unnamed)).toEqual({
      ok: false,
      error: { code: "invalid_observation", message: expect.stringContaining("must echo it as compared_to") },
    });
    expect(harness.events).toHaveLength(count);
    expect(harness.state.candidates.c1).toMatchObject({ status: "leased", report: null, verdict: null, pending: null, lease: { lease_id: lease.lease_id } });
    // Also when no reading was taken (a hard gate failed): an optimize report under a naming lease always echoes.
    const noReadings: Observation = { ...observationOf([A]), samples: { best: [], candidate: [], error: "a hard gate failed: the metric was not measured" } };
    expect(harness.report(lease, noReadings)).toMatchObject({ ok: false, error: { code: "invalid_observation" } });
    expect(answered(harness.report(lease, measured(lease, 100, 70, 8)))).toMatchObject({ decision: "promoted" });
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
  });

  it("optimize: a report that names no best and whose best has moved is re-queued (compared_to null), not refused: it would not be judged either way", () => {
    const harness = optimizeLoop();
    harness.propose("fast");
    harness.propose("less-fast");
    const one = granted(harness.lease("runner-1"));
    const two = granted(harness.lease("runner-2"));
    harness.report(one, measured(one, 100, 70, 8));
    const { compared_to: _echo, ...unnamed } = measured(two, 100, 85, 8);
    expect(harness.report(two, unnamed)).toMatchObject({
      ok: true,
      events: [{ type: "lease_requeued", data: { compare_to: T0, compared_to: null, best: { candidate_id: "c1" } } }],
      value: { decision: "requeued" },
    });
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
  });

  it("optimize: a lease granted before leases named compare_to is judged without an echo, as it was then", () => {
    const harness = optimizeLoop();
    harness.propose("fast");
    const lease = granted(harness.lease());
    const event = harness.events.at(-1);
    if (event?.type !== "lease_granted") throw new Error("no lease_granted");
    const { compare_to: _named, ...data } = event.data;
    harness.events[harness.events.length - 1] = { ...event, data };
    harness.state = foldEvents(harness.events) ?? harness.state;
    const { compared_to: _echo, ...unnamed } = measured(lease, 100, 70, 8);
    expect(answered(harness.report(lease, unnamed))).toMatchObject({ decision: "promoted" });
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
  });

  it("the verifier refuses a log where an optimize report that names no best was judged", () => {
    const harness = optimizeLoop();
    harness.propose("fast");
    const lease = granted(harness.lease());
    const observation = measured(lease, 100, 70, 8);
    harness.report(lease, observation);
    const at = harness.events.findIndex((event) => event.type === "observation_reported");
    const reported = harness.events[at];
    if (reported?.type !== "observation_reported") throw new Error("no observation_reported");
    const { compared_to: _echo, ...unnamed } = observation;
    const forged = sealedLog([
      ...harness.events.slice(0, at),
      { ...reported, data: { ...reported.data, observation: unnamed } },
      ...harness.events.slice(at + 1),
    ]);
    expect(rederive(forged)).toEqual({
      ok: false,
      detail: expect.stringContaining(`event ${at + 1}: cannot be applied (the engine refuses this report: the lease names t0`),
    });
  });

  it("a halted loop refuses a stale report as loop_halted; an invalid one is refused as such: neither re-queues anything", () => {
    const { harness, one, two } = twoInParallel();
    const invalid: Observation = { ...echoing(two, []), tests: { base: sha256Hex("another set"), added: [], removed: [], failing: [], skipped: [] } };
    harness.report(one, echoing(one, [B, C]));
    const count = harness.events.length;
    expect(harness.report(two, invalid)).toMatchObject({ ok: false, error: { code: "invalid_observation" } });
    expect(harness.events).toHaveLength(count);

    const halting = new LoopHarness([A]);
    halting.propose("one");
    halting.propose("two");
    const first = granted(halting.lease("runner-1"));
    const second = granted(halting.lease("runner-2"));
    halting.report(first, echoing(first, []));
    expect(halting.state.halt?.halt_reason).toBe("success_condition_met");
    const halted = halting.events.length;
    expect(halting.report(second, echoing(second, []))).toMatchObject({ ok: false, error: { code: "loop_halted" } });
    expect(halting.events).toHaveLength(halted);
  });

  it("the verifier re-derives a log with a re-queue, and names a re-queue or a judgement the engine would not have made", () => {
    const { harness, one, two } = twoInParallel();
    harness.report(one, echoing(one, [B, C]));
    harness.report(two, echoing(two, [A, C]));
    const again = granted(harness.lease("runner-3"));
    harness.report(again, echoing(again, [A, C]));
    const honest = sealedLog(harness.events);
    expect(rederive(honest)).toMatchObject({ ok: true });

    const requeued = harness.events.findIndex((event) => event.type === "lease_requeued");
    const event = harness.events[requeued];
    if (event?.type !== "lease_requeued") throw new Error("no lease_requeued");
    const withEvent = (replacement: EventDraft[]) => sealedLog([...harness.events.slice(0, requeued), ...replacement]);
    // A re-queue that names another best than the loop's.
    expect(rederive(withEvent([{ ...event, data: { ...event.data, best: T0 } }]))).toEqual({
      ok: false,
      detail: expect.stringMatching(new RegExp(`^event ${requeued + 1}: cannot be applied \\(recorded re-queue of c2`)),
    });
    // The stale report judged instead, as a coordinator without this rule would have: it promoted c2 against t0.
    const state = foldEvents(harness.events.slice(0, requeued));
    if (!state) throw new Error("no state");
    const observation = echoing(two, [A, C]);
    const judged: EventDraft[] = [
      {
        type: "observation_reported",
        at: event.at,
        data: { candidate_id: "c2", lease_id: two.lease_id, fencing_token: two.fencing_token, observation, request_hash: event.data.request_hash },
      },
    ];
    expect(rederive(withEvent(judged))).toEqual({
      ok: false,
      detail: expect.stringContaining(`event ${requeued + 1}: cannot be applied (a report under a stale comparison is judged`),
    });
    // A lease that names another best than the loop's at the time.
    const leaseAt = harness.events.findIndex((draft) => draft.type === "lease_granted" && draft.data.candidate_id === "c2");
    const lease = harness.events[leaseAt];
    if (lease?.type !== "lease_granted") throw new Error("no lease_granted");
    const misnamed = sealedLog([...harness.events.slice(0, leaseAt), { ...lease, data: { ...lease.data, compare_to: C1 } }]);
    expect(rederive(misnamed)).toEqual({ ok: false, detail: expect.stringContaining("the lease names c1 as the best, but the best was t0") });
  });
});

describe("readings are per lease, hence per runner (DESIGN §6.3, §11)", () => {
  it("after an expiry, the next runner's readings are judged alone, never pooled with the first runner's", () => {
    const harness = optimizeLoop();
    harness.propose("maybe");
    const first = granted(harness.lease("runner-a", 10_000));
    const early = measured(first, 100, 97, 5);
    expect(answered(harness.report(first, early))).toMatchObject({ decision: "need_samples", metric: { pairs: 5 } });
    harness.expire(10_000);
    const second = granted(harness.lease("runner-b"));
    expect(second).toMatchObject({ candidate: { candidate_id: "c1" }, compare_to: T0 });
    expect(second.lease_id).not.toBe(first.lease_id);
    // The first runner's readings, even cumulated, are no longer accepted.
    expect(harness.report(first, measured(first, 100, 97, 9))).toMatchObject({ ok: false, error: { code: "stale_lease" } });
    const own = measured(second, 100, 70, 6);
    const alone = decide(harness.state, harness.state.contract, "c1", own, harness.now()).verdict;
    const verdict = answered(harness.report(second, own));
    expect(verdict).toEqual(alone);
    expect(verdict).toMatchObject({ decision: "promoted", metric: { pairs: 6 } });
  });

  it("a report under a new lease with the very request hash of the old lease's is judged anew, not answered from the old one", () => {
    const harness = optimizeLoop();
    harness.propose("maybe");
    const first = granted(harness.lease("runner-a", 10_000));
    const early = measured(first, 100, 97, 5);
    harness.report(first, early, sha256Hex("same body"));
    harness.expire(10_000);
    const second = granted(harness.lease("runner-b"));
    const outcome = harness.report(second, early, sha256Hex("same body"));
    expect(outcome).toMatchObject({ ok: true, events: [{ type: "observation_reported", data: { lease_id: second.lease_id } }, { type: "verdict" }] });
  });

  it("after a re-queue too: readings taken on the old lease are dropped, the next runner's are paired with the new best", () => {
    const harness = optimizeLoop();
    harness.propose("fast");
    harness.propose("maybe");
    const one = granted(harness.lease("runner-1"));
    const two = granted(harness.lease("runner-2"));
    expect(answered(harness.report(two, measured(two, 100, 97, 5)))).toMatchObject({ decision: "need_samples" });
    harness.report(one, measured(one, 100, 70, 8));
    expect(answered(harness.report(two, measured(two, 100, 97, 9)))).toMatchObject({ decision: "requeued" });
    const three = granted(harness.lease("runner-3"));
    expect(three).toMatchObject({ candidate: { candidate_id: "c2" }, compare_to: { candidate_id: "c1" } });
    const own = measured(three, 70, 69.5, 6);
    const alone = decide(harness.state, harness.state.contract, "c2", own, harness.now()).verdict;
    expect(answered(harness.report(three, own))).toEqual(alone);
    expect(alone.metric?.pairs).toBe(6);
  });
});

// ---------------------------------------------------------------------------------------------------
// Random interleavings of leases, reports, retries and expiries across three runners.

type Action =
  | { kind: "propose"; speed: number }
  | { kind: "lease"; runner: number }
  | { kind: "report"; runner: number; failing: string[]; elsewhere: boolean }
  | { kind: "retry"; runner: number }
  | { kind: "expire" };

const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(60, 80, 97, 100, 130).map((speed) => ({ kind: "propose" as const, speed })) },
  { weight: 4, arbitrary: fc.nat(2).map((runner) => ({ kind: "lease" as const, runner })) },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant("report" as const),
      runner: fc.nat(2),
      failing: fc.subarray([A, B, C, D]),
      // One report in ten names another commit than its lease.
      elsewhere: fc.nat(9).map((roll) => roll === 0),
    }),
  },
  { weight: 1, arbitrary: fc.nat(2).map((runner) => ({ kind: "retry" as const, runner })) },
  { weight: 1, arbitrary: fc.constant({ kind: "expire" as const }) },
);
const actions = fc.array(action, { minLength: 10, maxLength: 60, size: "max" });

interface RunnerModel {
  lease: GrantedLease | null;
  /** Pairs measured so far on `lease` (cumulative, as a runner sends them). */
  pairs: number;
  last: { lease: GrantedLease; observation: Observation; outcome: Outcome<ReportAnswer> } | null;
}

describe("properties: parallel evaluation", () => {
  it("no candidate gets two final verdicts, nothing is judged on a stale comparison, every log folds and re-derives", () => {
    fc.assert(
      fc.property(actions, fc.constantFrom("check_fixpoint" as const, "optimize" as const), fc.boolean(), (steps, mode, labelled) => {
        const overrides: Partial<ContractInput> = {
          stop: { max_iterations: 1_000, no_progress: 1_000 },
          ...(labelled ? { evaluate: { labels: { pool: "bench" } } } : {}),
        };
        const harness = mode === "optimize" ? optimizeLoop(overrides) : new LoopHarness([A, B, C], overrides);
        // Runner 2 is in another pool: with labels required, it never gets a job.
        const labelsOf = (runner: number): Labels => (runner === 2 ? { pool: "other" } : { pool: "bench", os: "linux" });
        const speeds = new Map<string, number>([["t0", 100]]);
        const runners: RunnerModel[] = [0, 1, 2].map(() => ({ lease: null, pairs: 0, last: null }));

        for (const [index, step] of steps.entries()) {
          const state = harness.state;
          if (step.kind === "propose") {
            const proposed = harness.propose(`p${index}`);
            if (proposed.ok && !proposed.value.replayed) speeds.set(proposed.value.candidate_id, step.speed);
          } else if (step.kind === "lease") {
            const outcome = harness.lease(`runner-${step.runner}`, 60_000, labelsOf(step.runner));
            expect(outcome.ok).toBe(true);
            if (!outcome.ok || !outcome.value) {
              if (outcome.ok && !state.halt && !(labelled && step.runner === 2)) {
                // No job only when nothing is queued (a runner holding a live lease gets it back).
                expect(state.candidate_order.some((id) => state.candidates[id]?.status === "queued")).toBe(false);
              }
            } else {
              expect(labelled && step.runner === 2).toBe(false);
              const lease = outcome.value;
              if (outcome.events.length > 0) {
                // Oldest first, whatever came back to the queue, and against the best of the moment.
                expect(lease.candidate.candidate_id).toBe(state.candidate_order.find((id) => state.candidates[id]?.status === "queued"));
                expect(lease.compare_to).toEqual({ candidate_id: state.best.candidate_id, commit: state.best.commit });
              }
              const runner = runners[step.runner];
              if (runner && runner.lease?.lease_id !== lease.lease_id) Object.assign(runner, { lease, pairs: 0 });
            }
          } else if (step.kind === "report") {
            const runner = runners[step.runner];
            const lease = runner?.lease;
            if (!runner || !lease) continue;
            runner.pairs += runner.pairs === 0 ? 5 : 3;
            const compareSpeed = speeds.get(lease.compare_to?.candidate_id ?? "t0") ?? 100;
            const candidateSpeed = speeds.get(lease.candidate.candidate_id) ?? 100;
            const observation: Observation = {
              ...(mode === "optimize" ? measured(lease, compareSpeed, candidateSpeed, runner.pairs) : echoing(lease, step.failing)),
              ...(step.elsewhere ? { compared_to: commitOf("elsewhere") } : {}),
            };
            const outcome = harness.report(lease, observation);
            runner.last = { lease, observation, outcome };
            if (!outcome.ok) {
              // A judged lease reporting another body is a conflict (invariant 6): refused, nothing recorded.
              expect(["stale_lease", "already_reported", "idempotency_conflict", "loop_halted"]).toContain(outcome.error.code);
              continue;
            }
            // The same body as an earlier report of this lease is its retry, answered as recorded.
            if (outcome.events.length === 0) continue;
            const stale = lease.compare_to?.candidate_id !== state.best.candidate_id || step.elsewhere;
            if (outcome.value.decision === "requeued") {
              expect(stale).toBe(true);
              expect(outcome.events.map((event) => event.type)).toEqual(["lease_requeued"]);
              expect(harness.state.candidates[lease.candidate.candidate_id]).toMatchObject({ status: "queued", lease: null, verdict: null });
            } else {
              // Judged only on a fresh comparison, and on this lease's readings alone.
              expect(stale).toBe(false);
              expect(outcome.events[0]?.type).toBe("observation_reported");
              if (outcome.value.metric) expect(outcome.value.metric.pairs).toBe(runner.pairs);
            }
          } else if (step.kind === "retry") {
            const last = runners[step.runner]?.last;
            if (!last) continue;
            const retried = harness.report(last.lease, last.observation);
            // A retry never appends; when it is answered, it is answered as the first time.
            if (retried.ok) {
              expect(retried.events).toEqual([]);
              if (last.outcome.ok) expect(retried.value).toEqual(last.outcome.value);
            }
          } else {
            harness.expire(60_000);
          }
          // The state a command saw, plus the events it appended, is the fold of the whole log.
          expect(foldEvents(harness.events)).toEqual(harness.state);
        }

        const finals = new Map<string, number>();
        for (const event of harness.events) {
          if (event.type === "verdict" && event.data.decision !== "need_samples")
            finals.set(event.data.candidate_id, (finals.get(event.data.candidate_id) ?? 0) + 1);
        }
        for (const [id, count] of finals) expect(count, `${id} has ${count} final verdicts`).toBe(1);
        for (const id of harness.state.candidate_order) {
          const candidate = harness.state.candidates[id];
          expect(candidate?.verdict === null, id).toBe(candidate?.status === "queued" || candidate?.status === "leased");
        }
        expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
      }),
      { numRuns: 200 },
    );
    // 200 random histories, each folded after every step and re-derived: about 2 s on an idle machine,
    // past vitest's 5 s default on a loaded one.
  }, 60_000);
});

describe("candidate bundles", () => {
  it("a proposal's bundle is recorded with the candidate, and a log with bundles re-derives", () => {
    const harness = new LoopHarness([A, B]);
    const bundle = { sha256: sha256Hex("bundle c1"), size: 1_234 };
    const proposed = harness.propose("bundled", { bundle });
    expect(proposed.ok).toBe(true);
    expect(harness.state.candidates.c1?.bundle).toEqual(bundle);
    const event = harness.events.at(-1);
    expect(event?.type === "candidate_proposed" ? event.data.bundle : null).toEqual(bundle);
    // Without a bundle the event has no such field: logs written before bundles hash as they did.
    harness.propose("plain");
    const plain = harness.events.at(-1);
    expect(plain?.type === "candidate_proposed" && "bundle" in plain.data).toBe(false);
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });
  });
});
