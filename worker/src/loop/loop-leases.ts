import {
  grantLease,
  isBaselineLeaseId,
  leaseRefusal,
  releaseLease,
  renewLease,
  reportObservation,
  type LoopState,
  type ReportAnswer,
} from "#shared/engine/index.js";
import { MAX_WAIT_MS, type Lease, type LoopSummary } from "#shared/wire/api.js";
import type { Labels } from "#shared/wire/contract.js";
import type { Observation } from "#shared/wire/observation.js";
import type { Caller } from "../http/auth.js";
import type { BaselineJobs } from "./baseline-jobs.js";
import { leaseTtlMs } from "./lease-ttl.js";
import type { LoopEventStore } from "./loop-event-store.js";
import { viewLease } from "./loop-view.js";
import { NOT_FOUND, type Answer, type Refusal } from "./refusal.js";

// A loop's leases (DESIGN §2, §11), for its LoopObject's RPC methods: granted (a long-poll while none is
// queued), renewed, given back and reported on — a candidate's through the engine's lease commands, a
// pending baseline's through its baseline jobs. Each call loads the state, asks the engine, and appends
// what it answers; this class only moves data.

/** Who holds a lease a caller takes (DESIGN §11): its token's id, or `owner` for the instance owner's token. */
export function holderOf(caller: Caller): string {
  return caller.token_id ?? "owner";
}

/** What the leases need of their LoopObject. */
export interface LeaseHost {
  readonly env: Env;
  readonly store: LoopEventStore;
  readonly baseline: BaselineJobs;
  /** The loop's state for a caller of its team, else null. */
  admit(caller: Caller): LoopState | null;
  /** Whether the caller may reach the loop, created or awaiting its baseline. */
  isMember(caller: Caller): boolean;
  /** What a caller `admit` refused is told: the loop awaits its baseline (409), or does not exist (404). */
  absent(caller: Caller): Refusal;
  scheduleAlarm(): Promise<void>;
  /** What follows a decision: a halted loop's final receipt. */
  settled(): Promise<void>;
  summary(): LoopSummary;
  answeredEvents(after: number | undefined): { events?: string[] };
}

export class LoopLeases {
  constructor(private readonly host: LeaseHost) {}

  /**
   * Leases the next evaluation job to a runner whose labels satisfy the contract's — before the loop
   * exists, the measurement of its baseline (kind `baseline`); `lease: null` when there is none. With
   * `wait_ms`, a long-poll: held until a job is queued (a proposal, an expiry, a re-queue, a baseline
   * lease given back) or the wait ends, so idle runners cost one request per wait, not a poll loop.
   */
  async lease(input: { caller: Caller; runner_id: string; labels: Labels; wait_ms: number }): Promise<Answer<{ lease: Lease | null }>> {
    const deadline = Date.now() + Math.min(input.wait_ms, MAX_WAIT_MS);
    for (;;) {
      const pending = this.host.store.state ? null : this.host.baseline.pending;
      if (pending && this.host.isMember(input.caller)) {
        const { runner_id, labels } = input;
        const lease = await this.host.baseline.lease(pending, { runner_id, labels, holder: holderOf(input.caller), ttl_ms: leaseTtlMs(this.host.env) });
        if (lease) return { ok: true, lease };
        if (Date.now() >= deadline) return { ok: true, lease: null };
        // Woken when the baseline lease comes back (released, expired) or the loop is created.
        await this.host.store.nextAppend(deadline - Date.now());
        continue;
      }
      // Re-read on every pass: the loop may have halted, or another runner taken the job, meanwhile.
      const state = this.host.admit(input.caller);
      if (!state) return this.host.absent(input.caller);
      const outcome = grantLease(state, {
        runner_id: input.runner_id,
        labels: input.labels,
        at: new Date().toISOString(),
        ttl_ms: leaseTtlMs(this.host.env),
        holder: holderOf(input.caller),
      });
      if (!outcome.ok) return { ok: false, ...outcome.error };
      const granted = outcome.value;
      if (granted) {
        this.host.store.append(outcome.events);
        await this.host.scheduleAlarm();
        return {
          ok: true,
          lease: viewLease(
            this.host.store.state,
            leaseTtlMs(this.host.env),
            granted.lease_id,
            granted.fencing_token,
            granted.expires_at,
            granted.candidate.candidate_id,
          ),
        };
      }
      if (state.halt || Date.now() >= deadline) return { ok: true, lease: null };
      await this.host.store.nextAppend(deadline - Date.now());
    }
  }

