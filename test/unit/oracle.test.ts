import { webcrypto } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  cancelLoop,
  createLoop,
  foldEvents,
  recheckBest,
  type EventDraft,
  type Halt,
  type Outcome,
  type Recheck,
  type RecheckAnswer,
} from "#shared/engine/index.js";
import { canonicalJson } from "#shared/canonical-json.js";
import { sha256Hex } from "#shared/hash.js";
import { monitorLowerBound } from "#shared/determinism/flake-rate.js";
import { rederive } from "#shared/receipts/verify.js";
import { IN_TOTO_PAYLOAD_TYPE, jwkThumbprint, receiptStatement, signEnvelope, verifyReceipt, type KeySet, type Signer } from "#shared/receipts/index.js";
import type { ContractInput } from "#shared/wire/contract.js";
import type { DoctorRecord } from "#shared/wire/doctor.js";
import type { ChangedLines, FullObservation, Observation } from "#shared/wire/observation.js";
import { verifyEd25519 } from "../../runner/src/receipts/receipt-crypto.js";
import { verifyIndependently } from "../support/independent-verifier.js";
import { LoopHarness, OPTIMIZE_METRIC, TEST_IDS, commitOf, contractOf, observationOf, readings, requestHashOf, sealedLog } from "./engine-harness.js";

// A trustworthy oracle (DESIGN §6.5, §6.4, §7; issue 28): the precondition's record in loop_created
// decides a new loop's first halt, a flake monitor fed by every run whose outcome was known halts
// check_flaky once the runs show the check flakier than its target, a re-run of a best is judged against
// its recorded outcome, and a candidate whose changed lines no gate ran is rejected check_inadequate.
// Every halt here must re-derive from the log alone, and a log edited to say otherwise must not.

const [A, B, C] = TEST_IDS;
const GATE = "gate:unit";
const TREE = sha256Hex("tree of t0").slice(0, 40);

type Measured = Extract<DoctorRecord, { status: "measured" }>;

/** A precondition record of `runs` fresh-clone runs that all agreed with t0, no side effects, no mutation. */
function measured(change: Partial<Measured> = {}): Measured {
  return { status: "measured", tree: TREE, runs: 10, deviations: [], rerun: { changed: [], count: 0 }, duration_ms: 1_200, ...change };
}

/** What `createLoop` answers for a t0 failing `t0Failing` under the fixture contract with `overrides`, with `doctor`. */
function creation(t0Failing: readonly string[], overrides: Partial<ContractInput>, doctor: DoctorRecord | undefined): Outcome<null> {
  const contract = contractOf(overrides);
  return createLoop({
    loop_id: "lp_0123456789abcdef01234567",
    contract,
    contract_hash: sha256Hex(canonicalJson(contract)),
    t0: { commit: commitOf("t0"), observation: observationOf(t0Failing) },
    ...(doctor === undefined ? {} : { doctor }),
    at: "2026-03-01T09:00:00.000Z",
  });
}

/** A harness whose loop was created with the precondition's record `doctor` (the harness's own creation replaced). */
function doctorLoop(t0Failing: readonly string[], overrides: Partial<ContractInput>, doctor: DoctorRecord): LoopHarness {
  const harness = new LoopHarness(t0Failing, overrides);
  const created = creation(t0Failing, overrides, doctor);
  if (!created.ok) throw new Error(created.error.message);
  harness.events.splice(0, harness.events.length, ...created.events);
  const state = foldEvents(created.events);
  if (!state) throw new Error("createLoop appended nothing");
  harness.state = state;
  return harness;
}

/** A re-run of a best's gates as its runner reports it; by default a periodic re-run of t0 that fails `failing`. */
function recheckOf(failing: readonly string[], change: Partial<Recheck> = {}): Recheck {
  return {
    idempotency_key: `recheck-${failing.join("+")}-${change.purpose ?? "periodic"}`,
    candidate_id: "t0",
    commit: commitOf("t0"),
    purpose: "periodic",
    runner_id: "runner-1",
    observation: observationOf(failing),
    ...change,
  };
}

/** Reports `recheck` to the harness's loop (as the owner), applying what the engine answers. */
function recheck(harness: LoopHarness, body: Recheck, requestHash = requestHashOf(body)): Outcome<RecheckAnswer> {
  return harness.apply(recheckBest(harness.state, { ...body, by: "owner" }, { request_hash: requestHash, at: harness.now() }));
}

/** Proposes, leases and reports one candidate with `observation`; answers the report's outcome. */
function evaluateWith(harness: LoopHarness, label: string, observation: Observation, change: { diff_sha256?: string } = {}) {
  const proposed = harness.propose(label, change);
  if (!proposed.ok) throw new Error(`propose refused: ${proposed.error.code}`);
  const leased = harness.lease();
  if (!leased.ok || !leased.value) throw new Error("no lease granted");
  return harness.report(leased.value, observation);
}

/** The log re-derived by the verifier (`loopwarden verify`'s engine check) from the harness's events, sealed. */
function rederived(events: readonly EventDraft[]): ReturnType<typeof rederive> {
  return rederive(sealedLog(events));
}

/** The events with the one at `index` replaced by `change(event)`. */
function edited(events: readonly EventDraft[], index: number, change: (event: EventDraft) => EventDraft): EventDraft[] {
  return events.map((event, at) => (at === index ? change(structuredClone(event)) : event));
}

