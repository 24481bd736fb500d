import { BASELINE_ID, baselineLabels, type BaselineLease, type PendingBaseline } from "../../shared/engine/index.js";
import type { AwaitingBaseline, Lease } from "../../shared/wire/api.js";
import type { OutboxItem } from "./db/projection.js";

// A loop's pending baseline (shared/engine/baseline-lease.ts), as its LoopObject keeps it: one row of the
// object's `meta` table, written whole (it holds the contract and at most one lease: small, and never
// growing), until the loop is created from a runner's report in the same transaction that removes it.
// This class only moves data; what a request does to it is decided by the engine.

const KEY = "pending_baseline";

export class PendingBaselineStore {
  /** The pending baseline, or null: none was requested, or the loop was created from it. */
  pending: PendingBaseline | null = null;

  constructor(private readonly sql: SqlStorage) {}

  /** Reads the record (the object must have its schema). */
  load(): void {
    const row = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = ?", KEY).toArray()[0];
    this.pending = row ? (JSON.parse(row.value) as PendingBaseline) : null;
  }

  /** Writes the record, inside the caller's transaction or on its own; the record in memory follows. */
  save(next: PendingBaseline): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", KEY, JSON.stringify(next));
    this.pending = next;
  }

  /** Removes the record (the loop was created from it), inside the caller's transaction. */
  remove(): void {
    this.sql.exec("DELETE FROM meta WHERE key = ?", KEY);
  }

  /** The D1 row that lists a loop awaiting its baseline (status `awaiting_baseline`), so runners with its labels find it. */
  static projection(pending: PendingBaseline, teamId: string): OutboxItem {
    return {
      kind: "loop",
      row: {
        id: pending.loop_id,
        name: pending.contract.name,
        mode: pending.contract.mode,
        status: "awaiting_baseline",
        contractHash: pending.contract_hash,
        iteration: 0,
        bestCandidateId: BASELINE_ID,
        bestCommit: pending.commit,
        haltReason: null,
        exitClass: null,
        // No event yet: the loop's first event (seq 1) replaces this row.
        headSeq: 0,
        headHash: "",
        createdAt: pending.requested_at,
        updatedAt: pending.requested_at,
        updatedSeq: 0,
        teamId,
      },
    };
  }

  /** What a creation's retry, `GET`, and `run` waiting for it are told. */
  static view(pending: PendingBaseline): AwaitingBaseline {
    const { lease } = pending;
    return {
      loop_id: pending.loop_id,
      name: pending.contract.name,
      contract_hash: pending.contract_hash,
      commit: pending.commit,
      labels: baselineLabels(pending),
      requested_at: pending.requested_at,
      lease: lease ? { runner_id: lease.runner_id, granted_at: lease.granted_at, expires_at: lease.expires_at } : null,
    };
  }

  /** A baseline lease as the API shows it: a job of kind `baseline` at t0's commit, with nothing to compare with. */
  static leaseView(pending: PendingBaseline, lease: BaselineLease, ttlMs: number): Lease {
    return {
      lease_id: lease.lease_id,
      loop_id: pending.loop_id,
      fencing_token: lease.fencing_token,
      expires_at: lease.expires_at,
      ttl_ms: ttlMs,
      job: { kind: "baseline", candidate_id: BASELINE_ID, commit: pending.commit, contract_hash: pending.contract_hash, compare_to: null, bundles: [] },
    };
  }
}
