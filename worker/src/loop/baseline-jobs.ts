import {
  awaitingBaselineLine,
  BASELINE_ID,
  baselineLabels,
  baselineLeaseRefusal,
  expireBaselineLease,
  grantBaselineLease,
  recordBaseline,
  releaseBaselineLease,
  renewBaselineLease,
  type BaselineLease,
  type PendingBaseline,
} from "#shared/engine/index.js";
import type { Labels } from "#shared/wire/contract.js";
import type { AwaitingBaseline, Lease, LoopSummary } from "#shared/wire/api.js";
import type { FullObservation } from "#shared/wire/observation.js";
import type { DoctorRecord } from "#shared/wire/doctor.js";
import { OWNER_TEAM } from "../http/auth.js";
import type { OutboxItem } from "../db/projection.js";
import type { LoopEventStore } from "./loop-event-store.js";
import type { Answer, Refusal } from "./refusal.js";

// A loop's baseline job (shared/engine/baseline-lease.ts), for its LoopObject: a creation with
// `t0_commit` is kept as a pending record — one row of the object's `meta` table, written whole (the
// contract and at most one lease: small, never growing) — leased to runners with the contract's labels,
// and removed in the transaction that creates the loop from its holder's report. This class only moves
// data; what a request does to the record is decided by the engine.

const KEY = "pending_baseline";

/** What the baseline jobs need of their LoopObject. */
export interface BaselineHost {
  readonly sql: SqlStorage;
  readonly storage: DurableObjectStorage;
  readonly store: LoopEventStore;
  /** Re-arms the object's alarm (the outbox to drain, the lease's deadline). */
  scheduleAlarm(): Promise<void>;
  /** What a creation from a report does next: a loop halted at once has its final receipt issued. */
  created(): Promise<void>;
  /** The loop's summary, once it exists. */
  summary(): LoopSummary;
}

export class BaselineJobs {
  /** The pending baseline, or null: none was requested, or the loop was created from it. */
  pending: PendingBaseline | null = null;

  constructor(private readonly host: BaselineHost) {}

  private get sql(): SqlStorage {
    return this.host.sql;
  }

  /** Reads the record (the object must have its schema). */
  load(): void {
    const row = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = ?", KEY).toArray()[0];
    this.pending = row ? (JSON.parse(row.value) as PendingBaseline) : null;
  }