  /** Extends a lease; refuses a reclaimed or superseded one. */
  async heartbeat(input: { caller: Caller; lease_id: string; fencing_token: number }): Promise<Answer<{ lease: Lease }>> {
    if (isBaselineLeaseId(input.lease_id)) {
      if (!this.host.isMember(input.caller)) return NOT_FOUND;
      const { lease_id, fencing_token } = input;
      return this.host.baseline.heartbeat({ lease_id, fencing_token, holder: holderOf(input.caller), ttl_ms: leaseTtlMs(this.host.env) });
    }
    const state = this.host.admit(input.caller);
    if (!state) return this.host.absent(input.caller);
    const outcome = renewLease(state, {
      lease_id: input.lease_id,
      fencing_token: input.fencing_token,
      at: new Date().toISOString(),
      ttl_ms: leaseTtlMs(this.host.env),
      holder: holderOf(input.caller),
    });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    this.host.store.append(outcome.events);
    await this.host.scheduleAlarm();
    const renewed = outcome.value;
    return {
      ok: true,
      lease: viewLease(
        this.host.store.state,
        leaseTtlMs(this.host.env),
        renewed.lease_id,
        renewed.fencing_token,
        renewed.expires_at,
        renewed.candidate.candidate_id,
      ),
    };
  }

  /**
   * Gives a lease back before its deadline: its candidate is queued at once (`lease_released`) and every
   * runner waiting in a lease long-poll is woken. A retry of a recorded release answers it again.
   */
  async release(input: { caller: Caller; lease_id: string; fencing_token: number }): Promise<Answer<{ candidate_id: string; replayed: boolean }>> {
    if (isBaselineLeaseId(input.lease_id)) {
      if (!this.host.isMember(input.caller)) return NOT_FOUND;
      return this.host.baseline.release({ lease_id: input.lease_id, fencing_token: input.fencing_token, holder: holderOf(input.caller) });
    }
    const state = this.host.admit(input.caller);
    if (!state) return this.host.absent(input.caller);
    const outcome = releaseLease(state, {
      lease_id: input.lease_id,
      fencing_token: input.fencing_token,
      at: new Date().toISOString(),
      holder: holderOf(input.caller),
    });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    this.host.store.append(outcome.events);
    await this.host.scheduleAlarm();
    return { ok: true, ...outcome.value };
  }

  /** Whether the caller may act on a lease (its holder's token): checked before a report's inline evidence is stored. */
  async mayUse(input: { caller: Caller; lease_id: string }): Promise<Answer<object>> {
    if (isBaselineLeaseId(input.lease_id) && this.host.isMember(input.caller))
      return this.host.baseline.mayUse({ lease_id: input.lease_id, holder: holderOf(input.caller) });
    const state = this.host.admit(input.caller);
    if (!state) return this.host.absent(input.caller);
    const refusal = leaseRefusal(state, { lease_id: input.lease_id, holder: holderOf(input.caller) });
    return refusal ? { ok: false, ...refusal } : { ok: true };
  }

  /** Records an observation under a lease and answers the coordinator's verdict. */
  async report(input: {
    caller: Caller;
    lease_id: string;
    fencing_token: number;
    observation: Observation;
    request_hash: string;
    events_after?: number;
  }): Promise<Answer<{ verdict: ReportAnswer; loop: LoopSummary; events?: string[] }>> {
    const { caller, events_after: eventsAfter, ...report } = input;
    const state = this.host.admit(caller);
    if (!state) return this.host.absent(input.caller);
    const outcome = reportObservation(state, { ...report, at: new Date().toISOString(), holder: holderOf(caller) });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.host.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    await this.host.settled();
    await this.host.scheduleAlarm();
    return { ok: true, verdict: outcome.value, loop: this.host.summary(), ...this.host.answeredEvents(eventsAfter) };
  }
}
