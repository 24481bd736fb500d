import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { applyEvent, foldEvents } from "../../shared/engine/index.js";
import { LoopHarness, TEST_IDS } from "./engine-harness.js";

// The fold (DESIGN §6) is linear in the log's length and can go on from a state already folded, as a
// reader that fetches `?after=seq` does (DESIGN §4 invariant 9): both must give exactly the full fold.

/** A loop's log: `steps` iterations, each failing a subset of the fixture's tests, some with agent failures. */
function history(steps: { failing: number[]; agentFails: boolean }[]): LoopHarness {
  const harness = new LoopHarness([...TEST_IDS], { stop: { max_iterations: 1_000, no_progress: 1_000 } });
  steps.forEach((step, index) => {
    if (harness.state.halt) return;
    if (step.agentFails) harness.propose(`agent-${index}`, { agent: { exit_code: 1, timed_out: false, duration_ms: 5 } });
    else
      harness.evaluate(
        `step-${index}`,
        step.failing.map((i) => TEST_IDS[i % TEST_IDS.length] ?? ""),
      );
  });
  return harness;
}

const steps = fc.array(fc.record({ failing: fc.uniqueArray(fc.nat(4), { maxLength: 5 }), agentFails: fc.boolean() }), { maxLength: 25 });

describe("fold", () => {
  it("property: folding from any prefix's state gives the full fold, and leaves that state as it was", () => {
    fc.assert(
      fc.property(steps, fc.nat(), (items, cut) => {
        const { events } = history(items);
        const at = cut % (events.length + 1);
        const prefix = foldEvents(events.slice(0, at));
        const snapshot = structuredClone(prefix);
        const resumed = at === 0 ? foldEvents(events) : foldEvents(events.slice(at), prefix);
        expect(resumed).toEqual(foldEvents(events));
        expect(prefix).toEqual(snapshot);
      }),
      { numRuns: 150 },
    );
  });

  it("applyEvent leaves the state it is given as it was", () => {
    const { events } = history([
      { failing: [0], agentFails: false },
      { failing: [], agentFails: true },
      { failing: [], agentFails: false },
    ]);
    let state = foldEvents(events.slice(0, 1));
    for (const event of events.slice(1)) {
      const before = structuredClone(state);
      const after = applyEvent(state, event);
      expect(state).toEqual(before);
      state = after;
    }
    expect(state).toEqual(foldEvents(events));
  });
});
