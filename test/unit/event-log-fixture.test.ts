import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { foldEvents, LoopEvent, verifyChain } from "../../shared/engine/index.js";
import { LoopSummary } from "../../shared/wire/api.js";
import { summarizeLoop } from "../../worker/src/loop-view.js";
import { ROOT } from "../support/cli.js";

// Logs already stored must keep verifying and folding when the event format changes (DESIGN §9: the log
// is what a receipt signs). The fixture is a real log of the first format (test/fixtures/README.md).

const dir = path.join(ROOT, "test", "fixtures", "event-log");

describe("an event log of the first format", () => {
  const raw = readFileSync(path.join(dir, "v1-demo.events.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  const summary = LoopSummary.parse(JSON.parse(readFileSync(path.join(dir, "v1-demo.summary.json"), "utf8")));

  it("verifies its hash chain up to the head it was served with", () => {
    expect(verifyChain(raw)).toEqual({ ok: true, head: summary.head });
  });

  it("parses with today's event schema and folds to the summary the coordinator answered then", () => {
    const state = foldEvents(raw.map((event) => LoopEvent.parse(event)));
    if (!state) throw new Error("the fixture folded to nothing");
    expect(summarizeLoop(state, summary.head)).toEqual(summary);
    expect(state.halt?.halt_reason).toBe("success_condition_met");
    expect(state.candidate_order).toEqual(["c1", "c2", "c3"]);
  });
});
