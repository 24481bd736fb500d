import { sql } from "drizzle-orm";
import { drizzle, type DrizzleD1Database } from "drizzle-orm/d1";
import type { BatchItem } from "drizzle-orm/batch";
import type { BestState, LoopEvent, LoopState } from "#shared/engine/index.js";
import { candidates, eventsIndex, loops, receipts, type CandidateRow, type EventIndexRow, type LoopRow, type ReceiptRow } from "./schema.js";

/** One row for the D1 projection, queued in the LoopObject's outbox in the decision's transaction. */
export type OutboxItem =
  { kind: "loop"; row: LoopRow } | { kind: "candidate"; row: CandidateRow } | { kind: "event"; row: EventIndexRow } | { kind: "receipt"; row: ReceiptRow };

function candidateIdOf(event: LoopEvent): string | null {
  return "candidate_id" in event.data ? event.data.candidate_id : null;
}

/** The projection rows that a batch of newly appended events changes, read from the state after them. */
export function outboxItemsFor(state: LoopState, events: readonly LoopEvent[], teamId: string): OutboxItem[] {
  const last = events.at(-1);
  if (!last) return [];
  const items: OutboxItem[] = events.map((event) => ({
    kind: "event",
    row: { loopId: state.loop_id, seq: event.seq, type: event.type, at: event.at, hash: event.hash, candidateId: candidateIdOf(event) },
  }));
  const touched = new Set(events.map(candidateIdOf).filter((id): id is string => id !== null));
  for (const id of touched) {
    const candidate = state.candidates[id];
    if (!candidate) continue;
    items.push({
      kind: "candidate",
      row: {
        loopId: state.loop_id,
        id,
        parent: candidate.parent,
        commit: candidate.commit,
        status: candidate.status,
        reason: candidate.verdict?.reason ?? null,
        detail: candidate.verdict?.detail ?? null,
        logDigests: JSON.stringify(candidate.report?.gates.flatMap((gate) => (gate.log ? [gate.log.sha256] : [])) ?? []),
        proposedAt: candidate.proposed_at,
        updatedSeq: last.seq,
      },
    });
  }
  items.push({
    kind: "loop",
    row: {
      id: state.loop_id,
      name: state.contract.name,
      mode: state.contract.mode,
      status: state.halt ? "halted" : "running",
      contractHash: state.contract_hash,
      iteration: state.iterations,
      bestCandidateId: state.best.candidate_id,
      bestCommit: state.best.commit,
      haltReason: state.halt?.halt_reason ?? null,
      exitClass: state.halt?.exit_class ?? null,
      headSeq: last.seq,
      headHash: last.hash,
      createdAt: state.created_at,
      updatedAt: last.at,
      updatedSeq: last.seq,
      teamId,
      t0Score: scoreOf(state, state.t0),
      bestScore: scoreOf(state, state.best),
      runners: runnersLeasing(state),
    },
  });
  return items;
}

/** What a standing scores as the loop is judged: its failing count, or in optimize mode its metric's median. */
export function scoreOf(state: LoopState, standing: BestState): number | null {
  return state.contract.mode === "optimize" ? standing.metric : standing.failing.length;
}

/** How many runners hold a lease now: a pass over the unsettled candidates, in memory. */
export function runnersLeasing(state: LoopState): number {
  const runners = new Set<string>();
  for (const id of state.unsettled) {
    const candidate = state.candidates[id];
    if (candidate?.status === "leased" && candidate.lease) runners.add(candidate.lease.runner_id);
  }
  return runners.size;
}

/** The D1 row a loop or candidate item replaces, and the event sequence it reflects (events and receipts are never replaced: null). */
function replacedRow(item: OutboxItem): { row: string; seq: number } | null {
  if (item.kind === "loop") return { row: `loop ${item.row.id}`, seq: item.row.updatedSeq };
  if (item.kind === "candidate") return { row: `candidate ${item.row.loopId} ${item.row.id}`, seq: item.row.updatedSeq };
  return null;
}

/**
 * The items without the loop and candidate rows that another item of the batch supersedes: of each
 * row, only the item with the highest `updated_seq` (the last of equals) is written, the one D1 would
 * keep anyway. A drain that holds several appends then writes each row once (issue 30).
 */
export function latestRows(items: readonly OutboxItem[]): OutboxItem[] {
  const newest = new Map<string, { seq: number; index: number }>();
  items.forEach((item, index) => {
    const replaced = replacedRow(item);
    const kept = replaced && newest.get(replaced.row);
    if (replaced && (!kept || replaced.seq >= kept.seq)) newest.set(replaced.row, { seq: replaced.seq, index });
  });
  return items.filter((item, index) => {
    const replaced = replacedRow(item);
    return replaced === null || newest.get(replaced.row)?.index === index;
  });
}

/**
 * Writes outbox items to D1 in one batch. Upserts keyed by primary key, and a row only replaces one
 * from an older event sequence, so delivering the same items twice (an alarm retried after D1 took the
 * batch but before the outbox was cleared) changes nothing.
 */
export async function writeProjection(database: D1Database, items: readonly OutboxItem[]): Promise<void> {
  if (items.length === 0) return;
  const db = drizzle(database);
  const latest = latestRows(items);
  // The events' index rows go in as few statements as D1's bound parameters allow: building and
  // running a statement per event was most of a drain's work in the worker (issue 30).
  const events = latest.flatMap((item) => (item.kind === "event" ? [item.row] : []));
  const statements: BatchItem<"sqlite">[] = [];
  for (let start = 0; start < events.length; start += EVENT_ROWS_PER_STATEMENT) {
    statements.push(
      db
        .insert(eventsIndex)
        .values(events.slice(start, start + EVENT_ROWS_PER_STATEMENT))
        .onConflictDoNothing(),
    );
  }
  for (const item of latest) {
    const statement = rowStatement(db, item);
    if (statement) statements.push(statement);
  }
  const [first, ...rest] = statements;
  if (!first) return;
  await db.batch([first, ...rest]);
}

/** D1 binds at most 100 parameters to a statement; an `events_index` row takes 6. */
const EVENT_ROWS_PER_STATEMENT = 16;

/** The upsert of one receipt, candidate or loop item (events are written together, above). */
function rowStatement(db: DrizzleD1Database, item: OutboxItem): BatchItem<"sqlite"> | null {
  switch (item.kind) {
    case "event":
      return null;
    case "receipt":
      // A receipt never changes once issued: a re-delivery keeps the first.
      return db.insert(receipts).values(item.row).onConflictDoNothing();
    case "candidate": {
      const { loopId: _loopId, id: _id, ...changes } = item.row;
      return db
        .insert(candidates)
        .values(item.row)
        .onConflictDoUpdate({
          target: [candidates.loopId, candidates.id],
          set: changes,
          setWhere: sql`excluded.updated_seq >= ${candidates.updatedSeq}`,
        });
    }
    case "loop": {
      const { id: _id, ...changes } = item.row;
      return db
        .insert(loops)
        .values(item.row)
        .onConflictDoUpdate({ target: loops.id, set: changes, setWhere: sql`excluded.updated_seq >= ${loops.updatedSeq}` });
    }
  }
}
