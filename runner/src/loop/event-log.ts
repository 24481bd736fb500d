import { foldEvents, LoopEvent, type LoopState, type TestBase } from "#shared/engine/index.js";
import type { Client } from "../coordinator/client.js";

/** What reads a loop's log incrementally: a client, the loop, and the state folded so far (updated by each read). */
export interface LoopReader {
  client: Client;
  loop: { loop_id: string };
  folded?: { seq: number; state: LoopState } | undefined;
}

// The runner's view of a loop's state: its public event log, folded by the same engine the coordinator
// uses, read incrementally.

/**
 * The loop's full state, folded by the same engine the coordinator uses from its public event log. Only
 * the events after the last fold are fetched (`?after=seq`) and folded onto it, so an iteration or an
 * idle poll costs what happened since, not the loop's whole history (DESIGN §4 invariant 9).
 *
 * Folds of one reader may run at once (the slots of `work --concurrency` share a loop's reader): each
 * applies, once its read is answered, only the events that follow the fold as it stands then — another
 * fold may have applied some or all of them meanwhile — so no event is folded twice and the fold only
 * moves forward. A long-poll (`waitMs`) never holds up another fold.
 */
export async function foldLoop(session: LoopReader, waitMs = 0): Promise<LoopState> {
  const after = session.folded?.seq ?? 0;
  const state = foldFetched(session, after, await session.client.eventLines(session.loop.loop_id, after, waitMs));
  if (!state) throw new Error(`loop ${session.loop.loop_id} has no events`);
  return state;
}

/**
 * Folds the event lines read after `after` (a read of the log, or what an answer carried) onto the
 * reader's fold. Only what follows the fold as it stands now is applied: a fold of the same reader may
 * have run while the lines were fetched. Answers the state (null: nothing folded yet, nor now).
 */
function foldFetched(session: LoopReader, after: number, lines: readonly string[]): LoopState | null {
  const fetched = lines.map((line) => LoopEvent.parse(JSON.parse(line)));
  const last = fetched.at(-1);
  if (last && last.seq !== after + fetched.length)
    throw new Error(`loop ${session.loop.loop_id}: events after ${after} are not contiguous (last is ${last.seq})`);
  const current = session.folded;
  if ((current?.seq ?? 0) < after) return current?.state ?? null; // a gap: left to the next read of the log
  const events = fetched.filter((event) => event.seq > (current?.seq ?? 0));
  if (events.length === 0) return current?.state ?? null;
  const state = foldEvents(events, current?.state ?? null);
  if (!state) return null;
  session.folded = { seq: events[events.length - 1]?.seq ?? after, state };
  return state;
}

/**
 * Folds the events a proposal's or a report's answer carried (`events`, after the `eventsAfter` it was
 * sent with), so the next `stateAtHead` needs no read of the log. Nothing happens when the answer
 * carried none (more had happened than an answer holds): the next fold reads the log.
 */
export function foldAnswered(session: LoopReader, eventsAfter: number | undefined, lines: readonly string[] | undefined): void {
  if (eventsAfter === undefined || lines === undefined) return;
  foldFetched(session, eventsAfter, lines);
}

/**
 * The loop's state as of the last summary the coordinator answered (`session.loop.head`, which a
 * proposal's and a report's answers carry): the log is read only when that summary names events the
 * fold has not seen, so an iteration whose own answer is the latest news costs no request. Events
 * that arrived after that answer (another runner's) are read at the next fold that needs them.
 */
export async function stateAtHead(session: LoopReader & { loop: { head: { seq: number } } }): Promise<LoopState> {
  const folded = session.folded;
  if (folded && folded.seq >= session.loop.head.seq) return folded.state;
  return foldLoop(session);
}

/** t0's collected test set, which every report is a difference from (DESIGN §8): from the folded log, read once a session. */
export async function testBaseOf(session: LoopReader): Promise<TestBase> {
  return (session.folded?.state ?? (await foldLoop(session))).t0_base;
}
