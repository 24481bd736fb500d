import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  changedOutcomes,
  compactTests,
  deltaProblem,
  inBase,
  regressedTests,
  reportedCounts,
  shrinkageOf,
  standingOf,
  testBaseOf,
  testSetDigest,
  testSetsOf,
} from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { z } from "zod";
import { FullObservation, FullTests, MAX_TESTS } from "#shared/wire/observation.js";
import { LoopHarness, contractOf, observationOf, passingIds } from "./engine-harness.js";

// Compact test sets (DESIGN §8): a report is a difference from t0's collected set, and the engine
// compares candidates through their standing against it. Every answer must be the one the full sets
// give; these properties check that against the plain set arithmetic on random suites.

const contract = contractOf();
const UNIVERSE = Array.from({ length: 12 }, (_, index) => `suite.t${index}`);
type Outcome = "passed" | "failed" | "skipped" | "absent";
const outcomeArb = fc.constantFrom<Outcome>("passed", "failed", "skipped", "absent");

/** Full test outcomes from an outcome per id of the universe. */
function fullTests(outcomes: readonly Outcome[]): FullTests {
  const of = (wanted: Outcome) => UNIVERSE.filter((_, index) => outcomes[index] === wanted);
  return { passing: of("passed"), failing: of("failed"), skipped: of("skipped") };
}

function observed(outcomes: readonly Outcome[], gateExit = 0): FullObservation {
  return { gates: [{ name: "unit", exit_code: gateExit, signal: null, timed_out: false, duration_ms: 1, log: null }], tests: fullTests(outcomes) };
}

const runArb = fc.record({ outcomes: fc.array(outcomeArb, { minLength: UNIVERSE.length, maxLength: UNIVERSE.length }), gate: fc.constantFrom(0, 1) });

/** What the full sets say of an id: passed, failed, or neither (skipped or not collected). */
function fullOutcome(observation: FullObservation, id: string): "passed" | "failed" | "absent" {
  const sets = testSetsOf(contract, observation);
  if (sets.failing.includes(id)) return "failed";
  return sets.passing.includes(id) ? "passed" : "absent";
}

const everyId = [...UNIVERSE, "gate:unit"];

