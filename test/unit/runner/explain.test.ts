import { describe, expect, it } from "vitest";
import { explainState } from "#shared/explain/explain-state.js";
import { LoopHarness, TEST_IDS } from "../engine-harness.js";

const [A, B, C] = TEST_IDS;

describe("explain", () => {
  it("a loop that ran out of iterations while improving says: raise the limit", () => {
    const harness = new LoopHarness([A, B, C], { stop: { max_iterations: 2, no_progress: 5 } });
    harness.evaluate("one", [A, B]);
    harness.evaluate("two", [A]);
    const { lines, retry } = explainState(harness.state);
    expect(retry).toBe("raise_limit");
    expect(lines.join("\n")).toContain("halted: max_iterations_reached (exit 12)");
    expect(lines.at(-1)).toContain("still improving: raise stop.max_iterations");
  });

  it("a loop that stalled at its iteration cap says: do not just raise the limit", () => {
    const harness = new LoopHarness([A], { stop: { max_iterations: 2, no_progress: 5 } });
    harness.evaluate("one", [A]);
    harness.evaluate("two", [A]);
    const { lines, retry } = explainState(harness.state);
    expect(retry).toBe("do_not_retry");
    expect(lines.at(-1)).toContain("stalled: do not just raise the limit");
  });

  it("no progress: the evidence lists the last verdicts, and the advice is not to retry as is", () => {
    const harness = new LoopHarness([A], { stop: { max_iterations: 50, no_progress: 2 } });
    harness.evaluate("one", [A]);
    harness.propose("two", { empty: true });
    const { lines, retry } = explainState(harness.state);
    expect(retry).toBe("do_not_retry");
    const text = lines.join("\n");
    expect(text).toContain("halted: no_progress_detected (exit 17)");
    expect(text).toContain("c1 rejected (no_improvement)");
    expect(text).toContain("c2 rejected (no_change)");
  });

  it("a running loop has nothing to explain yet", () => {
    const harness = new LoopHarness([A]);
    expect(explainState(harness.state)).toMatchObject({ retry: null, lines: expect.arrayContaining([expect.stringContaining("still running")]) });
  });

  it("says what fails by kind and by name, and `nothing failing` rather than `0 failing (none)`", () => {
    const harness = new LoopHarness([A, B, C], { stop: { max_iterations: 1, no_progress: 5 } });
    harness.evaluate("one", []);
    const lines = explainState(harness.state).lines.join("\n");
    expect(lines).toMatch(/baseline \w+: 3 failing tests \(/);
    expect(lines).toMatch(/best {5}c1 at \w+: nothing failing/);
    expect(lines).not.toContain("(none)");
  });
});