describe("the precondition decides a new loop's first halt (loop_created.data.doctor)", () => {
  it("a measured record of runs that all agreed, without side effects, starts the loop, its runs after t0's the monitor's first samples", () => {
    const created = creation([A], {}, measured());
    expect(created).toMatchObject({ ok: true });
    if (!created.ok) return;
    expect(created.events.map((event) => event.type)).toEqual(["loop_created"]);
    const state = foldEvents(created.events);
    expect(state?.halt).toBeNull();
    expect(state?.doctor).toEqual(measured());
    expect(state?.monitor).toEqual({ samples: 9, deviations: 0, flips: {}, flips_untracked: 0 });
    expect(rederived(created.events)).toMatchObject({ ok: true });
  });

  it("a measured record with a mutation the gates caught starts the loop", () => {
    const mutate = "sed -i s/+/-/ src/add.js";
    const doctor = measured({ mutation: { command: mutate, changed_paths: 1, passing_at_t0: 4, turned_red: [C, GATE], red_count: 2 } });
    const created = creation([A], { doctor: { mutate } }, doctor);
    expect(created).toMatchObject({ ok: true, events: [{ type: "loop_created", data: { doctor } }] });
  });

  it.each<[string, Measured, Partial<ContractInput>, Halt]>([
    [
      "fresh-clone runs that disagreed with t0's halt check_flaky (14), naming the run and the test it flipped",
      measured({ runs: 10, deviations: [{ run: 4, tests: [B], count: 1 }] }),
      {},
      {
        halt_reason: "check_flaky",
        exit_class: 14,
        detail: `the precondition: 1 of 9 run(s) in fresh clones gave other outcomes than t0's (run 4; run 4 flipped ${B})`,
      },
    ],
    [
      "several deviating runs are all counted, the first one's tests named with how many there were",
      measured({
        runs: 20,
        deviations: [
          { run: 3, tests: [A, B], count: 7 },
          { run: 11, tests: [C], count: 1 },
        ],
      }),
      {},
      {
        halt_reason: "check_flaky",
        exit_class: 14,
        detail: `the precondition: 2 of 19 run(s) in fresh clones gave other outcomes than t0's (run 3, 11; run 3 flipped ${A}, ${B} (7 in all))`,
      },
    ],
    [
      "a second run in the same clone that changed outcomes halts check_has_side_effects (14), naming what changed",
      measured({ rerun: { changed: [C], count: 1 } }),
      {},
      {
        halt_reason: "check_has_side_effects",
        exit_class: 14,
        detail: `the precondition: a second run of the gates in the same clone changed ${C}: they leave state behind that changes their next run`,
      },
    ],
    [
      "a mutation that turned nothing red of what passed at t0 halts check_inadequate (15): the false fixpoint",
      measured({ mutation: { command: "rm -rf src", changed_paths: 3, passing_at_t0: 4, turned_red: [], red_count: 0 } }),
      { doctor: { mutate: "rm -rf src" } },
      {
        halt_reason: "check_inadequate",
        exit_class: 15,
        detail:
          "the precondition: the gates stayed green on the mutated tree (`rm -rf src` changed 3 path(s); all 4 passing id(s) still passed): the check cannot tell a broken change from a good one",
      },
    ],
  ])("%s", (_name, doctor, overrides, halt) => {
    const created = creation([A], overrides, doctor);
    expect(created).toMatchObject({
      ok: true,
      events: [
        { type: "loop_created", data: { doctor } },
        { type: "halted", data: halt },
      ],
    });
    if (!created.ok) return;
    expect(foldEvents(created.events)?.halt).toEqual(halt);
    // A verifier decides again from the record in the first event, and reaches the same halt.
    expect(rederived(created.events)).toMatchObject({ ok: true, state: { halt } });
  });

  it("the precondition comes first: a t0 that already passes, on a flaky check, halts check_flaky, not success", () => {
    const created = creation([], {}, measured({ deviations: [{ run: 2, tests: [A], count: 1 }] }));
    expect(created).toMatchObject({ ok: true, events: [{ type: "loop_created" }, { type: "halted", data: { halt_reason: "check_flaky" } }] });
  });

  it("a mutation with nothing passing at t0 to turn red decides nothing (the loop starts)", () => {
    const mutate = "rm -rf src";
    const doctor = measured({ mutation: { command: mutate, changed_paths: 3, passing_at_t0: 0, turned_red: [], red_count: 0 } });
    expect(creation([A], { doctor: { mutate } }, doctor)).toMatchObject({ ok: true, events: [{ type: "loop_created" }] });
  });

  it.each<[string, Partial<ContractInput>, Measured, string]>([
    ["the contract names doctor.mutate and the record ran none", { doctor: { mutate: "rm -rf src" } }, measured(), "the record ran no mutation"],
    [
      "the record ran another mutation than the contract's",
      { doctor: { mutate: "rm -rf src" } },
      measured({ mutation: { command: "rm src/a.js", changed_paths: 1, passing_at_t0: 4, turned_red: [A], red_count: 1 } }),
      "the record ran `rm src/a.js`",
    ],
    [
      "the record ran a mutation the contract does not name",
      {},
      measured({ mutation: { command: "rm -rf src", changed_paths: 1, passing_at_t0: 4, turned_red: [A], red_count: 1 } }),
      "a mutation the contract does not name",
    ],
    ["a deviation names a run the record never made", {}, measured({ runs: 3, deviations: [{ run: 5, tests: [A], count: 1 }] }), "beyond the record's runs"],
  ])("a record that does not fit the contract is refused invalid_observation and records nothing: %s", (_name, overrides, doctor, detail) => {
    const created = creation([A], overrides, doctor);
    expect(created).toEqual({
      ok: false,
      error: { code: "invalid_observation", message: expect.stringContaining(`the precondition's record does not fit the contract: `) as string },
    });
    expect(created).toMatchObject({ error: { message: expect.stringContaining(detail) } });
    expect("events" in created).toBe(false);
  });

  it("a skipped precondition starts the loop (the record says it was skipped) with an empty monitor, even where the contract names a mutation", () => {
    const created = creation([A], { doctor: { mutate: "rm -rf src" } }, { status: "skipped" });
    expect(created).toMatchObject({ ok: true, events: [{ type: "loop_created", data: { doctor: { status: "skipped" } } }] });
    if (!created.ok) return;
    expect(created.events).toHaveLength(1);
    expect(foldEvents(created.events)).toMatchObject({ halt: null, doctor: { status: "skipped" }, monitor: { samples: 0, deviations: 0 } });
  });

  describe("task_list: a task without a check of its own", () => {
    const tasks = [
      { id: "dates", title: "parse dates", check: "node checks/dates.js" },
      { id: "times", title: "parse times" },
    ];

    it.each<[string, DoctorRecord | undefined]>([
      ["measured", measured()],
      ["skipped", { status: "skipped" }],
      ["absent", undefined],
    ])("halts check_inadequate (15) at creation, naming the task, whatever the precondition (%s)", (_name, doctor) => {
      const created = creation([], { mode: "task_list", tasks }, doctor);
      expect(created).toMatchObject({ ok: true });
      if (!created.ok) return;
      expect(created.events.map((event) => event.type)).toEqual(["loop_created", "halted"]);
      const halt = foldEvents(created.events)?.halt;
      expect(halt).toEqual({
        halt_reason: "check_inadequate",
        exit_class: 15,
        detail: "task times has no check of its own: nothing could ever say it is done (give each task a check)",
      });
      expect(rederived(created.events)).toMatchObject({ ok: true, state: { halt } });
    });

    it("names every task without a check, before what the precondition measured", () => {
      const unchecked = [{ id: "a", title: "one" }, { id: "b", title: "two" }, ...tasks];
      const created = creation([], { mode: "task_list", tasks: unchecked }, measured({ rerun: { changed: [A], count: 1 } }));
      expect(created).toMatchObject({
        ok: true,
        events: [
          { type: "loop_created" },
          {
            type: "halted",
            data: {
              halt_reason: "check_inadequate",
              exit_class: 15,
              detail: "tasks a, b, times have no check of its own: nothing could ever say they are done (give each task a check)",
            },
          },
        ],
      });
    });
  });
});

