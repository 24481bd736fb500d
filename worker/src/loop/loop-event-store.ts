import { foldEvents, foldEventsInto, sealEventWithBody, type ChainHead, type EventDraft, type LoopEvent, type LoopState } from "#shared/engine/index.js";
import { outboxItemsFor } from "../db/projection.js";
import { LOOP_OBJECT_MIGRATIONS } from "./loop-object-schema.js";
import { OWNER_TEAM } from "../http/auth.js";
import type { Refusal } from "./refusal.js";

// A loop's event store (DESIGN §4.5, §9): the rows of its hash-chained log in the Durable Object's SQLite
// — a body longer than EVENT_PART_CHARS in parts — appended with their outbox rows in one synchronous
// transaction, the state folded from them, read back in bounded pages. It only manages rows: what is
// appended is the engine's decision, taken by the LoopObject (loop-object.ts), which holds one of these.

/** A page of the events route stops past this many bytes of events (DESIGN §8: pages bounded in bytes). */
export const EVENTS_PAGE_BYTES = 4 * 1024 * 1024;

/** The most events a proposal's or a report's answer carries (`events_after`); past it, none: the caller reads the log. */
export const EVENTS_IN_ANSWER = 100;
/**
 * The most characters of an event's body one row holds; a longer body is stored in parts of this size.
 * At most 3 UTF-8 bytes a character, a part stays under 192 KB, well inside SQLite's 2 MB row limit
 * (DESIGN §4 invariant 9: no value that grows with the suite in one row).
 */
export const EVENT_PART_CHARS = 64_000;

/**
 * Events that change how the D1 projection lists the loop: its creation (which TEAM_MAX_LOOPS counts) and
 * its halt (`GET /v1/loops?status=`). Their outbox rows are drained at once; the rest within
 * DRAIN_DELAY_MS, several appends in one batch (issue 30).
 */
const LISTING_EVENTS: ReadonlySet<string> = new Set(["loop_created", "halted"]);

/** An `events` row as read back: a body stored in parts has an empty `body` and its part count. */
interface EventRow extends Record<string, SqlStorageValue> {
  seq: number;
  body: string;
  parts: number;
}

