import { describe, expect, it } from "vitest";
import { foldEvents, sealEvent, type ChainHead, type EventDraft } from "#shared/engine/index.js";
import type { Client } from "../../../runner/src/coordinator/client.js";
import { foldAnswered, foldLoop, stateAtHead, testBaseOf } from "../../../runner/src/loop/event-log.js";
import type { Session } from "../../../runner/src/loop/session.js";
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

/** A loop whose first candidate is decided, its log served by a client that counts the reads. */
function decidedLoop() {
  const harness = new LoopHarness([...TEST_IDS], { stop: { max_iterations: 100, no_progress: 100 } });
  const log: string[] = [];
  let count = 0;
  const client = {
    eventLines: async (_loopId: string, after = 0) => {
      count++;
      return log.slice(after);
    },
  } as unknown as Client;
  harness.evaluate("c0", TEST_IDS.slice(1));
  log.push(...sealed(harness.events));
  const session = { client, loop: { loop_id: "lp_0123456789abcdef01234567", head: { seq: log.length } } } as unknown as Session;
  return { harness, log, session, reads: () => count };
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
    const { harness, log, session, reads } = decidedLoop();
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads()).toBe(1);
    // The summary (a report's answer) names nothing newer: no request.
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads()).toBe(1);
    // A verdict since, named by the next answer's head: read and folded.
    harness.evaluate("c1", TEST_IDS.slice(2));
    log.push(...sealed(harness.events).slice(log.length));
    session.loop = { ...session.loop, head: { seq: log.length, hash: "" } };
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads()).toBe(2);
  });

  it("folds the events an answer carried, so stateAtHead needs no read; an answer that skips events is left to the next read", async () => {
    const { harness, log, session, reads } = decidedLoop();
    await foldLoop(session);
    expect(reads()).toBe(1);

    // A proposal and its report: their answers carry what followed the fold.
    harness.evaluate("c1", TEST_IDS.slice(2));
    const after = log.length;
    log.push(...sealed(harness.events).slice(after));
    foldAnswered(session, after, log.slice(after));
    session.loop = { ...session.loop, head: { seq: log.length, hash: "" } };
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads()).toBe(1);
    // The same lines again (a retried request's answer) fold nothing twice.
    foldAnswered(session, after, log.slice(after));
    expect(session.folded?.state).toEqual(foldEvents(harness.events));

    // An answer to a request sent after events this fold has not seen: not folded (there would be a gap);
    // the next stateAtHead reads the log instead.
    harness.evaluate("c2", TEST_IDS.slice(3));
    const seen = log.length;
    log.push(...sealed(harness.events).slice(seen));
    foldAnswered(session, seen + 1, log.slice(seen + 1));
    expect(session.folded?.seq).toBe(seen);
    session.loop = { ...session.loop, head: { seq: log.length, hash: "" } };
    expect(await stateAtHead(session)).toEqual(foldEvents(harness.events));
    expect(reads()).toBe(2);
    // No events carried (not asked for, or too many): nothing changes.
    foldAnswered(session, log.length, undefined);
    expect(session.folded?.seq).toBe(log.length);
  });

  // `work --concurrency N` shares one reader per loop between its slots: two folds may be out at once.
  it("two folds of one reader at once, answered in either order, both resolve to the loop's state: no event folded twice", async () => {
    const harness = new LoopHarness([...TEST_IDS], { stop: { max_iterations: 100, no_progress: 100 } });
    harness.evaluate("c0", TEST_IDS.slice(1));
    const log = sealed(harness.events);
    // Each read is held until the test answers it, so both are out before either is folded.
    const pending: { after: number; answer: () => void }[] = [];
    const client = {
      eventLines: (_loopId: string, after = 0) => new Promise<string[]>((resolve) => pending.push({ after, answer: () => resolve(log.slice(after)) })),
    } as unknown as Client;
    const session = { client, loop: { loop_id: "lp_0123456789abcdef01234567" } } as unknown as Session;
    const expected = foldEvents(harness.events);
    if (!expected) throw new Error("no state");

    const first = foldLoop(session);
    const base = testBaseOf(session);
    await Promise.resolve();
    expect(pending.map((read) => read.after)).toEqual([0, 0]);
    // The later read answered first; then the earlier one, whose events are all folded by now.
    pending[1]?.answer();
    expect(await base).toEqual(expected.t0_base);
    pending[0]?.answer();
    expect(await first).toEqual(expected);
    expect(session.folded?.seq).toBe(log.length);

    // New events, and two reads out again: one from the fold as it was, one that started later.
    harness.evaluate("c1", TEST_IDS.slice(2));
    log.push(...sealed(harness.events).slice(log.length));
    const now = foldEvents(harness.events);
    const again = [foldLoop(session), foldLoop(session)];
    await Promise.resolve();
    pending[2]?.answer();
    pending[3]?.answer();
    expect(await Promise.all(again)).toEqual([now, now]);
    expect(session.folded?.seq).toBe(log.length);
    // An idle read after them asks only for what follows the whole log.
    const idle = foldLoop(session);
    await Promise.resolve();
    expect(pending[4]?.after).toBe(log.length);
    pending[4]?.answer();
    expect(await idle).toEqual(now);
  });
});
