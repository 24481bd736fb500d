import { canonicalJson, canonicalMembers, joinMembers } from "../canonical-json.js";
import { sha256Hex } from "../hash.js";
import type { EventDraft, LoopEvent } from "./events.js";

/** The head of an event log: the last event's place and hash. */
export interface ChainHead {
  seq: number;
  hash: string;
}

/** `hex(sha256(utf8(JCS(event without "hash"))))`, DESIGN §9. */
export function hashEvent(event: Record<string, unknown>): string {
  const { hash: _ignored, ...body } = event;
  return sha256Hex(canonicalJson(body));
}

/** Seals a draft as the event after `previous` (null for the first event). */
export function sealEvent(draft: EventDraft, previous: ChainHead | null): LoopEvent {
  return sealEventWithBody(draft, previous).event;
}

/**
 * Seals a draft as the event after `previous` (null for the first event), and answers the sealed event's
 * canonical JSON too (`canonicalJson(event)`, hash included), the text the LoopObject stores. Each member
 * is serialised once for both the hash and the text: a loop's first event carries t0's whole test report
 * (7 MB at 100,000 tests), and writing it out again to store it cost 14-26 ms of a large creation's CPU
 * (issue 30).
 */
export function sealEventWithBody(draft: EventDraft, previous: ChainHead | null): { event: LoopEvent; body: string } {
  const unsealed = { ...draft, seq: previous ? previous.seq + 1 : 1, prev: previous ? previous.hash : "" };
  const members = canonicalMembers(unsealed);
  const hash = sha256Hex(joinMembers(members));
  const sealed = [...members, ["hash", JSON.stringify(hash)] as const].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return { event: { ...unsealed, hash } as LoopEvent, body: joinMembers(sealed) };
}

/** Result of checking a chain: its head, or the first event that breaks it. */
export type ChainCheck = { ok: true; head: ChainHead | null } | { ok: false; seq: number; message: string };

/**
 * Checks the hash chain of raw (unparsed) events in order. Raw, because hashing a re-parsed copy
 * could hide a change a parser normalises away.
 */
export function verifyChain(events: readonly Record<string, unknown>[]): ChainCheck {
  let previous: ChainHead | null = null;
  for (const [index, event] of events.entries()) {
    const expectedSeq: number = previous ? previous.seq + 1 : 1;
    // Events are named by the place they should hold, not by a (possibly tampered) seq they claim.
    const seq = expectedSeq;
    if (event.seq !== expectedSeq) {
      return { ok: false, seq, message: `event #${index + 1} has seq ${String(event.seq)}, expected ${expectedSeq}` };
    }
    const expectedPrev = previous ? previous.hash : "";
    if (event.prev !== expectedPrev) {
      return { ok: false, seq, message: `event ${seq} does not link to the previous event's hash` };
    }
    const hash = hashEvent(event);
    if (event.hash !== hash) {
      return { ok: false, seq, message: `event ${seq} does not match its hash` };
    }
    previous = { seq, hash };
  }
  return { ok: true, head: previous };
}
