import { describe, expect, it } from "vitest";
import { changedTests, compareRuns, outcomeReader } from "#shared/determinism/flips.js";

const run = (passing: string[], failing: string[] = []) => ({ passing, failing });

describe("comparing repeated runs of one commit", () => {
  it("identical runs: no failures, nothing flips", () => {
    const same = run(["gate:unit", "t.a"], ["t.b"]);
    expect(compareRuns([same, same, same])).toMatchObject({ runs: 3, failures: 0, deviating_runs: [], flipping: [] });
  });

  it("a test failing in runs 2 and 5 of 8: those two runs deviate from the consensus, and it flips with its gate", () => {
    const green = run(["gate:unit", "t.flaky", "t.stable"]);
    const red = run(["t.stable"], ["gate:unit", "t.flaky"]);
    const comparison = compareRuns([green, red, green, green, red, green, green, green]);
    expect(comparison.failures).toBe(2);
    expect(comparison.deviating_runs).toEqual([2, 5]);
    expect(comparison.flipping).toEqual([
      { id: "gate:unit", consensus: "passed", passed: [1, 3, 4, 6, 7, 8], failed: [2, 5], missing: [] },
      { id: "t.flaky", consensus: "passed", passed: [1, 3, 4, 6, 7, 8], failed: [2, 5], missing: [] },
    ]);
  });

  it("judges against the majority, not the first run: an odd first run is the one deviation", () => {
    const comparison = compareRuns([run([], ["t.a"]), run(["t.a"]), run(["t.a"])]);
    expect(comparison).toMatchObject({ failures: 1, deviating_runs: [1], consensus: { "t.a": "passed" } });
  });

  it("breaks a tie in favour of the outcome seen first", () => {
    const comparison = compareRuns([run([], ["t.a"]), run(["t.a"])]);
    expect(comparison).toMatchObject({ failures: 1, deviating_runs: [2], consensus: { "t.a": "failed" } });
  });

  it("counts a test a run did not report (e.g. a gate skipped after an earlier failure) as an outcome of its own", () => {
    const comparison = compareRuns([run(["t.a", "t.b"]), run(["t.a"]), run(["t.a", "t.b"])]);
    expect(comparison.flipping).toEqual([{ id: "t.b", consensus: "passed", passed: [1, 3], failed: [], missing: [2] }]);
    expect(comparison.failures).toBe(1);
  });

  it("counts a run once however many of its tests deviate", () => {
    const comparison = compareRuns([run(["a", "b"]), run([], ["a", "b"]), run(["a", "b"])]);
    expect(comparison).toMatchObject({ failures: 1, deviating_runs: [2] });
    expect(comparison.flipping.map((flip) => flip.id)).toEqual(["a", "b"]);
  });

  it("names the tests whose outcome changed between a run and its rerun", () => {
    expect(changedTests(run(["gate:unit", "a"]), run(["a"], ["gate:unit"]))).toEqual([{ id: "gate:unit", before: "passed", after: "failed" }]);
    expect(changedTests(run(["a"]), run(["a"]))).toEqual([]);
  });
});

describe("a run's outcome of an id", () => {
  it("is passed, failed (failing wins over passing) or missing", () => {
    const outcomeOf = outcomeReader({ passing: ["a", "both"], failing: ["b", "both"] });
    expect(["a", "b", "both", "c"].map(outcomeOf)).toEqual(["passed", "failed", "failed", "missing"]);
  });
});
