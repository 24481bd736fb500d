import { DurableObject } from "cloudflare:workers";
import {
  awaitingBaselineLine,
  baselineLeaseRefusal,
  confirmBest,
  createLoop,
  expireBaselineLease,
  grantBaselineLease,
  isBaselineLeaseId,
  recordBaseline,
  releaseBaselineLease,
  renewBaselineLease,
  expireLeases,
  grantLease,
  leaseRefusal,
  nextLeaseDeadline,
  proposeCandidate,
  releaseLease,
  renewLease,
  reportObservation,
  type Baseline,
  type ChainHead,
  type ConfirmAnswer,
  type ConfirmReadings,
  type EventDraft,
  type LoopState,
  type PendingBaseline,
  type Proposal,
  type ReportAnswer,
  BASELINE_ID,
} from "../../shared/engine/index.js";
import { canonicalJson } from "../../shared/canonical-json.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import { envelopeDigest, IN_TOTO_PAYLOAD_TYPE, receiptStatement, signEnvelope, type Envelope } from "../../shared/receipts/index.js";
import { VERSION } from "../../shared/version.js";
import { parseDuration } from "../../shared/duration.js";
import type { Contract } from "../../shared/wire/contract.js";
import { MAX_WAIT_MS, type AwaitingBaseline, type CandidateView, type Lease, type LoopSummary } from "../../shared/wire/api.js";
import type { Labels } from "../../shared/wire/contract.js";
import type { FullObservation, Observation } from "../../shared/wire/observation.js";
import { writeProjection, type OutboxItem } from "./db/projection.js";
import { EVENTS_IN_ANSWER, LoopEventStore } from "./loop-event-store.js";
import { keySetOf, receiptKeyOf } from "./receipt-keys.js";
import { summarizeLoop, viewCandidate } from "./loop-view.js";
import { OWNER_TEAM, type Caller } from "./auth.js";
import { candidateLimitMessage, interimReceiptLimitMessage, teamLimits } from "./team-limits.js";
import type { Refusal } from "./refusal.js";
import { PendingBaselineStore } from "./pending-baseline-store.js";

/** How long a lease lives without a heartbeat, unless LEASE_TTL says otherwise. Runners heartbeat at a quarter of it. */
export const LEASE_TTL_MS = 120_000;

/**
 * The lease lifetime of this deployment: the LEASE_TTL variable (a duration, `2m`, `10s`; between 2 s and
 * an hour), else LEASE_TTL_MS. Short ones suit tests that kill runners; long ones, runners on flaky links.
 */
export function leaseTtlMs(env: { LEASE_TTL?: string }): number {
  const configured = env.LEASE_TTL === undefined ? null : parseDuration(env.LEASE_TTL);
  if (configured === null) return LEASE_TTL_MS;
  return Math.min(3_600_000, Math.max(2_000, configured));
}
/** Outbox rows written to D1 per batch. */
const DRAIN_BATCH = 50;
/** Delay before the alarm retries a failed drain by re-arming itself (the runtime also retries thrown alarms). */
const DRAIN_RETRY_MS = 5_000;

type Answer<T> = ({ ok: true } & T) | Refusal;

const NOT_FOUND: Refusal = { ok: false, code: "not_found", message: "no such loop" };

/** Who holds a lease a caller takes (DESIGN §11): its token's id, or `owner` for the instance owner's token. */
function holderOf(caller: Caller): string {
  return caller.token_id ?? "owner";
}

/**
 * One loop: its hash-chained event log, its state (a fold over the log) and its outbox to D1. This
 * class only moves data; every decision is a pure function from shared/engine (DESIGN §3).
 */
