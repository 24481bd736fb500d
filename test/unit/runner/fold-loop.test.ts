import { describe, expect, it } from "vitest";
import { foldEvents, sealEvent, type ChainHead, type EventDraft } from "../../../shared/engine/index.js";
import type { Client } from "../../../runner/src/client.js";
import { foldLoop, stateAtHead } from "../../../runner/src/event-log.js";
import type { Session } from "../../../runner/src/session.js";
import { LoopHarness, TEST_IDS } from "../engine-harness.js";

// The runner folds a loop's log incrementally (DESIGN §4 invariant 9): each read fetches only the events
// after the last one folded, so a loop of N iterations costs N reads of what is new, not N² events.

/** The harness's events, sealed into the hash chain as the coordinator stores and serves them. */
function sealed(drafts: readonly EventDraft[]): string[] {
  let head: ChainHead | null = null;
  return drafts.map((draft) => {
    const event = sealEvent(draft, head);
    head = { seq: event.seq, hash: event.hash };
    return JSON.stringify(event);
  });
}

describe("foldLoop", () => {
  it("fetches only the events after the last fold and folds them onto it", async () => {
    const harness = new LoopHarness([...TEST_IDS], { stop: { max_iterations: 100, no_progress: 100 } });
    const log: string[] = [];
    const asked: number[] = [];
    const client = {
      eventLines: async (_loopId: string, after = 0) => {
        asked.push(after);
        return log.slice(after);
      },
    } as unknown as Client;
    const session = { client, loop: { loop_id: "lp_0123456789abcdef01234567" } } as unknown as Session;

    let served = 0;
    for (let iteration = 0; iteration < 4; iteration++) {
      harness.evaluate(`c${iteration}`, TEST_IDS.slice(iteration + 1));
      log.push(...sealed(harness.events).slice(log.length));
      const state = await foldLoop(session);
      expect(state).toEqual(foldEvents(harness.events));
      // Asked for exactly what followed the previous read.
      expect(asked.at(-1)).toBe(served);
      served = log.length;
    }
    // An idle read (nothing new) answers the same state without folding anything.
    expect(await foldLoop(session)).toEqual(foldEvents(harness.events));
    expect(asked.at(-1)).toBe(log.length);
  });

  it("stateAtHead reads the log only when the last summary names events the fold has not seen", async () => {
    const harness = new LoopHarness([...TEST_IDS], { stop: { max_iterations: 100, no_progress: 100 } });
    const log: string[] = [];
    let reads = 0;
    const client = {
      eventLines: async (_loopId: string, after = 0) => {
        reads++;
        return log.slice(after);
      },
    } as unknown as Client;
    harness.evaluate("c0", TEST_IDS.slice(1));
    log.push(...sealed(harness.events));
    const session = { client, loop: { loop_id: "lp_0123456789abcdef01234567", head: { seq: log.length } } } as unknown as Session;
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads).toBe(1);
    // The summary (a report's answer) names nothing newer: no request.
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads).toBe(1);
    // A verdict since, named by the next answer's head: read and folded.
    harness.evaluate("c1", TEST_IDS.slice(2));
    log.push(...sealed(harness.events).slice(log.length));
    session.loop = { ...session.loop, head: { seq: log.length, hash: "" } };
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads).toBe(2);
  });
});