/** Text cut into pieces of at most `size` characters, never between the two halves of a surrogate pair. */
export function splitText(text: string, size: number): string[] {
  if (text.length <= size) return [text];
  const pieces: string[] = [];
  for (let start = 0; start < text.length;) {
    let end = Math.min(start + size, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    pieces.push(text.slice(start, end));
    start = end;
  }
  return pieces;
}

/** The event log of one loop, and the state and chain head folded from it. */
export class LoopEventStore {
  private readonly sql: SqlStorage;
  /** The loop's state: the fold of the stored events (null before the loop exists). */
  state: LoopState | null = null;
  /** The last stored event's place in the chain. */
  head: ChainHead | null = null;
  /** The team that owns the loop (DESIGN §11), kept in `meta`; loops from before teams are the owner's. */
  teamId: string = OWNER_TEAM;
  /**
   * Each candidate's events, by seq, in order: what its dashboard page reads (its proposal, its last
   * observation) without reading the log. Built by the fold at load, grown by every append.
   */
  private readonly candidateSeqs = new Map<string, number[]>();
  /**
   * Whether the outbox holds a change of how the loop is listed (its creation, its halt, a pending
   * baseline's row): the alarm drains it at once. Cleared when a drain empties the outbox.
   */
  listingChanged = false;
  /** Long-polls waiting for the log to grow (a proposal, an expiry, a verdict): woken after every append. */
  private readonly waiting = new Set<() => void>();

  constructor(private readonly storage: DurableObjectStorage) {
    this.sql = storage.sql;
  }

  /** Whether the object has its schema (an object merely addressed, for an unknown loop id, has none). */
  hasSchema(): boolean {
    return this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_schema'").toArray().length > 0;
  }

  /** Applies the schema migrations not applied yet, in a transaction of their own. */
  migrate(): void {
    this.storage.transactionSync(() => this.applyMigrations());
  }

  /** The schema migrations not applied yet, inside the caller's transaction. */
  applyMigrations(): void {
    this.sql.exec("CREATE TABLE IF NOT EXISTS _schema (version INTEGER NOT NULL)");
    const row = this.sql.exec<{ version: number }>("SELECT MAX(version) AS version FROM _schema").one();
    for (let version = (row.version ?? 0) + 1; version <= LOOP_OBJECT_MIGRATIONS.length; version++) {
      this.sql.exec(LOOP_OBJECT_MIGRATIONS[version - 1] ?? "");
      this.sql.exec("INSERT INTO _schema (version) VALUES (?)", version);
    }
  }

  /**
   * A new loop's schema, the hash of the request that created it and the team that owns it, inside the
   * caller's transaction (the one that stores its first events, or its pending baseline).
   */
  initialize(requestHash: string, teamId: string): void {
    this.applyMigrations();
    this.sql.exec("INSERT INTO meta (key, value) VALUES ('create_request', ?)", requestHash);
    this.sql.exec("INSERT INTO meta (key, value) VALUES ('team_id', ?)", teamId);
    this.teamId = teamId;
  }

  /** The hash of the request that created the loop: a retry of it is answered, another is a conflict. */
  createRequest(): string | undefined {
    return this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'create_request'").toArray()[0]?.value;
  }

  /**
   * The state, folded from the event rows (DESIGN §4 invariant 9: no row grows with the loop; the fold is
   * linear, about 16 ms for 10,000 events), and the chain head, the last event's.
   */
  load(): void {
    if (!this.hasSchema()) return;
    this.teamId = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'team_id'").toArray()[0]?.value ?? OWNER_TEAM;
    const rows = this.sql.exec<EventRow>("SELECT seq, body, parts FROM events ORDER BY seq").toArray();
    const events = rows.map((row) => JSON.parse(this.bodyOf(row)) as LoopEvent);
    const last = events.at(-1);
    if (!last) return;
    this.indexByCandidate(events);
    this.state = foldEvents(events);
    this.head = { seq: last.seq, hash: last.hash };
  }

  /**
   * Appends events and their outbox rows in one synchronous transaction (DESIGN §4.5): either all of
   * them are stored or none is. Only the rows of this decision are written, and the state in memory is
   * folded in place (`foldEventsInto`): an append costs what its events change, however long the loop
   * (DESIGN §4 invariant 9). A transaction that fails leaves the state as the stored events fold, read
   * again from storage. Whoever reads the state across an await reads it as it is then.
   */
  append(drafts: readonly EventDraft[], alsoInTransaction?: () => void): LoopEvent[] {
    if (drafts.length === 0) return [];
    let head = this.head;
    let state = this.state;
    const sealed: LoopEvent[] = [];
    try {
      this.storage.transactionSync(() => {
        alsoInTransaction?.();
        for (const draft of drafts) {
          const { event, body } = sealEventWithBody(draft, head);
          this.insertEvent(event, body);
          head = { seq: event.seq, hash: event.hash };
          sealed.push(event);
        }
        state = foldEventsInto(drafts, state);
        if (!state || !head) throw new Error("append produced no state");
        for (const item of outboxItemsFor(state, sealed, this.teamId)) {
          this.sql.exec("INSERT INTO outbox (item) VALUES (?)", JSON.stringify(item));
        }
      });
    } catch (error) {
      // Rolled back: nothing was stored, but the fold may have written the state in memory already.
      this.reload();
      throw error;
    }
    this.state = state;
    this.head = head;
    if (sealed.some((event) => LISTING_EVENTS.has(event.type))) this.listingChanged = true;
    this.indexByCandidate(sealed);
    this.wake();
    return sealed;
  }

  /** The state, the head and the candidates' index as the stored events are, folded from nothing. */
  private reload(): void {
    this.state = null;
    this.head = null;
    this.candidateSeqs.clear();
    this.load();
  }

  /** Wakes every long-poll waiting in `nextAppend` (after an append, or a change that is not one: a pending baseline's lease). */
  wake(): void {
    for (const wake of [...this.waiting]) wake();
  }

  /** Resolves at the next append, or after `ms`, whichever comes first. */
  nextAppend(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.waiting.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.waiting.add(wake);
    });
  }

  /** Stores one sealed event, its `body` (canonical JSON) in its row, or, when longer than EVENT_PART_CHARS, in parts. */
  private insertEvent(event: LoopEvent, body: string): void {
    const parts = splitText(body, EVENT_PART_CHARS);
    const inline = parts.length === 1;
    this.sql.exec(
      "INSERT INTO events (seq, type, at, body, hash, parts) VALUES (?, ?, ?, ?, ?, ?)",
      event.seq,
      event.type,
      event.at,
      inline ? body : "",
      event.hash,
      inline ? 0 : parts.length,
    );
    if (inline) return;
    parts.forEach((part, index) => this.sql.exec("INSERT INTO event_parts (seq, part, body) VALUES (?, ?, ?)", event.seq, index, part));
  }

  /** An event's stored body, joined from its parts when it has them. */
  private bodyOf(row: EventRow): string {
    if (row.parts === 0) return row.body;
    const parts = this.sql.exec<{ body: string }>("SELECT body FROM event_parts WHERE seq = ? ORDER BY part", row.seq).toArray();
    if (parts.length !== row.parts) throw new Error(`event ${row.seq}: ${parts.length} of its ${row.parts} parts are stored`);
    return parts.map((part) => part.body).join("");
  }

  /**
   * `append`, answering a refusal instead of throwing when SQLite refuses the write for its size: a
   * value over 2 MB (SQLITE_TOOBIG; events are stored in parts, so none should be) or storage that is
   * full (SQLITE_FULL). The transaction rolled back, so nothing was stored; the caller learns what
   * happened rather than a generic internal error, and a retry cannot help.
   */
  tryAppend(drafts: readonly EventDraft[], alsoInTransaction?: () => void): LoopEvent[] | Refusal {
    try {
      return this.append(drafts, alsoInTransaction);
    } catch (error) {
      const message = (error as Error).message;
      if (!/SQLITE_TOOBIG|too big|SQLITE_FULL|database or disk is full/i.test(message)) throw error;
      console.error("loopwarden: storage refused a value over its size limit", message);
      return {
        ok: false,
        code: "storage_limit",
        message: `the loop's storage refused the write (${message}); nothing was recorded`,
      };
    }
  }

  /**
   * A page of the events after `after`, as stored. Rows are read one at a time and the page ends at
   * `limit` rows or EVENTS_PAGE_BYTES, whichever comes first (always at least one row): a page of large
   * reports stays a bounded response.
   */
  eventsPage(after: number, limit: number): { events: string[]; more: boolean } {
    const cursor = this.sql.exec<EventRow>("SELECT seq, body, parts FROM events WHERE seq > ? ORDER BY seq", after);
    const events: string[] = [];
    let bytes = 0;
    for (const row of cursor) {
      const body = this.bodyOf(row);
      if (events.length >= limit || (events.length > 0 && bytes + body.length > EVENTS_PAGE_BYTES)) return { events, more: true };
      events.push(body);
      bytes += body.length;
    }
    return { events, more: false };
  }

  /** Adds events to the index of each candidate's events. */
  private indexByCandidate(events: readonly LoopEvent[]): void {
    for (const event of events) {
      if (!("candidate_id" in event.data)) continue;
      const seqs = this.candidateSeqs.get(event.data.candidate_id);
      if (seqs) seqs.push(event.seq);
      else this.candidateSeqs.set(event.data.candidate_id, [event.seq]);
    }
  }

  /**
   * A candidate's events, parsed: its first (the proposal) and its last `recent` (a long evaluation renews
   * its lease many times; its last observation and verdict are among the last).
   */
  candidateEvents(candidateId: string, recent = 50): LoopEvent[] {
    const seqs = this.candidateSeqs.get(candidateId) ?? [];
    const wanted = seqs.length <= recent + 1 ? seqs : [seqs[0] ?? 0, ...seqs.slice(-recent)];
    return wanted.flatMap((seq) =>
      this.sql
        .exec<EventRow>("SELECT seq, body, parts FROM events WHERE seq = ?", seq)
        .toArray()
        .map((row) => JSON.parse(this.bodyOf(row)) as LoopEvent),
    );
  }

  /** How many interim receipts the loop has issued: its `receipt_issued` events of that kind (never stored in parts). */
  interimReceipts(): number {
    return this.sql
      .exec<{ n: number }>("SELECT COUNT(*) AS n FROM events WHERE type = 'receipt_issued' AND json_extract(body, '$.data.kind') = 'interim'")
      .one().n;
  }
}
