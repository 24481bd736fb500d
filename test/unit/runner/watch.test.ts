import { describe, expect, it } from "vitest";
import { describeEvent } from "../../../runner/src/commands/watch.js";
import type { LoopEvent } from "#shared/engine/index.js";

const verdict = (decision: "promoted" | "rejected" | "need_samples", reason: "improved" | "not_improved" | "undecided"): LoopEvent => ({
  type: "verdict",
  at: "2026-03-01T09:00:05.000Z",
  seq: 7,
  prev: "a".repeat(64),
  hash: "b".repeat(64),
  data: { candidate_id: "c2", decision, reason, detail: "parse_ms 3.0% better over 5 pair(s)", failing_before: 0, failing_after: 0, regressed: [] },
});

describe("watch lines", () => {
  it.each([
    ["promoted", "improved", "c2 promoted (improved)"],
    ["rejected", "not_improved", "c2 rejected (not_improved)"],
    ["need_samples", "undecided", "c2 needs more samples (undecided)"],
  ] as const)("a %s verdict reads as such", (decision, reason, expected) => {
    const line = describeEvent(verdict(decision, reason));
    expect(line).toContain(expected);
    expect(line).toContain("#7 09:00:05");
  });
});