describe("compact test sets", () => {
  it("a standing read from the difference is the one read from the full sets, and its passing set is the full one", () => {
    fc.assert(
      fc.property(runArb, runArb, (t0, run) => {
        const base = testBaseOf(fullTests(t0.outcomes));
        const full = observed(run.outcomes, run.gate);
        const compact = { ...full, tests: compactTests(full.tests, base) };
        const standing = standingOf(contract, compact, base);
        expect(standing).toEqual(standingOf(contract, full, base));
        expect(passingIds(standing, base)).toEqual(testSetsOf(contract, full).passing);
        expect(standing.failing).toEqual(testSetsOf(contract, full).failing);
        expect(deltaProblem(compact.tests, base)).toBeNull();
      }),
      { numRuns: 500 },
    );
  });

  it("regressions and changed outcomes are exactly the full sets' differences", () => {
    fc.assert(
      fc.property(runArb, runArb, runArb, (t0, first, second) => {
        const base = testBaseOf(fullTests(t0.outcomes));
        const a = observed(first.outcomes, first.gate);
        const b = observed(second.outcomes, second.gate);
        const standingA = standingOf(contract, { ...a, tests: compactTests(a.tests, base) }, base);
        const standingB = standingOf(contract, { ...b, tests: compactTests(b.tests, base) }, base);
        const regressed = everyId.filter((id) => fullOutcome(a, id) === "passed" && fullOutcome(b, id) !== "passed");
        const changed = everyId.filter((id) => fullOutcome(a, id) !== fullOutcome(b, id));
        expect(regressedTests(standingA, standingB, base)).toEqual(regressed.sort());
        expect(changedOutcomes(standingA, standingB, base)).toEqual(changed.sort());
      }),
      { numRuns: 500 },
    );
  });

  it("the shrinkage the guard reads is the full sets': t0-run tests skipped now, t0's tests gone, the collected count", () => {
    fc.assert(
      fc.property(runArb, runArb, (t0, run) => {
        const t0Tests = fullTests(t0.outcomes);
        const base = testBaseOf(t0Tests);
        const full = observed(run.outcomes, run.gate);
        const t0Skipped = new Set(t0Tests.skipped);
        const collectedNow = UNIVERSE.filter((_, index) => run.outcomes[index] !== "absent");
        expect(shrinkageOf({ ...full, tests: compactTests(full.tests, base) }, base, t0Skipped)).toEqual({
          nowSkipped: UNIVERSE.filter((id, index) => inBase(base, id) && !t0Skipped.has(id) && run.outcomes[index] === "skipped").sort(),
          missing: base.ids.filter((id) => !collectedNow.includes(id)),
          collected: collectedNow.length,
        });
      }),
      { numRuns: 300 },
    );
  });

  it("gives t0's base and t0's own difference from it whatever order the runner sent the ids in (sorted lists are merged, others sorted)", () => {
    // Outcomes with repeats across the lists, derived ids, and ids whose sort order differs from their
    // numeric order ("t10" before "t2"), in the order given or sorted as the runner sends them.
    const idArb = fc.oneof(fc.constantFrom(...UNIVERSE, "gate:unit", "task:a", "suite.t10", "suite.t2"), fc.string({ unit: "binary", maxLength: 4 }));
    const listArb = fc.array(idArb, { maxLength: 12 });
    fc.assert(
      fc.property(listArb, listArb, listArb, (passingRaw, failingRaw, skippedRaw) => {
        const failing = [...new Set(failingRaw)];
        const passing = [...new Set(passingRaw)].filter((id) => !failing.includes(id));
        const skipped = [...new Set(skippedRaw)];
        const given: FullTests = { passing, failing, skipped };
        const sorted: FullTests = { passing: [...passing].sort(), failing: [...failing].sort(), skipped: [...skipped].sort() };
        const expectedIds = [...new Set([...passing, ...failing, ...skipped])].filter((id) => !id.startsWith("gate:") && !id.startsWith("task:")).sort();
        for (const tests of [given, sorted]) {
          const base = testBaseOf(tests);
          expect(base.ids).toEqual(expectedIds);
          expect(base.digest).toBe(testSetDigest(expectedIds));
          // Membership (a search of the sorted ids) answers for every id, collected or not.
          for (const id of [...UNIVERSE, ...passingRaw, ...failing, ...skippedRaw, "gate:unit", ""]) expect(inBase(base, id)).toBe(expectedIds.includes(id));
          // The same base again is the one computed before (a creation folds its event twice).
          expect(testBaseOf(tests)).toBe(base);
          // t0's own difference (the shortcut for the outcomes its base was made of) is the one a copy of
          // them gets, read the long way against that base.
          const copy: FullTests = { passing: [...tests.passing], failing: [...tests.failing], skipped: [...(tests.skipped ?? [])] };
          expect(compactTests(tests, base)).toEqual(compactTests(copy, base));
          expect(compactTests(tests, base)).toMatchObject({ added: [], removed: [] });
        }
      }),
      { numRuns: 500 },
    );
  });

  it("names a test set by the sha256 of its sorted ids as a JSON array, so anyone can recompute it", () => {
    expect(testSetDigest(["a.first", "b.second"])).toBe(sha256Hex('["a.first","b.second"]'));
    const base = testBaseOf({ passing: ["b.second", "gate:unit"], failing: ["a.first"], skipped: ["a.first"] });
    expect(base.ids).toEqual(["a.first", "b.second"]);
    expect(base.digest).toBe(testSetDigest(["a.first", "b.second"]));
  });

  it("refuses a difference that does not fit the base, saying how", () => {
    const base = testBaseOf({ passing: ["t.a", "t.b"], failing: ["t.c"] });
    const delta = { base: base.digest, added: [], removed: [], failing: [], skipped: [] };
    expect(deltaProblem({ ...delta, base: "f".repeat(64) }, base)).toMatch(/not from this loop's t0 collected set/);
    expect(deltaProblem({ ...delta, added: ["t.a"] }, base)).toMatch(/1 added test\(s\) are already in t0's collected set: t\.a/);
    expect(deltaProblem({ ...delta, removed: ["t.z"] }, base)).toMatch(/1 removed test\(s\) are not in t0's collected set: t\.z/);
    expect(deltaProblem({ ...delta, removed: ["t.a"], failing: ["t.a"] }, base)).toMatch(/1 failing or skipped test\(s\) are not collected: t\.a/);
    expect(deltaProblem({ ...delta, added: ["t.new"], failing: ["t.new", "t.b"] }, base)).toBeNull();
  });

  it("counts the reported tests apart from the gates' own", () => {
    const base = testBaseOf({ passing: ["t.a", "t.b"], failing: ["t.c"] });
    const standing = standingOf(contract, observed([]), base);
    expect(standing.passing_count).toBe(1);
    expect(reportedCounts(standing)).toEqual({ passing: 0, failing: 0 });
    const green = standingOf(contract, { ...observed([]), tests: { passing: ["t.a", "t.b", "t.c"], failing: [] } }, base);
    expect(reportedCounts(green)).toEqual({ passing: 3, failing: 0 });
  });
});

describe("reports as differences", () => {
  it("records a report sent in full as its difference from t0's collected set, and decides the same", () => {
    const harness = new LoopHarness(["suite.a", "suite.b"]);
    harness.propose("full");
    const leased = harness.lease("runner");
    if (!leased.ok || !leased.value) throw new Error("no lease");
    const verdict = harness.report(leased.value, observationOf(["suite.b"]));
    expect(verdict).toMatchObject({ ok: true, value: { decision: "promoted", reason: "fewer_failures" } });
    const reported = harness.events.find((event) => event.type === "observation_reported");
    if (reported?.type !== "observation_reported") throw new Error("no observation recorded");
    expect(reported.data.observation.tests).toEqual({ base: harness.state.t0_base.digest, added: [], removed: [], failing: ["suite.b"], skipped: [] });
  });

  it("refuses a difference from another set, and records nothing", () => {
    const harness = new LoopHarness(["suite.a"]);
    harness.propose("other-base");
    const leased = harness.lease("runner");
    if (!leased.ok || !leased.value) throw new Error("no lease");
    const count = harness.events.length;
    const tests = { base: "0".repeat(64), added: [], removed: [], failing: [], skipped: [] };
    expect(harness.report(leased.value, { ...observationOf([]), tests })).toMatchObject({ ok: false, error: { code: "invalid_observation" } });
    expect(harness.events).toHaveLength(count);
    // The same lease still takes a well-formed report.
    expect(harness.report(leased.value, observationOf([]))).toMatchObject({ ok: true, value: { decision: "promoted" } });
  });
});

describe("test id lists on the wire", () => {
  const Tests = FullTests;

  it("accepts ids of 1 to 1,000 characters and refuses anything else, naming the element", () => {
    expect(Tests.safeParse({ passing: ["a", "x".repeat(1_000)], failing: [] }).success).toBe(true);
    for (const bad of ["", "x".repeat(1_001), 7, null]) {
      const parsed = Tests.safeParse({ passing: ["a", bad], failing: [] });
      expect(parsed.success).toBe(false);
      expect(parsed.error?.issues.map((issue) => issue.path)).toEqual([["passing", 1]]);
    }
    expect(Tests.safeParse({ passing: "a", failing: [] }).error?.issues[0]?.message).toBe("expected an array of test ids");
  });

  it("refuses a list over MAX_TESTS, and names at most ten bad ids of a list however many there are", () => {
    const over = Tests.safeParse({ passing: Array.from({ length: MAX_TESTS + 1 }, (_, index) => `t${index}`), failing: [] });
    expect(over.error?.issues.map((issue) => issue.message)).toEqual([`at most ${MAX_TESTS} test ids, not ${MAX_TESTS + 1}`]);
    const many = Tests.safeParse({ passing: Array.from({ length: 5_000 }, () => ""), failing: [] });
    expect(many.error?.issues).toHaveLength(10);
  });

  it("is described in JSON Schema as the array of strings it accepts", () => {
    expect(z.toJSONSchema(Tests, { io: "input", unrepresentable: "any" })).toMatchObject({
      properties: { passing: { type: "array", items: { type: "string", minLength: 1, maxLength: 1_000 }, maxItems: MAX_TESTS } },
    });
  });
});

describe("an observation's tests in full", () => {
  const gates = [{ name: "unit", exit_code: 0, signal: null, timed_out: false, duration_ms: 1, log: null }];
  const problem = (passing: string[], failing: string[]) => FullObservation.safeParse({ gates, tests: { passing, failing } }).error?.issues[0]?.message;

  it("refuses a test both passing and failing, whether the passing ids come sorted (searched) or not (a set)", () => {
    const sorted = Array.from({ length: 1_000 }, (_, index) => `t${String(index).padStart(4, "0")}`);
    expect(problem(sorted, ["t0500"])).toBe('test "t0500" is both passing and failing');
    expect(problem([...sorted].reverse(), ["zz", "t0999"])).toBe('test "t0999" is both passing and failing');
    expect(problem(sorted, ["t0500x", "a"])).toBeUndefined();
    expect(problem([...sorted].reverse(), ["t0500x"])).toBeUndefined();
  });
});
