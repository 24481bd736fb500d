import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { sealEvent, sealEventWithBody, verifyChain, type ChainHead, type LoopEvent } from "#shared/engine/index.js";
import { LoopHarness, TEST_IDS, observationOf } from "./engine-harness.js";

const [A, B] = TEST_IDS;

/** A short real log: creation, a promotion, a lease that expired and was re-leased, a rejection. */
function sealedLog(): LoopEvent[] {
  const harness = new LoopHarness([A, B]);
  harness.evaluate("one", [A]);
  harness.propose("two");
  harness.lease("ghost", 1_000);
  harness.expire(1_000);
  const leased = harness.lease("runner-2");
  if (!leased.ok || !leased.value) throw new Error("no lease");
  harness.report(leased.value, observationOf([A]));
  let head: ChainHead | null = null;
  return harness.events.map((draft) => {
    const event = sealEvent(draft, head);
    head = { seq: event.seq, hash: event.hash };
    return event;
  });
}

/** A deep copy through JSON: what a verifier reads from the JSONL log. */
function copyOf(events: readonly LoopEvent[]): Record<string, unknown>[] {
  return JSON.parse(JSON.stringify(events)) as Record<string, unknown>[];
}

/** An independent RFC 8785 serialisation of the plain JSON an event holds (strings, integers, booleans, null). */
function jcs(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(jcs).join(",")}]`;
  const entries = Object.entries(value as Record<string, unknown>).filter(([, member]) => member !== undefined);
  // UTF-16 code unit order: compare with < on the strings themselves, never localeCompare.
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([key, member]) => `${JSON.stringify(key)}:${jcs(member)}`).join(",")}}`;
}

/** Changes one character of a string: the last one, to a different character. */
function flipLast(text: string): string {
  if (text.length === 0) return "0";
  const last = text.at(-1);
  return text.slice(0, -1) + (last === "0" ? "1" : "0");
}

/** Changes one character of the first string found depth-first inside `value`. */
function tamperFirstString(value: unknown): unknown {
  if (typeof value === "string") return flipLast(value);
  if (Array.isArray(value)) return value.map((item, index) => (index === 0 ? tamperFirstString(item) : item));
  if (value && typeof value === "object") {
    const entries = Object.entries(value);
    const index = entries.findIndex(([, member]) => JSON.stringify(member).includes('"'));
    return Object.fromEntries(entries.map(([key, member], at) => [key, at === index ? tamperFirstString(member) : member]));
  }
  return value;
}

const TAMPERINGS: [field: string, tamper: (event: Record<string, unknown>) => void][] = [
  ["data", (event) => void (event.data = tamperFirstString(event.data))],
  ["at", (event) => void (event.at = String(event.at).replace(/\d(?=\.\d{3}Z$)/, (digit) => (digit === "0" ? "1" : "0")))],
  ["type", (event) => void (event.type = flipLast(String(event.type)))],
  ["prev", (event) => void (event.prev = flipLast(String(event.prev)))],
  ["hash", (event) => void (event.hash = flipLast(String(event.hash)))],
];

describe("the event hash chain", () => {
  it("seals events with seq from 1 and prev linking to the previous hash", () => {
    const log = sealedLog();
    expect(log.map((event) => event.seq)).toEqual(log.map((_event, index) => index + 1));
    expect(log[0]?.prev).toBe("");
    for (let index = 1; index < log.length; index++) expect(log[index]?.prev).toBe(log[index - 1]?.hash);
  });

  it("hashes each event as hex(sha256(JCS(event without hash))), computed independently", () => {
    for (const event of sealedLog()) {
      const { hash, ...body } = event;
      const expected = createHash("sha256").update(jcs(body), "utf8").digest("hex");
      expect(hash).toBe(expected);
    }
  });

  it("seals with the stored body too: the sealed event's JCS, hash included", () => {
    const harness = new LoopHarness([A, B]);
    harness.evaluate("one", [A]);
    let head: ChainHead | null = null;
    for (const draft of harness.events) {
      const { event, body } = sealEventWithBody(draft, head);
      expect(event).toEqual({ ...draft, seq: (head?.seq ?? 0) + 1, prev: head?.hash ?? "", hash: event.hash });
      // The text the LoopObject stores and serves: canonical, so it hashes (less its hash) to the hash it holds.
      expect(body).toBe(jcs(event));
      const { hash, ...rest } = JSON.parse(body) as LoopEvent;
      expect(createHash("sha256").update(jcs(rest), "utf8").digest("hex")).toBe(hash);
      head = { seq: event.seq, hash: event.hash };
    }
  });

  it("verifies an untouched log to its head, also after a round trip through JSON", () => {
    const log = sealedLog();
    const last = log.at(-1);
    expect(log.length).toBeGreaterThanOrEqual(8);
    expect(verifyChain(log)).toEqual({ ok: true, head: { seq: last?.seq, hash: last?.hash } });
    expect(verifyChain(copyOf(log))).toEqual({ ok: true, head: { seq: last?.seq, hash: last?.hash } });
    expect(verifyChain([])).toEqual({ ok: true, head: null });
  });

  const log = sealedLog();
  const cases = log.flatMap((event) => TAMPERINGS.map(([field, tamper]) => ({ seq: event.seq, type: event.type, field, tamper })));

  it.each(cases)("names event $seq ($type) when one character of its $field changes", ({ seq, field, tamper }) => {
    const events = copyOf(log);
    const target = events[seq - 1];
    if (!target) throw new Error("no such event");
    const before = JSON.stringify(target);
    tamper(target);
    expect(JSON.stringify(target), `the ${field} tampering changed nothing`).not.toBe(before);
    expect(verifyChain(events)).toMatchObject({ ok: false, seq });
  });

  it.each(log.map((event) => event.seq))("fails when the seq of event %i changes", (seq) => {
    const events = copyOf(log);
    const target = events[seq - 1];
    if (!target) throw new Error("no such event");
    target.seq = seq + 1;
    const check = verifyChain(events);
    // Named by the place it holds, not by the seq it now claims (which is another event's).
    expect(check).toMatchObject({ ok: false, seq });
    if (!check.ok) expect(check.message).toContain(`event #${seq} `);
  });

  it("fails when two events swap places", () => {
    const events = copyOf(log);
    const [third, fourth] = [events[2], events[3]];
    if (!third || !fourth) throw new Error("log too short");
    events[2] = fourth;
    events[3] = third;
    expect(verifyChain(events).ok).toBe(false);
  });

  it.each(log.slice(0, -1).map((event) => event.seq))("fails when event %i is dropped", (seq) => {
    const events = copyOf(log).filter((event) => event.seq !== seq);
    expect(verifyChain(events).ok).toBe(false);
  });

  it("a log cut short still chains, but only to an earlier head, which the signed head exposes", () => {
    const last = log.at(-1);
    const previous = log.at(-2);
    expect(verifyChain(log.slice(0, -1))).toEqual({ ok: true, head: { seq: previous?.seq, hash: previous?.hash } });
    expect(previous?.hash).not.toBe(last?.hash);
  });

  it("fails when an event is re-sealed after tampering but the next one still links to the old hash", () => {
    const events = copyOf(log);
    const target = events[1];
    if (!target) throw new Error("log too short");
    target.at = "2030-01-01T00:00:00.000Z";
    const { hash: _old, ...body } = target;
    target.hash = createHash("sha256").update(jcs(body), "utf8").digest("hex");
    expect(verifyChain(events)).toMatchObject({ ok: false, seq: 3 });
  });
});