describe("the flake monitor (DESIGN §6.5)", () => {
  const TARGET = 0.01;
  const contract = { determinism: { max_flake_rate: "1%" } } satisfies Partial<ContractInput>;
  const same = { diff_sha256: sha256Hex("the same diff") };

  /**
   * A loop whose precondition ran 10 clean runs (9 samples after t0's), where c1 and c2 are the same tree
   * and c2 flipped suite.b: c2 is rejected flaky and is the monitor's one deviation in 10 samples.
   */
  function flippedOnce(): LoopHarness {
    const harness = doctorLoop([A, B], contract, measured({ runs: 10 }));
    expect(harness.evaluate("first", [A, B], same)).toMatchObject({ decision: "rejected", reason: "no_improvement" });
    return harness;
  }

  it("a second evaluation of the same tree that flipped a test is rejected flaky, never promoted, and one flip in ten runs is not yet a halt", () => {
    const harness = flippedOnce();
    // Fewer failures than the best: promoted, were it not the same tree as c1 with other outcomes.
    const verdict = harness.evaluate("second", [A], same);
    expect(verdict).toEqual({
      candidate_id: "c2",
      decision: "rejected",
      reason: "flaky",
      detail: `the same tree as c1 gave different outcomes for 1 test(s): ${B}`,
      failing_before: 3,
      failing_after: 2,
      regressed: [],
    });
    expect(harness.state.best.candidate_id).toBe("t0");
    expect(monitorLowerBound(1, 10)).toBeLessThanOrEqual(TARGET);
    expect(harness.state.halt).toBeNull();
    expect(harness.state.monitor).toEqual({
      samples: 10,
      deviations: 1,
      flips: { [B]: { count: 1, runs: ["c2, a re-run of c1's tree"] } },
      flips_untracked: 0,
    });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("a second evaluation of the same tree that agrees is judged on its merits, one more clean sample", () => {
    const harness = flippedOnce();
    expect(harness.evaluate("again", [A, B], same)).toMatchObject({ decision: "rejected", reason: "no_improvement" });
    expect(harness.state.monitor).toMatchObject({ samples: 10, deviations: 0 });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("halts check_flaky exactly when the sequential lower bound crosses the target, naming the flipped test and how often", () => {
    const harness = flippedOnce();
    harness.evaluate("second", [A], same);
    // Clean periodic re-runs of t0 first: the bound falls as they add up.
    const clean = 20;
    for (let index = 0; index < clean; index++) {
      expect(recheck(harness, recheckOf([A, B], { idempotency_key: `clean-${index}` }))).toMatchObject({ ok: true, value: { changed: [], halt: null } });
    }
    expect(harness.state.monitor).toMatchObject({ samples: 30, deviations: 1 });
    // Then re-runs that flip suite.b each time: the loop halts at the first look where the bound exceeds 1%.
    let deviations = 1;
    let samples = 30;
    let expectedAt = 0;
    while (monitorLowerBound(deviations, samples) <= TARGET) {
      deviations++;
      samples++;
      expectedAt++;
    }
    expect(expectedAt).toBeGreaterThan(1);
    for (let look = 1; look <= expectedAt; look++) {
      const from = harness.events.length;
      const outcome = recheck(harness, recheckOf([A], { idempotency_key: `flip-${look}` }));
      expect(outcome).toMatchObject({ ok: true, value: { changed: [B], replayed: false } });
      if (look < expectedAt) {
        expect(harness.typesSince(from), `halted early, at flipped re-run ${look}`).toEqual(["recheck_reported"]);
        expect(harness.state.halt).toBeNull();
      } else {
        expect(harness.typesSince(from)).toEqual(["recheck_reported", "halted"]);
      }
    }
    expect(harness.state.monitor).toMatchObject({ samples, deviations });
    const halt = harness.state.halt;
    expect(halt).toMatchObject({ halt_reason: "check_flaky", exit_class: 14 });
    expect(halt?.detail).toMatch(
      new RegExp(
        `^${deviations} of ${samples} run\\(s\\) whose outcome was known gave other outcomes: the flake rate is at least \\d+\\.\\d%, above determinism\\.max_flake_rate 1\\.0%`,
      ),
    );
    expect(halt?.detail).toContain(`flipped: ${B} ${deviations}× (c2, a re-run of c1's tree, t0 re-run at iteration 2`);
    // Halted: nothing more is re-run or proposed.
    expect(recheck(harness, recheckOf([A, B], { idempotency_key: "after" }))).toMatchObject({ ok: false, error: { code: "loop_halted" } });
    expect(rederived(harness.events)).toMatchObject({ ok: true, state: { halt } });
  });

  it("a flip on a tree evaluated again that crosses the bound halts at that verdict, after rejecting it flaky", () => {
    // Without a precondition's runs the first known outcome is the first sample: one flip in one run is past any 1% bound.
    const harness = doctorLoop([A, B], contract, { status: "skipped" });
    harness.evaluate("first", [A, B], same);
    const from = harness.events.length;
    expect(harness.evaluate("second", [A], same)).toMatchObject({ decision: "rejected", reason: "flaky" });
    expect(monitorLowerBound(1, 1)).toBeGreaterThan(TARGET);
    expect(harness.typesSince(from)).toEqual(["candidate_proposed", "lease_granted", "observation_reported", "verdict", "halted"]);
    expect(harness.state.halt).toMatchObject({
      halt_reason: "check_flaky",
      exit_class: 14,
      detail: expect.stringContaining(`flipped: ${B} 1× (c2, a re-run of c1's tree)`) as string,
    });
    expect(rederived(harness.events)).toMatchObject({ ok: true, state: { halt: { halt_reason: "check_flaky" } } });
  });

  it("a candidate measured again under a new lease is compared with its own earlier report; more readings on one lease are not a new sample", () => {
    const harness = doctorLoop([], { mode: "optimize", metric: OPTIMIZE_METRIC }, measured());
    const measuredAs = (failing: string[], candidate: number, pairs: number): Observation => ({
      ...observationOf(failing),
      samples: { best: readings(100, pairs), candidate: readings(candidate, pairs) },
      compared_to: commitOf("t0"),
    });
    harness.propose("maybe");
    const first = harness.lease("runner-a", 10_000);
    if (!first.ok || !first.value) throw new Error("no lease");
    expect(harness.report(first.value, measuredAs([], 97, 5))).toMatchObject({ value: { decision: "need_samples" } });
    expect(harness.report(first.value, measuredAs([], 97, 7))).toMatchObject({ value: { decision: "need_samples" } });
    expect(harness.state.monitor).toMatchObject({ samples: 9, deviations: 0 });
    harness.expire(10_000);
    const second = harness.lease("runner-b");
    if (!second.ok || !second.value) throw new Error("no lease");
    expect(harness.report(second.value, measuredAs([A], 70, 6))).toMatchObject({
      value: {
        decision: "rejected",
        reason: "flaky",
        detail: `the same tree as its own earlier evaluation gave different outcomes for 2 test(s): ${GATE}, ${A}`,
      },
    });
    expect(harness.state.monitor).toMatchObject({ samples: 10, deviations: 1, flips: { [A]: { runs: ["c1, a re-run of c1's tree"] } } });
    expect(harness.state.halt).toBeNull();
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("a stable check is never halted, however many times its best is re-run, even with one early flip", () => {
    const harness = flippedOnce();
    harness.evaluate("second", [A], same);
    for (let index = 0; index < 300; index++) recheck(harness, recheckOf([A, B], { idempotency_key: `clean-${index}` }));
    expect(harness.state.halt).toBeNull();
    expect(harness.state.monitor).toMatchObject({ samples: 310, deviations: 1 });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("a legacy loop (no precondition in loop_created) has no monitor and keeps its rule: the first flip halts", () => {
    const harness = new LoopHarness([A, B], contract);
    expect(harness.state.monitor).toBeNull();
    harness.evaluate("first", [A, B], same);
    expect(harness.evaluate("second", [A], same)).toMatchObject({ decision: "rejected", reason: "flaky" });
    expect(harness.state.halt).toEqual({
      halt_reason: "check_flaky",
      exit_class: 14,
      detail: `the same change as c1 gave different outcomes for 1 test(s): ${B}`,
    });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("a legacy loop halts on the first periodic re-run of its best that changed an outcome", () => {
    const harness = new LoopHarness([A, B]);
    expect(recheck(harness, recheckOf([A, B], { idempotency_key: "clean" }))).toMatchObject({ ok: true, value: { halt: null } });
    const outcome = recheck(harness, recheckOf([A]));
    expect(outcome).toMatchObject({ ok: true, value: { changed: [B], halt: { halt_reason: "check_flaky" } } });
    expect(harness.state.halt).toEqual({
      halt_reason: "check_flaky",
      exit_class: 14,
      detail: `the best t0 gave other outcomes when re-run than recorded for 1 test(s): ${B}; the check no longer gives what it gave (the check or what it depends on changed, or it is flaky)`,
    });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });
});

describe("recheckBest: a re-run of a best's gates", () => {
  const loop = () => doctorLoop([A, B], {}, measured());

  it("on resume, the same outcome as recorded is recorded and nothing more", () => {
    const harness = loop();
    const from = harness.events.length;
    const outcome = recheck(harness, recheckOf([A, B], { purpose: "resume" }));
    expect(outcome).toEqual({
      ok: true,
      events: [expect.objectContaining({ type: "recheck_reported" })],
      value: { changed: [], changed_count: 0, halt: null, replayed: false },
    });
    expect(harness.typesSince(from)).toEqual(["recheck_reported"]);
    expect(harness.events.at(-1)).toMatchObject({
      type: "recheck_reported",
      data: { candidate_id: "t0", commit: commitOf("t0"), purpose: "resume", runner_id: "runner-1", by: "owner" },
    });
    expect(harness.state).toMatchObject({ halt: null, last_recheck_iteration: 0, monitor: { samples: 10, deviations: 0 } });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("on resume, any changed outcome halts check_flaky before the next agent run, naming the test (one flip is enough, the monitor aside)", () => {
    const harness = loop();
    const outcome = recheck(harness, recheckOf([A], { purpose: "resume" }));
    const halt: Halt = {
      halt_reason: "check_flaky",
      exit_class: 14,
      detail: `the best t0 gave other outcomes on resume, before the next agent run than recorded for 1 test(s): ${B}; the check no longer gives what it gave (the check or what it depends on changed, or it is flaky)`,
    };
    expect(outcome).toMatchObject({ ok: true, value: { changed: [B], halt, replayed: false } });
    expect(harness.typesSince(harness.events.length - 2)).toEqual(["recheck_reported", "halted"]);
    expect(harness.state.halt).toEqual(halt);
    expect(harness.propose("next")).toMatchObject({ ok: false, error: { code: "loop_halted" } });
    expect(rederived(harness.events)).toMatchObject({ ok: true, state: { halt } });
  });

  it("re-runs a promoted best against its own recorded outcome, at its own commit", () => {
    const harness = loop();
    expect(harness.evaluate("fix-b", [A])).toMatchObject({ decision: "promoted" });
    const c1 = { candidate_id: "c1", commit: commitOf("fix-b"), purpose: "resume" as const };
    expect(recheck(harness, recheckOf([A], c1))).toMatchObject({ ok: true, value: { changed: [], halt: null } });
    // t0's outcome is not c1's: measured against c1's record, suite.b failing again is a change.
    expect(recheck(harness, recheckOf([A, B], { ...c1, idempotency_key: "c1-drift" }))).toMatchObject({
      ok: true,
      value: { changed: [B], halt: { halt_reason: "check_flaky", detail: expect.stringContaining(`the best c1 gave other outcomes on resume`) as string } },
    });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("a rejected candidate is not a best: refused not_a_best, nothing recorded", () => {
    const harness = loop();
    expect(harness.evaluate("breaks-c", [A, B, C])).toMatchObject({ decision: "rejected", reason: "regressed" });
    const count = harness.events.length;
    const outcome = recheck(harness, recheckOf([A, B, C], { candidate_id: "c1", commit: commitOf("breaks-c") }));
    expect(outcome).toMatchObject({
      ok: false,
      error: { code: "not_a_best", message: expect.stringContaining("c1 is neither t0 nor a promoted candidate") as string },
    });
    expect(recheck(harness, recheckOf([A], { candidate_id: "c9" }))).toMatchObject({ ok: false, error: { code: "not_a_best" } });
    expect(harness.events).toHaveLength(count);
  });

  it("a re-run of another commit than the best's is refused invalid_observation, nothing recorded", () => {
    const harness = loop();
    const count = harness.events.length;
    expect(recheck(harness, recheckOf([A, B], { commit: commitOf("elsewhere") }))).toMatchObject({
      ok: false,
      error: { code: "invalid_observation", message: `t0 is commit ${commitOf("t0").slice(0, 12)}, not ${commitOf("elsewhere").slice(0, 12)}` },
    });
    expect(harness.events).toHaveLength(count);
  });

  it("a retry with the same key and body answers replayed and appends nothing; the same key with another body is a conflict", () => {
    const harness = loop();
    const body = recheckOf([A, B], { idempotency_key: "once" });
    expect(recheck(harness, body)).toMatchObject({ ok: true, value: { replayed: false } });
    const count = harness.events.length;
    expect(recheck(harness, body)).toEqual({ ok: true, events: [], value: { changed: [], changed_count: 0, halt: null, replayed: true } });
    expect(harness.events).toHaveLength(count);
    expect(harness.state.monitor).toMatchObject({ samples: 10 });
    expect(recheck(harness, { ...body, observation: observationOf([A]) })).toMatchObject({ ok: false, error: { code: "idempotency_conflict" } });
    expect(harness.events).toHaveLength(count);
  });

  it("a retry of the recheck that halted answers that halt; a new recheck of a halted loop is refused loop_halted", () => {
    const harness = loop();
    const body = recheckOf([A], { purpose: "resume" });
    const first = recheck(harness, body);
    const count = harness.events.length;
    // The retry is told what the recheck changed, as the first answer was.
    expect(first).toMatchObject({ value: { changed: [B], changed_count: 1, halt: harness.state.halt } });
    expect(recheck(harness, body)).toMatchObject({ ok: true, events: [], value: { changed: [B], changed_count: 1, halt: harness.state.halt, replayed: true } });
    expect(recheck(harness, recheckOf([A, B], { idempotency_key: "later" }))).toMatchObject({ ok: false, error: { code: "loop_halted" } });
    const cancelled = new LoopHarness([A]);
    cancelled.apply(cancelLoop(cancelled.state, { by: "owner", at: cancelled.now() }));
    expect(recheck(cancelled, recheckOf([A]))).toMatchObject({ ok: false, error: { code: "loop_halted", message: "the loop has halted (cancelled)" } });
    expect(harness.events).toHaveLength(count);
  });
});

describe("guards.coverage.changed_lines: a candidate's changed lines must be run by some gate (DESIGN §6.4)", () => {
  const contract = { guards: { coverage: { lcov: "coverage/lcov.info", changed_lines: true } } } satisfies Partial<ContractInput>;
  const covered = (against: string): ChangedLines => ({ against, measured: 12, uncovered: [], uncovered_count: 0 });

  /** An observation failing `failing`, with guard readings (coverage read) and, when given, a changed-lines reading. */
  function observed(failing: readonly string[], changedLines?: ChangedLines): FullObservation {
    return {
      ...observationOf(failing),
      guards: { protected_files: {}, coverage_percent: 90, contract: null, ...(changedLines ? { changed_lines: changedLines } : {}) },
    };
  }

  it("a candidate without a reading is rejected check_inadequate; the loop goes on and judges the next one", () => {
    const harness = new LoopHarness([A, B], contract);
    expect(evaluateWith(harness, "unread", observed([A]))).toMatchObject({
      ok: true,
      value: {
        decision: "rejected",
        reason: "check_inadequate",
        detail: "no changed-lines coverage was read (guards.coverage.changed_lines), so nothing shows the gates ran what the candidate changed",
      },
    });
    expect(harness.state.halt).toBeNull();
    expect(harness.state.best.candidate_id).toBe("t0");
    expect(evaluateWith(harness, "read", observed([A], covered(commitOf("t0"))))).toMatchObject({
      ok: true,
      value: { decision: "promoted", candidate_id: "c2" },
    });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("a reading that could not be taken, or against another commit than the candidate's parent, is rejected check_inadequate", () => {
    const harness = new LoopHarness([A, B], contract);
    expect(evaluateWith(harness, "no-report", observed([A], { ...covered(commitOf("t0")), error: "coverage/lcov.info was not written" }))).toMatchObject({
      value: { decision: "rejected", reason: "check_inadequate", detail: "changed-lines coverage could not be read: coverage/lcov.info was not written" },
    });
    expect(evaluateWith(harness, "elsewhere", observed([A], covered(commitOf("elsewhere"))))).toMatchObject({
      value: {
        decision: "rejected",
        reason: "check_inadequate",
        detail: `the changed-lines reading is against ${commitOf("elsewhere").slice(0, 12)}, not the candidate's parent ${commitOf("t0").slice(0, 12)}`,
      },
    });
    expect(harness.state.halt).toBeNull();
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("uncovered changed lines are listed by file, consecutive lines as ranges, however good the candidate's gates look", () => {
    const harness = new LoopHarness([A, B], contract);
    const reading: ChangedLines = {
      against: commitOf("t0"),
      measured: 10,
      uncovered: [
        { path: "src/a.js", lines: [3, 4, 5, 9] },
        { path: "src/b.js", lines: [12] },
      ],
      uncovered_count: 5,
    };
    expect(evaluateWith(harness, "fixes-all", observed([], reading))).toMatchObject({
      ok: true,
      value: {
        decision: "rejected",
        reason: "check_inadequate",
        detail: "5 of 10 changed line(s) are executed by no gate, so the check cannot judge them: src/a.js:3-5,9; src/b.js:12",
        failing_before: 3,
        failing_after: 0,
        regressed: [],
      },
    });
    expect(harness.state).toMatchObject({ halt: null, best: { candidate_id: "t0" } });
    // More uncovered lines than the reading lists: it says how many were left out.
    const truncated = { ...reading, uncovered: [{ path: "src/a.js", lines: [1, 2] }], uncovered_count: 7 };
    expect(evaluateWith(harness, "large", observed([A], truncated))).toMatchObject({
      value: { detail: "7 of 10 changed line(s) are executed by no gate, so the check cannot judge them: src/a.js:1-2 (and 5 more)" },
    });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("all changed lines covered: judged as usual, promoted when it fixes a test, and the next reading is against the new best's commit", () => {
    const harness = new LoopHarness([A, B], contract);
    expect(evaluateWith(harness, "fix-b", observed([A], covered(commitOf("t0"))))).toMatchObject({
      value: { decision: "promoted", reason: "fewer_failures", candidate_id: "c1" },
    });
    expect(harness.state.best.candidate_id).toBe("c1");
    // c2's parent is c1: a reading against t0 is against another commit.
    expect(evaluateWith(harness, "from-t0", observed([], covered(commitOf("t0"))))).toMatchObject({
      value: { reason: "check_inadequate", detail: expect.stringContaining(`not the candidate's parent ${commitOf("fix-b").slice(0, 12)}`) as string },
    });
    expect(evaluateWith(harness, "fix-a", observed([], covered(commitOf("fix-b"))))).toMatchObject({ value: { decision: "promoted" } });
    expect(harness.state.halt).toMatchObject({ halt_reason: "success_condition_met" });
    expect(rederived(harness.events)).toMatchObject({ ok: true });
  });

  it("a contract that does not ask judges a candidate without a reading as usual", () => {
    const harness = new LoopHarness([A, B], { guards: { coverage: { lcov: "coverage/lcov.info" } } });
    expect(evaluateWith(harness, "fix-b", observed([A]))).toMatchObject({ value: { decision: "promoted" } });
  });
});

describe("verification re-derives every oracle halt from the log, and refuses a log edited to say otherwise", () => {
  /** A loop halted on resume by a re-run of t0 that flipped suite.b. */
  function resumeHalted(): LoopHarness {
    const harness = doctorLoop([A, B], {}, measured());
    harness.evaluate("no-gain", [A, B]);
    recheck(harness, recheckOf([A], { purpose: "resume" }));
    expect(harness.state.halt?.halt_reason).toBe("check_flaky");
    return harness;
  }

  it("a recheck_reported edited so that it no longer changes anything, the halt kept, fails", () => {
    const harness = resumeHalted();
    const index = harness.events.findIndex((event) => event.type === "recheck_reported");
    expect(rederived(harness.events)).toMatchObject({ ok: true });
    // The observation a re-run that agreed with t0 is recorded with (its tests compacted against t0's, as the engine records them).
    const before = foldEvents(harness.events.slice(0, index));
    if (!before) throw new Error("no loop");
    const agreeing = recheckBest(
      before,
      { ...recheckOf([A, B], { purpose: "resume" }), by: "owner" },
      { request_hash: "0".repeat(64), at: "2026-03-01T10:00:00.000Z" },
    );
    const agreed = agreeing.ok ? agreeing.events[0] : undefined;
    if (agreed?.type !== "recheck_reported") throw new Error("no recheck_reported");
    const unchanged = edited(harness.events, index, (event) =>
      event.type === "recheck_reported" ? { ...event, data: { ...event.data, observation: agreed.data.observation } } : event,
    );
    expect(rederived(unchanged)).toEqual({
      ok: false,
      detail: `event ${index + 2}: recorded halt check_flaky, which the engine did not produce here`,
    });
  });

  it("a recheck's halt with another detail, or a recheck that changed something with its halt dropped, fails", () => {
    const harness = resumeHalted();
    const last = harness.events.length - 1;
    const reworded = edited(harness.events, last, (event) =>
      event.type === "halted" ? { ...event, data: { ...event.data, detail: "the check is fine" } } : event,
    );
    expect(rederived(reworded)).toMatchObject({ ok: false, detail: `event ${last + 1}: recorded halt check_flaky, recomputed halt check_flaky` });
    expect(rederived(harness.events.slice(0, last))).toEqual({ ok: false, detail: "the log ends before the engine's halt check_flaky" });
  });

  it("a precondition record edited to show no deviation, its halt kept, fails; one edited to deviate without its halt, too", () => {
    const flaky = creation([A], {}, measured({ deviations: [{ run: 4, tests: [B], count: 1 }] }));
    if (!flaky.ok) throw new Error(flaky.error.message);
    expect(rederived(flaky.events)).toMatchObject({ ok: true });
    const quiet = edited(flaky.events, 0, (event) => (event.type === "loop_created" ? { ...event, data: { ...event.data, doctor: measured() } } : event));
    expect(rederived(quiet)).toEqual({ ok: false, detail: "event 2: recorded halt check_flaky, which the engine did not produce here" });

    const clean = creation([A], {}, measured());
    if (!clean.ok) throw new Error(clean.error.message);
    const hidden = edited(clean.events, 0, (event) =>
      event.type === "loop_created" ? { ...event, data: { ...event.data, doctor: measured({ rerun: { changed: [C], count: 1 } }) } } : event,
    );
    expect(rederived(hidden)).toEqual({ ok: false, detail: "the log ends before the engine's halt check_has_side_effects" });
    // A record the contract refuses cannot start a verified loop either.
    const unfit = edited(clean.events, 0, (event) =>
      event.type === "loop_created"
        ? {
            ...event,
            data: { ...event.data, doctor: measured({ mutation: { command: "x", changed_paths: 1, passing_at_t0: 1, turned_red: [A], red_count: 1 } }) },
          }
        : event,
    );
    expect(rederived(unfit)).toMatchObject({ ok: false, detail: expect.stringContaining("the engine refuses this creation") as string });
  });

  it("a task-list loop's check_inadequate halt dropped from the log fails", () => {
    const created = creation([], { mode: "task_list", tasks: [{ id: "times", title: "parse times" }] }, { status: "skipped" });
    if (!created.ok) throw new Error(created.error.message);
    expect(rederived(created.events.slice(0, 1))).toEqual({ ok: false, detail: "the log ends before the engine's halt check_inadequate" });
  });

  it("a flaky verdict rewritten as a promotion fails, and so does a changed-lines rejection rewritten as one", () => {
    const same = { diff_sha256: sha256Hex("the same diff") };
    const flaky = doctorLoop([A, B], { determinism: { max_flake_rate: "1%" } }, measured());
    flaky.evaluate("first", [A, B], same);
    flaky.evaluate("second", [A], same);
    const verdictAt = flaky.events.length - 1;
    expect(flaky.events[verdictAt]).toMatchObject({ type: "verdict", data: { reason: "flaky" } });
    const promoted = edited(flaky.events, verdictAt, (event) =>
      event.type === "verdict"
        ? { ...event, data: { ...event.data, decision: "promoted", reason: "fewer_failures", detail: "failing tests 2 → 1, gates 1 → 1" } }
        : event,
    );
    expect(rederived(promoted)).toEqual({
      ok: false,
      detail: `event ${verdictAt + 1}: recorded verdict promoted (fewer_failures) for c2, recomputed verdict rejected (flaky) for c2`,
    });

    const lines = new LoopHarness([A, B], { guards: { coverage: { lcov: "coverage/lcov.info", changed_lines: true } } });
    lines.evaluate("unread", [A], {}, { guards: { protected_files: {}, coverage_percent: 90, contract: null } });
    const rejectedAt = lines.events.length - 1;
    expect(lines.events[rejectedAt]).toMatchObject({ type: "verdict", data: { reason: "check_inadequate" } });
    const accepted = edited(lines.events, rejectedAt, (event) =>
      event.type === "verdict"
        ? { ...event, data: { ...event.data, decision: "promoted", reason: "fewer_failures", detail: "failing tests 2 → 1, gates 1 → 1" } }
        : event,
    );
    expect(rederived(accepted)).toMatchObject({
      ok: false,
      detail: expect.stringContaining("recomputed verdict rejected (check_inadequate) for c1") as string,
    });
  });

  describe("a signed receipt over an oracle's halt", async () => {
    const pair = (await webcrypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
    const { x } = await webcrypto.subtle.exportKey("jwk", pair.publicKey);
    if (!x) throw new Error("no public key");
    const kid = jwkThumbprint({ x });
    const keys: KeySet = { keys: [{ kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig", status: "active" }] };
    const signer: Signer = { kid, sign: async (message) => new Uint8Array(await webcrypto.subtle.sign({ name: "Ed25519" }, pair.privateKey, message)) };

    /** Both verifiers' verdicts on a receipt signed over `drafts`, sealed; `change` edits the log handed to them after signing. */
    async function receiptOf(drafts: readonly EventDraft[], change: (records: Record<string, unknown>[]) => void = () => undefined) {
      const events = sealedLog(drafts);
      const state = foldEvents(events);
      const last = events.at(-1);
      if (!state || !last) throw new Error("empty log");
      const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" });
      const envelope = await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, signer);
      const records = JSON.parse(JSON.stringify(events)) as Record<string, unknown>[];
      change(records);
      return {
        product: await verifyReceipt({ envelope, events: records, keys, verify: verifyEd25519 }),
        independent: verifyIndependently({ envelope, eventsJsonl: records.map((event) => `${JSON.stringify(event)}\n`).join(""), keys }),
      };
    }

    it.each<[string, () => EventDraft[], string]>([
      ["a resume recheck's check_flaky", () => resumeHalted().events, "check_flaky"],
      [
        "the precondition's check_inadequate",
        () => {
          const mutate = "rm -rf src";
          const created = creation(
            [A],
            { doctor: { mutate } },
            measured({ mutation: { command: mutate, changed_paths: 2, passing_at_t0: 3, turned_red: [], red_count: 0 } }),
          );
          if (!created.ok) throw new Error(created.error.message);
          return created.events;
        },
        "check_inadequate",
      ],
    ])("verifies with the product's verifier and the independent one: %s", async (_name, drafts, reason) => {
      const { product, independent } = await receiptOf(drafts());
      expect(product.first_failure).toBeNull();
      expect(product.statement?.predicate).toMatchObject({ halt: { halt_reason: reason } });
      expect(independent).toMatchObject({ ok: true, failures: [] });
    });

    it("both refuse the receipt once the recheck's observation is edited after signing", async () => {
      const drafts = resumeHalted().events;
      const index = drafts.findIndex((event) => event.type === "recheck_reported");
      const { product, independent } = await receiptOf(drafts, (records) => {
        const data = records[index]?.["data"] as { observation: Observation };
        data.observation = observationOf([A, B]);
      });
      expect(product.ok).toBe(false);
      expect(product.first_failure).toMatch(/^chain: /);
      expect(independent.failures).toEqual([`event ${index + 1} does not match its hash`]);
    });
  });
});
