import { describe, expect, it } from "vitest";
import { evaluatedFor } from "../../../runner/src/loop/candidate-evidence.js";
import { failingGateOf, failureLine, failureOf, storedFilesOf } from "#shared/explain/gate-failure.js";
import type { ContractInput } from "#shared/wire/contract.js";
import type { ArtifactRef, FullObservation, GateResult } from "#shared/wire/observation.js";
import { sha256Hex } from "#shared/hash.js";
import { foldEvents } from "#shared/engine/index.js";
import { LoopHarness, TEST_IDS } from "../engine-harness.js";

// What a rejection line, `explain` and `logs` point at (shared/explain/gate-failure.ts): the gate that
// decided — a hard one before a soft one that failed beside it, a soft one judged by its threshold, not
// its exit code — and the test the candidate broke before one that merely fails (maybe since t0).

const [A, B, C, D, E] = TEST_IDS;

const ref = (name: string): ArtifactRef => ({ sha256: sha256Hex(name), size: name.length, name, content_type: "text/plain; charset=utf-8" });

function gate(name: string, exit_code: number, metrics?: Record<string, number>): GateResult {
  return { name, exit_code, signal: null, timed_out: false, duration_ms: 10, log: ref(`gate-${name}.log`), ...(metrics ? { metrics } : {}) };
}

/** A full observation of TEST_IDS where `failing` fail, with these gates. */
function observed(failing: readonly string[], gates: GateResult[]): FullObservation {
  return { gates, tests: { passing: TEST_IDS.filter((id) => !failing.includes(id)), failing: [...failing] } };
}

/** A loop whose t0 observed `t0`, then one candidate reported with `candidate`: the state, and the candidate's. */
function decided(t0: FullObservation, candidate: FullObservation, contract: Partial<ContractInput> = {}) {
  const harness = new LoopHarness([A], contract);
  const created = harness.events[0];
  if (created?.type !== "loop_created") throw new Error("no loop_created");
  created.data.t0.observation = t0;
  harness.state = foldEvents([created]) ?? harness.state;
  const proposed = harness.propose("candidate");
  if (!proposed.ok) throw new Error(proposed.error.message);
  const leased = harness.lease();
  if (!leased.ok || !leased.value) throw new Error("no lease");
  const reported = harness.report(leased.value, candidate);
  if (!reported.ok) throw new Error(reported.error.message);
  return { state: harness.state, candidate: harness.state.candidates[proposed.value.candidate_id] };
}

const SOFT_FIRST: Partial<ContractInput> = {
  gates: [
    { name: "perf", run: "node perf.js", soft: { metric: "ms", max: 10 } },
    { name: "unit", run: "npm test" },
  ],
};

describe("why a candidate was rejected", () => {
  it("names the test the candidate broke, not a failure t0 already had that sorts first", () => {
    // t0 fails A; the candidate keeps A failing and breaks E: the ratchet rejects it for E.
    const { candidate } = decided(observed([A], [gate("unit", 1)]), observed([A, E], [gate("unit", 1)]));
    expect(candidate?.verdict).toMatchObject({ decision: "rejected", reason: "regressed", regressed: [E] });
    expect(failureOf(candidate)).toMatchObject({ gate: { name: "unit" }, test: E, regressed: true });
    expect(failureLine(candidate)).toBe("gate unit exit 1, broke test suite.e — its output: loopwarden logs c1");
  });

  it("names a merely failing test only when the candidate broke none, and never a gate's own id", () => {
    // t0 fails B and C; the candidate fixes nothing and breaks nothing: the first failing test is the one to read.
    const { candidate } = decided(observed([B, C], [gate("unit", 1)]), observed([B, C], [gate("unit", 1)]));
    expect(candidate?.verdict).toMatchObject({ decision: "rejected", regressed: [] });
    expect(failureOf(candidate)).toMatchObject({ test: B, regressed: false });
    expect(failureLine(candidate)).toBe("gate unit exit 1, first failing test suite.b — its output: loopwarden logs c1");
    // The gate broke (its gate:unit id regressed) and no reported test did: no test is named as broken.
    const broke = decided(observed([], [gate("unit", 0)]), { gates: [gate("unit", 2)], tests: { passing: [...TEST_IDS], failing: [] } });
    expect(broke.candidate?.verdict?.regressed).toEqual(["gate:unit"]);
    expect(failureLine(broke.candidate)).toBe("gate unit exit 2 — its output: loopwarden logs c1");
  });

  it("names the failed hard gate, not a soft gate that failed before it", () => {
    const t0 = observed([], [gate("perf", 0, { ms: 5 }), gate("unit", 0)]);
    const { candidate } = decided(t0, observed([D], [gate("perf", 1, { ms: 20 }), gate("unit", 1)]), SOFT_FIRST);
    expect(failingGateOf(candidate?.report?.gates ?? [])?.name).toBe("unit");
    expect(failureLine(candidate)).toBe("gate unit exit 1, broke test suite.d — its output: loopwarden logs c1");
  });

  it("judges a soft gate by its threshold: one that exits 1 within it passed, one that exits 0 past it failed", () => {
    const t0 = observed([], [gate("perf", 0, { ms: 5 }), gate("unit", 0)]);
    // Exit 1 within the threshold: the soft gate passed; the hard gate is the failure.
    const within = decided(t0, observed([D], [gate("perf", 1, { ms: 5 }), gate("unit", 1)]), SOFT_FIRST);
    expect(within.candidate?.report?.gates.map((entry) => [entry.name, entry.soft, entry.passed])).toEqual([
      ["perf", true, true],
      ["unit", false, false],
    ]);
    expect(failureOf(within.candidate).gate?.name).toBe("unit");
    // Exit 0 past the threshold, every hard gate green: the soft gate is what failed, and the line says how.
    const past = decided(t0, observed([], [gate("perf", 0, { ms: 50 }), gate("unit", 0)]), SOFT_FIRST);
    expect(past.candidate?.verdict).toMatchObject({ decision: "rejected", regressed: ["gate:perf"] });
    expect(failureLine(past.candidate)).toBe("gate perf (soft) missed its threshold — its output: loopwarden logs c1");
  });

  it("has nothing to say about a candidate without a report", () => {
    const harness = new LoopHarness([A]);
    harness.propose("empty", { empty: true });
    expect(failureOf(harness.state.candidates.c1)).toEqual({ gate: null, test: null, regressed: false });
    expect(failureLine(harness.state.candidates.c1)).toBeNull();
  });
});

describe("the evaluation a command is about", () => {
  it("t0 is the baseline's gates and files, from the loop's first event; a candidate its report's; none named, the latest evaluated", () => {
    const profile = ref("profile/unit.cpuprofile");
    const t0: FullObservation = { ...observed([A], [gate("unit", 1)]), artifacts: [profile] };
    const { state } = decided(t0, observed([], [gate("unit", 0)]));
    const baseline = evaluatedFor(state, "t0");
    expect(baseline).toMatchObject({ id: "t0", artifacts: [profile] });
    expect(storedFilesOf(baseline).map((file) => file.name)).toEqual(["gate-unit.log", "profile/unit.cpuprofile"]);
    expect(evaluatedFor(state, undefined).id).toBe("c1");
    expect(evaluatedFor(state, "c1").gates.map((entry) => entry.passed)).toEqual([true]);
    expect(() => evaluatedFor(state, "c9")).toThrow(/has no candidate c9 \(it has t0 and c1 … c1\)/);
  });
});