export class LoopObject extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  /** The loop's event log, and the state and chain head folded from it. */
  private readonly store: LoopEventStore;
  /** The baseline a runner is to measure before the loop exists (a creation with `t0_commit`). */
  private readonly baseline: PendingBaselineStore;
  /** The final receipt being signed, so a report and the alarm never issue two. */
  private finalReceipt: Promise<void> | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.store = new LoopEventStore(ctx.storage);
    this.baseline = new PendingBaselineStore(this.sql);
    // Migrations run here only for an object that already has a schema: an object that was merely
    // addressed (an unknown loop id) must stay empty, so creation applies them instead.
    void ctx.blockConcurrencyWhile(async () => {
      if (!this.store.hasSchema()) return;
      this.store.migrate();
      this.store.load();
      this.baseline.load();
    });
  }

  private get state(): LoopState | null {
    return this.store.state;
  }

  private get head(): ChainHead | null {
    return this.store.head;
  }

  private get teamId(): string {
    return this.store.teamId;
  }

  /** Sets the alarm to the next thing it must do: drain the outbox now, or reclaim the next lease. */
  private async scheduleAlarm(retryDrainInMs = 0): Promise<void> {
    const pending = this.store.hasSchema() && this.sql.exec("SELECT 1 FROM outbox LIMIT 1").toArray().length > 0;
    const deadline = this.state ? nextLeaseDeadline(this.state) : (this.baseline.pending?.lease?.expires_at ?? null);
    const candidates = [pending ? Date.now() + retryDrainInMs : null, deadline ? Date.parse(deadline) : null].filter((time): time is number => time !== null);
    if (candidates.length === 0) {
      await this.ctx.storage.deleteAlarm();
      return;
    }
    await this.ctx.storage.setAlarm(Math.min(...candidates));
  }

  /**
   * The loop's state, for a caller that may see it: the owner sees every loop, a team only its own. To
   * anyone else the loop does not exist (404, no existence oracle).
   */
  private admit(caller: Caller): LoopState | null {
    if (!this.state) return null;
    return caller.owner || caller.team_id === this.teamId ? this.state : null;
  }

  /** Whether the caller may reach this loop, created or awaiting its baseline (the same team rule as `admit`). */
  private isMember(caller: Caller): boolean {
    if (!this.state && !this.baseline.pending) return false;
    return caller.owner || caller.team_id === this.teamId;
  }

  /**
   * Why a caller `admit` refused gets nothing: the loop awaits its baseline (409, saying what it waits
   * for) when the caller may see it, else it does not exist (404).
   */
  private absent(caller: Caller): Refusal {
    const pending = this.baseline.pending;
    if (!pending || !this.isMember(caller)) return NOT_FOUND;
    return {
      ok: false,
      code: "awaiting_baseline",
      message: `loop ${pending.loop_id} has no log yet: ${awaitingBaselineLine(PendingBaselineStore.view(pending))} (requested ${pending.requested_at})`,
    };
  }

  private summary(): LoopSummary {
    if (!this.state || !this.head) throw new Error("summary of a loop that does not exist");
    return summarizeLoop(this.state, this.head);
  }

  /**
   * Creates the loop, or returns it unchanged when the same creation request is retried. With
   * `refuse_new` (the team has all the loops TEAM_MAX_LOOPS allows), a loop that does not exist yet is
   * refused with that message and nothing is stored; a retried creation of one that does is answered as ever.
   *
   * With `t0_commit` instead of `t0`, the loop awaits its baseline (baseline-lease.ts): the request is kept
   * and answered with what it waits for; a retry with `wait_ms` is held until the loop is created from a
   * runner's report, or the wait ends.
   */
  async create(input: {
    team_id: string;
    loop_id: string;
    request_hash: string;
    contract: Contract;
    contract_hash: string;
    t0?: Baseline | undefined;
    t0_commit?: string | undefined;
    repository?: string | undefined;
    refuse_new?: string | undefined;
    wait_ms?: number | undefined;
  }): Promise<Answer<{ created: boolean; loop: LoopSummary } | { created: boolean; awaiting_baseline: AwaitingBaseline }>> {
    if (this.state || this.baseline.pending) {
      // Loop ids derive from the team and the key, so another team's request cannot reach this loop.
      if (this.teamId !== input.team_id) return NOT_FOUND;
      const stored = this.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'create_request'").toArray()[0];
      if (stored?.value !== input.request_hash) {
        return { ok: false, code: "idempotency_conflict", message: "this idempotency key created a loop from a different request" };
      }
      const deadline = Date.now() + Math.min(input.wait_ms ?? 0, MAX_WAIT_MS);
      while (!this.state && Date.now() < deadline) await this.store.nextAppend(deadline - Date.now());
      const pending = this.baseline.pending;
      if (!this.state && pending) return { ok: true, created: false, awaiting_baseline: PendingBaselineStore.view(pending) };
      return { ok: true, created: false, loop: this.summary() };
    }
    if (input.refuse_new !== undefined) return { ok: false, code: "limit_reached", message: input.refuse_new };
    const { team_id: teamId, refuse_new: _refused, wait_ms: _wait, t0, t0_commit: t0Commit, ...creation } = input;
    const at = new Date().toISOString();
    if (t0 === undefined) {
      if (t0Commit === undefined) throw new Error("internal: a creation with neither t0 nor t0_commit");
      return this.awaitBaseline({ ...creation, commit: t0Commit, requested_at: at, fencing_counter: 0, lease: null }, teamId, input.request_hash);
    }
    const outcome = createLoop({ ...creation, t0, at });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    // The schema is created in the same transaction as the loop: a creation that fails leaves nothing.
    this.store.teamId = teamId;
    const appended = this.store.tryAppend(outcome.events, () => {
      this.store.applyMigrations();
      this.sql.exec("INSERT INTO meta (key, value) VALUES ('create_request', ?)", input.request_hash);
      this.sql.exec("INSERT INTO meta (key, value) VALUES ('team_id', ?)", teamId);
    });
    if ("ok" in appended) {
      this.store.teamId = OWNER_TEAM;
      return appended;
    }
    await this.issueFinalReceipt();
    await this.scheduleAlarm();
    return { ok: true, created: true, loop: this.summary() };
  }

  /**
   * Keeps a creation whose baseline a runner is to measure: the schema, the request, the team and the
   * pending record in one transaction, with the D1 row that lists the loop to runners (`awaiting_baseline`).
   */
  private async awaitBaseline(
    pending: PendingBaseline,
    teamId: string,
    requestHash: string,
  ): Promise<Answer<{ created: boolean; awaiting_baseline: AwaitingBaseline }>> {
    this.store.teamId = teamId;
    try {
      this.ctx.storage.transactionSync(() => {
        this.store.applyMigrations();
        this.sql.exec("INSERT INTO meta (key, value) VALUES ('create_request', ?)", requestHash);
        this.sql.exec("INSERT INTO meta (key, value) VALUES ('team_id', ?)", teamId);
        this.baseline.save(pending);
        this.sql.exec("INSERT INTO outbox (item) VALUES (?)", JSON.stringify(PendingBaselineStore.projection(pending, teamId)));
      });
    } catch (error) {
      this.store.teamId = OWNER_TEAM;
      this.baseline.pending = null;
      throw error;
    }
    await this.scheduleAlarm();
    return { ok: true, created: true, awaiting_baseline: PendingBaselineStore.view(pending) };
  }

  /** Saves the pending baseline after a change to its lease, wakes every lease long-poll, and re-arms the alarm for its deadline. */
  private async leaseChanged(next: PendingBaseline): Promise<void> {
    this.baseline.save(next);
    this.store.wake();
    await this.scheduleAlarm();
  }

  /**
   * Records the baseline measured on a baseline lease, creating the loop from it (`loop_created` names the
   * runner) in the transaction that removes the pending record. A retry of the recorded report answers
   * the loop (`created: false`); the same lease with another body is a conflict.
   */
  async reportBaseline(input: {
    caller: Caller;
    lease_id: string;
    fencing_token: number;
    observation: FullObservation;
    request_hash: string;
  }): Promise<Answer<{ created: boolean; loop: LoopSummary }>> {
    if (!this.isMember(input.caller)) return NOT_FOUND;
    const holder = holderOf(input.caller);
    const pending = this.baseline.pending;
    if (!pending) {
      const measured = this.state?.t0_measured_by;
      if (measured?.lease_id !== input.lease_id || measured.fencing_token !== input.fencing_token || measured.holder !== holder) {
        return { ok: false, code: "stale_lease", message: "this loop's baseline is recorded already, from another lease" };
      }
      if (measured.request_hash !== input.request_hash) {
        return {
          ok: false,
          code: "idempotency_conflict",
          message: "this lease already reported a different baseline, which was recorded; a retry must send the same body",
        };
      }
      return { ok: true, created: false, loop: this.summary() };
    }
    const { caller: _caller, ...report } = input;
    const outcome = recordBaseline(pending, { ...report, holder, at: new Date().toISOString() });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.store.tryAppend(outcome.events, () => this.baseline.remove());
    if ("ok" in appended) return appended;
    this.baseline.pending = null;
    await this.issueFinalReceipt();
    await this.scheduleAlarm();
    return { ok: true, created: true, loop: this.summary() };
  }

  /** The loop's team, for a caller that may reach the loop: what a route checks before it does anything. */
  async access(caller: Caller): Promise<Answer<{ team_id: string }>> {
    if (!this.isMember(caller)) return NOT_FOUND;
    return { ok: true, team_id: this.teamId };
  }

  /** The loop's summary. */
  async get(caller: Caller): Promise<Answer<{ loop: LoopSummary }>> {
    if (!this.admit(caller)) return this.absent(caller);
    return { ok: true, loop: this.summary() };
  }

  /**
   * The most candidates this loop may hold: `max` as the route read it from its deployment's
   * LOOP_MAX_CANDIDATES (so a request's configuration is the one that holds), else this object's own.
   */
  private maxCandidates(max: number | undefined): number {
    return max ?? teamLimits(this.env).maxCandidates;
  }

  /** The refusal of a new candidate once the loop holds `max` (a replay of one it holds is no new candidate). */
  private candidateLimitRefusal(state: LoopState, idempotencyKey: string, max: number): Refusal | null {
    if (state.idempotency[idempotencyKey] !== undefined || state.candidate_order.length < max) return null;
    return { ok: false, code: "limit_reached", message: candidateLimitMessage(max) };
  }

  /**
   * Whether a proposal would be taken as far as the loop's candidate limit goes: asked before a
   * proposal's inline evidence is stored, so a proposal refused for the limit stores nothing. (`propose`
   * checks it again: a proposal that raced in between still stops there.)
   */
  async mayPropose(input: { caller: Caller; idempotency_key: string; max_candidates?: number }): Promise<Answer<object>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    return this.candidateLimitRefusal(state, input.idempotency_key, this.maxCandidates(input.max_candidates)) ?? { ok: true };
  }

  /**
   * Registers a candidate (idempotent by key); with `lease`, then leases that runner the next job, as
   * `lease()` without a wait would (a proposal's answer is never held open). A new candidate past the
   * loop's limit (`max_candidates`, LOOP_MAX_CANDIDATES) is refused before anything is appended.
   */
  async propose(input: {
    caller: Caller;
    proposal: Proposal;
    request_hash: string;
    lease?: { runner_id: string; labels: Labels };
    events_after?: number;
    max_candidates?: number;
  }): Promise<Answer<{ candidate: CandidateView; replayed: boolean; loop: LoopSummary; lease?: Lease | null; events?: string[] }>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const outcome = proposeCandidate(state, input.proposal, { request_hash: input.request_hash, at: new Date().toISOString() });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const overLimit = this.candidateLimitRefusal(state, input.proposal.idempotency_key, this.maxCandidates(input.max_candidates));
    if (overLimit) return overLimit;
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    await this.issueFinalReceipt();
    await this.scheduleAlarm();
    const candidate = viewCandidate(this.state ?? state, outcome.value.candidate_id);
    // A candidate decided without evaluation (or a replay of one since judged) needs no job: a lease
    // of another candidate would sit unused with a proposer that goes on to apply this verdict.
    const wanted = input.lease && candidate.verdict === null;
    const leased = wanted && input.lease ? await this.lease({ caller: input.caller, ...input.lease, wait_ms: 0 }) : null;
    return {
      ok: true,
      candidate,
      replayed: outcome.value.replayed,
      loop: this.summary(),
      // A lease refused (the loop halted meanwhile) is none: the proposal stands either way.
      ...(input.lease ? { lease: leased?.ok ? leased.lease : null } : {}),
      ...this.answeredEvents(input.events_after),
    };
  }

  /**
   * Leases the next evaluation job to a runner whose labels satisfy the contract's — before the loop
   * exists, the measurement of its baseline (kind `baseline`); `lease: null` when there is none. With `wait_ms`, a long-poll: held until a job is queued (a proposal, an expiry, a
   * re-queue) or the wait ends, so idle runners cost one request per wait, not a poll loop.
   */
  async lease(input: { caller: Caller; runner_id: string; labels: Labels; wait_ms: number }): Promise<Answer<{ lease: Lease | null }>> {
    const deadline = Date.now() + Math.min(input.wait_ms, MAX_WAIT_MS);
    for (;;) {
      const pending = this.state ? null : this.baseline.pending;
      if (pending && this.isMember(input.caller)) {
        const at = new Date().toISOString();
        const ttl = leaseTtlMs(this.env);
        const granted = grantBaselineLease(pending, { runner_id: input.runner_id, labels: input.labels, holder: holderOf(input.caller), at, ttl_ms: ttl });
        if (granted) {
          if (granted.pending !== pending) await this.leaseChanged(granted.pending);
          return { ok: true, lease: PendingBaselineStore.leaseView(granted.pending, granted.lease, ttl) };
        }
        if (Date.now() >= deadline) return { ok: true, lease: null };
        // Woken when the baseline lease comes back (released, expired) or the loop is created.
        await this.store.nextAppend(deadline - Date.now());
        continue;
      }
      // Re-read on every pass: the loop may have halted, or another runner taken the job, meanwhile.
      const state = this.admit(input.caller);
      if (!state) return this.absent(input.caller);
      const outcome = grantLease(state, {
        runner_id: input.runner_id,
        labels: input.labels,
        at: new Date().toISOString(),
        ttl_ms: leaseTtlMs(this.env),
        holder: holderOf(input.caller),
      });
      if (!outcome.ok) return { ok: false, ...outcome.error };
      const granted = outcome.value;
      if (granted) {
        this.store.append(outcome.events);
        await this.scheduleAlarm();
        return { ok: true, lease: this.leaseView(granted.lease_id, granted.fencing_token, granted.expires_at, granted.candidate.candidate_id) };
      }
      if (state.halt || Date.now() >= deadline) return { ok: true, lease: null };
      await this.store.nextAppend(deadline - Date.now());
    }
  }

  private leaseView(leaseId: string, fencingToken: number, expiresAt: string, candidateId: string): Lease {
    const state = this.state;
    const candidate = state?.candidates[candidateId];
    if (!state || !candidate) throw new Error(`lease for unknown candidate ${candidateId}`);
    return {
      lease_id: leaseId,
      loop_id: state.loop_id,
      fencing_token: fencingToken,
      expires_at: expiresAt,
      ttl_ms: leaseTtlMs(this.env),
      job: {
        kind: "evaluate",
        candidate_id: candidateId,
        commit: candidate.commit,
        contract_hash: state.contract_hash,
        compare_to: candidate.lease?.compare_to ?? null,
        bundles: [candidate, state.candidates[candidate.lease?.compare_to?.candidate_id ?? ""]].flatMap((holder) =>
          holder?.bundle ? [{ commit: holder.commit, ...holder.bundle }] : [],
        ),
      },
    };
  }

  /** Extends a lease; refuses a reclaimed or superseded one. */
  async heartbeat(input: { caller: Caller; lease_id: string; fencing_token: number }): Promise<Answer<{ lease: Lease }>> {
    if (isBaselineLeaseId(input.lease_id)) {
      if (!this.isMember(input.caller)) return NOT_FOUND;
      const pending = this.baseline.pending;
      if (!pending) return { ok: false, code: "stale_lease", message: "this loop's baseline is recorded already; stop this job" };
      const ttl = leaseTtlMs(this.env);
      const outcome = renewBaselineLease(pending, { ...input, holder: holderOf(input.caller), at: new Date().toISOString(), ttl_ms: ttl });
      if (!outcome.ok) return { ok: false, ...outcome.error };
      await this.leaseChanged(outcome.value.pending);
      return { ok: true, lease: PendingBaselineStore.leaseView(outcome.value.pending, outcome.value.lease, ttl) };
    }
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const outcome = renewLease(state, {
      lease_id: input.lease_id,
      fencing_token: input.fencing_token,
      at: new Date().toISOString(),
      ttl_ms: leaseTtlMs(this.env),
      holder: holderOf(input.caller),
    });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    this.store.append(outcome.events);
    await this.scheduleAlarm();
    const renewed = outcome.value;
    return { ok: true, lease: this.leaseView(renewed.lease_id, renewed.fencing_token, renewed.expires_at, renewed.candidate.candidate_id) };
  }

  /**
   * Gives a lease back before its deadline: its candidate is queued at once (`lease_released`) and every
   * runner waiting in a lease long-poll is woken. A retry of a recorded release answers it again.
   */
  async release(input: { caller: Caller; lease_id: string; fencing_token: number }): Promise<Answer<{ candidate_id: string; replayed: boolean }>> {
    if (isBaselineLeaseId(input.lease_id)) {
      if (!this.isMember(input.caller)) return NOT_FOUND;
      const pending = this.baseline.pending;
      if (!pending) return { ok: false, code: "stale_lease", message: "this loop's baseline is recorded already; there is nothing to release" };
      const outcome = releaseBaselineLease(pending, { ...input, holder: holderOf(input.caller) });
      if (!outcome.ok) return { ok: false, ...outcome.error };
      await this.leaseChanged(outcome.value.pending);
      return { ok: true, candidate_id: BASELINE_ID, replayed: false };
    }
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const outcome = releaseLease(state, {
      lease_id: input.lease_id,
      fencing_token: input.fencing_token,
      at: new Date().toISOString(),
      holder: holderOf(input.caller),
    });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    this.store.append(outcome.events);
    await this.scheduleAlarm();
    return { ok: true, ...outcome.value };
  }

  /** Whether the caller may act on a lease (its holder's token): checked before a report's inline evidence is stored. */
  async mayUseLease(input: { caller: Caller; lease_id: string }): Promise<Answer<object>> {
    if (isBaselineLeaseId(input.lease_id) && this.isMember(input.caller)) {
      const refusal = baselineLeaseRefusal(this.baseline.pending, { lease_id: input.lease_id, holder: holderOf(input.caller) });
      return refusal ? { ok: false, ...refusal } : { ok: true };
    }
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
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
    const state = this.admit(caller);
    if (!state) return this.absent(input.caller);
    const outcome = reportObservation(state, { ...report, at: new Date().toISOString(), holder: holderOf(caller) });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    await this.issueFinalReceipt();
    await this.scheduleAlarm();
    return { ok: true, verdict: outcome.value, loop: this.summary(), ...this.answeredEvents(eventsAfter) };
  }

  /** Records a runner's confirm measurement of t0 against the best (DESIGN §6.3), or asks for more pairs. */
  async confirm(input: {
    caller: Caller;
    candidate_id: string;
    samples: ConfirmReadings;
    labels: Labels;
  }): Promise<Answer<{ answer: ConfirmAnswer; loop: LoopSummary }>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const outcome = confirmBest(
      state,
      { candidate_id: input.candidate_id, samples: input.samples, holder: holderOf(input.caller), labels: input.labels, ttl_ms: leaseTtlMs(this.env) },
      new Date().toISOString(),
    );
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    // A halted loop's final receipt is re-issued to carry the confirm figure.
    await this.issueFinalReceipt();
    await this.scheduleAlarm();
    return { ok: true, answer: outcome.value, loop: this.summary() };
  }

  /** Events after `after`, as stored (the exact bytes that were hashed), at most `limit`. */
  async events(input: { caller: Caller; after: number; limit: number; wait_ms?: number }): Promise<Answer<{ events: string[]; more: boolean }>> {
    if (!this.isMember(input.caller)) return NOT_FOUND;
    // A loop awaiting its baseline has no events yet: its first comes with its creation.
    // A long-poll (`wait_ms`): held until an event follows `after`, or the wait ends with an empty page.
    const deadline = Date.now() + Math.min(input.wait_ms ?? 0, MAX_WAIT_MS);
    while ((this.head?.seq ?? 0) <= input.after && Date.now() < deadline) await this.store.nextAppend(deadline - Date.now());
    return { ok: true, ...this.store.eventsPage(input.after, input.limit) };
  }

  /**
   * What a proposal's or a report's answer carries for a caller that gave `events_after` (the last event
   * it folded): the log's events after it, read in the same call as the decision; none past
   * EVENTS_IN_ANSWER (the caller then reads the log).
   */
  private answeredEvents(after: number | undefined): { events?: string[] } {
    if (after === undefined) return {};
    const page = this.store.eventsPage(after, EVENTS_IN_ANSWER);
    return page.more ? {} : { events: page.events };
  }

  /**
   * Signs a receipt over the log as it is now and records it (DESIGN §9): the envelope goes to D1
   * (drained at once, so its URL answers when this returns) and `receipt_issued` to the log. Signing is
   * slow I/O and happens before the transaction, never inside one.
   */
  async issueReceipt(input: {
    caller: Caller;
    kind: "interim";
    max_interim?: number;
  }): Promise<Answer<{ receipt_id: string; envelope: Envelope; head: ChainHead }>> {
    if (!this.admit(input.caller)) return this.absent(input.caller);
    // At most LOOP_MAX_INTERIM_RECEIPTS (as the route read it) interim receipts, refused before anything is signed.
    const max = input.max_interim ?? teamLimits(this.env).maxInterimReceipts;
    if (this.store.interimReceipts() >= max) return { ok: false, code: "limit_reached", message: interimReceiptLimitMessage(max) };
    return this.signReceipt(input.kind);
  }

  private async signReceipt(kind: "final" | "interim"): Promise<Answer<{ receipt_id: string; envelope: Envelope; head: ChainHead }>> {
    const state = this.state;
    const head = this.head;
    if (!state || !head) return NOT_FOUND;
    const key = receiptKeyOf(this.env);
    if (!key) {
      return {
        ok: false,
        code: "signing_unconfigured",
        message: "this coordinator has no receipt signing key (the RECEIPT_SIGNING_KEY secret; see the README, Receipts)",
      };
    }
    const { signer } = await key;
    // A key the published set no longer calls active (revoked, or retired with a not_after) would sign
    // receipts nobody can verify: none is signed until RECEIPT_SIGNING_KEY is replaced.
    const published = await keySetOf(this.env).then(
      (set) => set.keys.find((entry) => entry.kid === signer.kid),
      () => undefined,
    );
    if (published?.status !== "active") {
      return {
        ok: false,
        code: "signing_unconfigured",
        message: `the receipt signing key ${signer.kid} is ${published ? published.status : "not published (the key variables cannot be read)"}: set a new RECEIPT_SIGNING_KEY (see the README, Receipts)`,
      };
    }
    const issuedAt = new Date().toISOString();
    const statement = receiptStatement(state, head, { kind, issued_at: issuedAt, version: VERSION });
    const envelope = await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, signer);
    const receiptId = `rc_${bytesToHex(crypto.getRandomValues(new Uint8Array(16)))}`;
    const issued: EventDraft = {
      type: "receipt_issued",
      at: issuedAt,
      data: { receipt_id: receiptId, kind, head, keyid: signer.kid, envelope_sha256: envelopeDigest(envelope) },
    };
    const appended = this.store.tryAppend([issued], () => {
      const row = {
        id: receiptId,
        loopId: state.loop_id,
        kind,
        headSeq: head.seq,
        headHash: head.hash,
        keyid: signer.kid,
        envelope: JSON.stringify(envelope),
        issuedAt,
      };
      this.sql.exec("INSERT INTO outbox (item) VALUES (?)", JSON.stringify({ kind: "receipt", row } satisfies OutboxItem));
    });
    if ("ok" in appended) return appended;
    try {
      await this.drainOutbox();
    } catch (error) {
      console.error("loopwarden: writing the receipt to D1 failed; the alarm retries", error);
    }
    await this.scheduleAlarm(DRAIN_RETRY_MS);
    return { ok: true, receipt_id: receiptId, envelope, head };
  }

  /**
   * The receipt of a halted loop (DESIGN §9), when a signing key is configured: issued at the halt, and
   * again when what it attests changed (a confirm measurement came in); the alarm retries one that failed.
   */
  private async issueFinalReceipt(): Promise<void> {
    if (this.finalReceipt) return this.finalReceipt;
    const state = this.state;
    if (!state?.halt || (state.final_receipt !== null && !state.final_receipt_outdated) || !receiptKeyOf(this.env)) return;
    this.finalReceipt = (async () => {
      try {
        const issued = await this.signReceipt("final");
        if (!issued.ok) console.error("loopwarden: the final receipt was not issued", issued.code, issued.message);
      } catch (error) {
        console.error("loopwarden: the final receipt was not issued; the alarm retries", error);
      } finally {
        this.finalReceipt = null;
      }
    })();
    return this.finalReceipt;
  }

  /** Reclaims expired leases (a pending baseline's too), drains the outbox to D1, issues a halted loop's missing receipt, then re-arms for whatever is next. */
  override async alarm(): Promise<void> {
    const pending = this.baseline.pending;
    if (this.state) {
      await this.issueFinalReceipt();
      this.store.append(expireLeases(this.state, new Date().toISOString()));
    } else if (pending) {
      const next = expireBaselineLease(pending, new Date().toISOString());
      if (next !== pending) {
        this.baseline.save(next);
        this.store.wake();
      }
    } else return;
    let drained = true;
    try {
      await this.drainOutbox();
    } catch (error) {
      drained = false;
      console.error("loopwarden: draining the outbox to D1 failed; will retry", error);
    }
    await this.scheduleAlarm(drained ? 0 : DRAIN_RETRY_MS);
  }

  private async drainOutbox(): Promise<void> {
    for (;;) {
      const rows = this.sql.exec<{ id: number; item: string }>("SELECT id, item FROM outbox ORDER BY id LIMIT ?", DRAIN_BATCH).toArray();
      const last = rows.at(-1);
      if (!last) return;
      await writeProjection(
        this.env.DB,
        rows.map((row) => JSON.parse(row.item) as OutboxItem),
      );
      this.sql.exec("DELETE FROM outbox WHERE id <= ?", last.id);
    }
  }
}
