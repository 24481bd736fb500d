import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { applyEvent, decide, foldEvents, LoopEvent, verifyChain, type LoopState } from "#shared/engine/index.js";
import { canonicalJson } from "#shared/canonical-json.js";
import { sha256Hex } from "#shared/hash.js";
import { rederive } from "#shared/receipts/verify.js";
import { receiptStatement } from "#shared/receipts/statement.js";
import { Contract } from "#shared/wire/contract.js";
import { LoopSummary } from "#shared/wire/api.js";
import { summarizeLoop } from "../../worker/src/loop/loop-view.js";
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

  it("re-derives every recorded verdict from its observation in full with today's engine (what a verifier will do)", () => {
    const events = raw.map((line) => LoopEvent.parse(line));
    let state: LoopState | null = null;
    let reported: Extract<LoopEvent, { type: "observation_reported" }> | null = null;
    let rederived = 0;
    for (const event of events) {
      if (event.type === "verdict" && state && reported?.data.candidate_id === event.data.candidate_id) {
        expect(decide(state, state.contract, event.data.candidate_id, reported.data.observation, event.at).verdict).toEqual(event.data);
        rederived++;
      }
      if (event.type === "observation_reported") reported = event;
      state = applyEvent(state, event);
    }
    expect(rederived).toBe(events.filter((event) => event.type === "observation_reported").length);
    expect(rederived).toBeGreaterThan(0);
  });

  it("re-derives with the verifier, and its contract, parsed by today's schema, still hashes to the hash pinned then", () => {
    const events = raw.map((line) => LoopEvent.parse(line));
    expect(rederive(events)).toMatchObject({ ok: true });
    const created = events[0];
    if (created?.type !== "loop_created") throw new Error("the fixture does not start with loop_created");
    const pinned = (raw[0] as { data: { contract: unknown } }).data.contract;
    expect(sha256Hex(canonicalJson(Contract.parse(pinned)))).toBe(created.data.contract_hash);
    // Its leases name no compare_to: they fold with none, and their reports were judged as they were.
    expect(events.filter((event) => event.type === "lease_granted").every((event) => event.data.compare_to === undefined)).toBe(true);
  });

  it("folds with no confinement recorded: a receipt of it says every agent run and evaluation (t0, c1, c3; c2 was empty) recorded none", () => {
    const state = foldEvents(raw.map((event) => LoopEvent.parse(event)));
    if (!state) throw new Error("the fixture folded to nothing");
    expect(state.confinement.agent.runs).toEqual({ bwrap: 0, none: 0, unrecorded: 3, unobserved: 0 });
    expect(state.confinement.exec.evaluations).toEqual({ bwrap: 0, none: 0, unrecorded: 3 });
    const { confinement } = receiptStatement(state, summary.head, { kind: "final", issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" }).predicate;
    expect(confinement.fully_confined).toBe(false);
    expect(confinement.summary).toBe(
      "3 of 3 agent runs recorded no confinement (a runner older than the agent zone); 3 of 3 evaluations recorded no confinement (a runner older than the exec zone)",
    );
  });
});