  /** Writes the record, inside the caller's transaction or on its own; the record in memory follows. */
  private save(next: PendingBaseline): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", KEY, JSON.stringify(next));
    this.pending = next;
  }

  /** Saves the record after a change to its lease, wakes every lease long-poll, and re-arms the alarm for its deadline. */
  private async leaseChanged(next: PendingBaseline): Promise<void> {
    this.save(next);
    this.host.store.wake();
    await this.host.scheduleAlarm();
  }

  /**
   * Keeps a creation whose baseline a runner is to measure: the schema, the request, the team and the
   * pending record in one transaction, with the D1 row that lists the loop to runners (`awaiting_baseline`).
   */
  async request(pending: PendingBaseline, teamId: string, requestHash: string): Promise<Answer<{ created: boolean; awaiting_baseline: AwaitingBaseline }>> {
    const { store } = this.host;
    store.teamId = teamId;
    try {
      this.host.storage.transactionSync(() => {
        store.initialize(requestHash, teamId);
        this.save(pending);
        this.sql.exec("INSERT INTO outbox (item) VALUES (?)", JSON.stringify(BaselineJobs.projection(pending, teamId)));
      });
    } catch (error) {
      store.teamId = OWNER_TEAM;
      this.pending = null;
      throw error;
    }
    // Runners find the loop awaiting its baseline in the listing: its row is drained at once.
    store.listingChanged = true;
    await this.host.scheduleAlarm();
    return { ok: true, created: true, awaiting_baseline: BaselineJobs.view(pending) };
  }

  /** What a caller of the team reaching the loop before it exists is told (409): what it waits for. */
  refusal(pending: PendingBaseline): Refusal {
    return {
      ok: false,
      code: "awaiting_baseline",
      message: `loop ${pending.loop_id} has no log yet: ${awaitingBaselineLine(BaselineJobs.view(pending))} (requested ${pending.requested_at})`,
    };
  }

  /** The baseline lease for a runner with the contract's labels (the same one again for its holder), or null. */
  async lease(pending: PendingBaseline, input: { runner_id: string; labels: Labels; holder: string; ttl_ms: number }): Promise<Lease | null> {
    const granted = grantBaselineLease(pending, { ...input, at: new Date().toISOString() });
    if (!granted) return null;
    if (granted.pending !== pending) await this.leaseChanged(granted.pending);
    return BaselineJobs.leaseView(granted.pending, granted.lease, input.ttl_ms);
  }

  /** Extends the baseline lease; once the loop exists, the lease is over (`stale_lease`: stop). */
  async heartbeat(input: { lease_id: string; fencing_token: number; holder: string; ttl_ms: number }): Promise<Answer<{ lease: Lease }>> {
    const pending = this.pending;
    if (!pending) return { ok: false, code: "stale_lease", message: "this loop's baseline is recorded already; stop this job" };
    const outcome = renewBaselineLease(pending, { ...input, at: new Date().toISOString() });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    await this.leaseChanged(outcome.value.pending);
    return { ok: true, lease: BaselineJobs.leaseView(outcome.value.pending, outcome.value.lease, input.ttl_ms) };
  }

  /** Gives the baseline lease back: the next runner with the labels takes it at once. */
  async release(input: { lease_id: string; fencing_token: number; holder: string }): Promise<Answer<{ candidate_id: string; replayed: boolean }>> {
    const pending = this.pending;
    if (!pending) return { ok: false, code: "stale_lease", message: "this loop's baseline is recorded already; there is nothing to release" };
    const outcome = releaseBaselineLease(pending, input);
    if (!outcome.ok) return { ok: false, ...outcome.error };
    await this.leaseChanged(outcome.value.pending);
    return { ok: true, candidate_id: BASELINE_ID, replayed: false };
  }

  /** Whether `holder` may store evidence under the baseline lease (checked before a report's inline files are written). */
  mayUse(input: { lease_id: string; holder: string }): Answer<object> {
    const refusal = baselineLeaseRefusal(this.pending, input);
    return refusal ? { ok: false, ...refusal } : { ok: true };
  }

  /**
   * Records the baseline measured on a baseline lease, creating the loop from it (`loop_created` names the
   * runner) in the transaction that removes the pending record. A retry of the recorded report answers
   * the loop (`created: false`); the same lease with another body is a conflict.
   */
  async report(input: {
    lease_id: string;
    fencing_token: number;
    holder: string;
    observation: FullObservation;
    doctor?: DoctorRecord | undefined;
    request_hash: string;
  }): Promise<Answer<{ created: boolean; loop: LoopSummary }>> {
    const pending = this.pending;
    if (!pending) {
      const measured = this.host.store.state?.t0_measured_by;
      if (measured?.lease_id !== input.lease_id || measured.fencing_token !== input.fencing_token || measured.holder !== input.holder) {
        return { ok: false, code: "stale_lease", message: "this loop's baseline is recorded already, from another lease" };
      }
      if (measured.request_hash !== input.request_hash) {
        return {
          ok: false,
          code: "idempotency_conflict",
          message: "this lease already reported a different baseline, which was recorded; a retry must send the same body",
        };
      }
      return { ok: true, created: false, loop: this.host.summary() };
    }
    const outcome = recordBaseline(pending, { ...input, at: new Date().toISOString() });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.host.store.tryAppend(outcome.events, () => this.sql.exec("DELETE FROM meta WHERE key = ?", KEY));
    if ("ok" in appended) return appended;
    this.pending = null;
    await this.host.created();
    await this.host.scheduleAlarm();
    return { ok: true, created: true, loop: this.host.summary() };
  }

  /** Reclaims the baseline lease once it expired (the alarm), waking the runners waiting for a job. */
  expire(at: string): void {
    const pending = this.pending;
    if (!pending) return;
    const next = expireBaselineLease(pending, at);
    if (next === pending) return;
    this.save(next);
    this.host.store.wake();
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
