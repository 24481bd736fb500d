import { DurableObject } from "cloudflare:workers";
import {
  cancelLoop,
  confirmBest,
  createLoop,
  expireLeases,
  haltContextUnsatisfiable,
  nextLeaseDeadline,
  nextReviewDeadline,
  proposeCandidate,
  recheckBest,
  reviewCandidate,
  reviewTimeouts,
  type Baseline,
  type Recheck,
  type ChainHead,
  type ConfirmAnswer,
  type ConfirmReadings,
  type LoopState,
  type Proposal,
} from "#shared/engine/index.js";
import { leaseTtlMs } from "./lease-ttl.js";
import type { Contract } from "#shared/wire/contract.js";
import { MAX_WAIT_MS, type AwaitingBaseline, type CandidateView, type Lease, type LoopSummary } from "#shared/wire/api.js";
import type { Labels } from "#shared/wire/contract.js";
import type { DoctorRecord } from "#shared/wire/doctor.js";
import type { FullObservation } from "#shared/wire/observation.js";
import { EVENTS_IN_ANSWER, LoopEventStore } from "./loop-event-store.js";
import { streamEvents } from "./event-stream.js";
import { summarizeLoop, viewCandidate } from "./loop-view.js";
import { OWNER_TEAM, type Caller } from "../http/auth.js";
import { candidateLimitRefusal, interimReceiptLimitMessage, teamLimits } from "../team-limits.js";
import { NOT_FOUND, type Answer, type Refusal } from "./refusal.js";
import { holderOf, LoopLeases } from "./loop-leases.js";
import { BaselineJobs } from "./baseline-jobs.js";
import { DRAIN_DELAY_MS, DRAIN_RETRY_MS, LoopReceipts, type SignedReceipt } from "./loop-receipts.js";
import { renderView, type DashboardView } from "../dashboard/views.js";
import type { Viewer } from "../dashboard/layout.js";

/**
 * One loop: its hash-chained event log, its state (a fold over the log) and its outbox to D1. This
 * class only moves data; every decision is a pure function from shared/engine (DESIGN §3).
 */
export class LoopObject extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  /** The loop's event log, and the state and chain head folded from it. */
  private readonly store: LoopEventStore;
  /** The baseline a runner is to measure before the loop exists (a creation with `t0_commit`). */
  private readonly baseline: BaselineJobs;
  /** Its receipts: signed, recorded, and drained to D1 with the rest of its outbox. */
  private readonly receipts: LoopReceipts;
  /** Its leases: granted, renewed, given back and reported on. */
  private readonly leases: LoopLeases;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.store = new LoopEventStore(ctx.storage);
    this.receipts = new LoopReceipts(env, this.sql, this.store, (retryDrainInMs) => this.scheduleAlarm(retryDrainInMs));
    this.baseline = new BaselineJobs({
      sql: this.sql,
      storage: ctx.storage,
      store: this.store,
      scheduleAlarm: () => this.scheduleAlarm(),
      created: () => this.receipts.issueFinal(),
      summary: () => this.summary(),
    });
    this.leases = new LoopLeases({
      env,
      store: this.store,
      baseline: this.baseline,
      admit: (caller) => this.admit(caller),
      isMember: (caller) => this.isMember(caller),
      absent: (caller) => this.absent(caller),
      scheduleAlarm: () => this.scheduleAlarm(),
      settled: () => this.receipts.issueFinal(),
      summary: () => this.summary(),
      answeredEvents: (after) => this.answeredEvents(after),
    });
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

  /** When the outbox is due to be drained (null: nothing to drain): an append never puts off a drain already due. */
  private drainDue: number | null = null;
  /** The alarm as this object last set it (undefined: not known, since the object woke or the alarm ran). */
  private alarmAt: number | null | undefined = undefined;

  /**
   * Sets the alarm to the next thing it must do: drain the outbox (at once for a change of how the loop
   * is listed, else within DRAIN_DELAY_MS), reclaim the next lease, or time out the oldest review request.
   * An alarm already set to that time is not set again (issue 30: one storage write less per request).
   */
  private async scheduleAlarm(retryDrainInMs = 0): Promise<void> {
    // Only an object holding a loop, or a loop awaiting its baseline, has tables (and an outbox).
    const pending = (this.state !== null || this.baseline.pending !== null) && this.sql.exec("SELECT 1 FROM outbox LIMIT 1").toArray().length > 0;
    if (pending) {
      const wait = Math.max(retryDrainInMs, this.store.listingChanged ? 0 : DRAIN_DELAY_MS);
      this.drainDue = Math.min(this.drainDue ?? Number.POSITIVE_INFINITY, Date.now() + wait);
    } else this.drainDue = null;
    const deadline = this.state ? nextLeaseDeadline(this.state) : (this.baseline.pending?.lease?.expires_at ?? null);
    const review = this.state ? nextReviewDeadline(this.state) : null;
    const candidates = [this.drainDue, deadline ? Date.parse(deadline) : null, review ? Date.parse(review) : null].filter(
      (time): time is number => time !== null,
    );
    const next = candidates.length === 0 ? null : Math.min(...candidates);
    if (next === this.alarmAt) return;
    // Noted before the await: a call that follows meanwhile sees the alarm this one is setting.
    this.alarmAt = next;
    try {
      if (next === null) await this.ctx.storage.deleteAlarm();
      else await this.ctx.storage.setAlarm(next);
    } catch (error) {
      this.alarmAt = undefined;
      throw error;
    }
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
    return pending && this.isMember(caller) ? this.baseline.refusal(pending) : NOT_FOUND;
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
    doctor?: DoctorRecord | undefined;
    refuse_new?: string | undefined;
    wait_ms?: number | undefined;
  }): Promise<Answer<{ created: boolean; loop: LoopSummary } | { created: boolean; awaiting_baseline: AwaitingBaseline }>> {
    if (this.state || this.baseline.pending) {
      // Loop ids derive from the team and the key, so another team's request cannot reach this loop.
      if (this.teamId !== input.team_id) return NOT_FOUND;
      if (this.store.createRequest() !== input.request_hash) {
        return { ok: false, code: "idempotency_conflict", message: "this idempotency key created a loop from a different request" };
      }
      // Held until the loop exists, or a runner takes (or gives back) its baseline's measurement.
      const deadline = Date.now() + Math.min(input.wait_ms ?? 0, MAX_WAIT_MS);
      const leased = this.baseline.pending?.lease?.lease_id;
      while (!this.state && this.baseline.pending?.lease?.lease_id === leased && Date.now() < deadline) await this.store.nextAppend(deadline - Date.now());
      const pending = this.baseline.pending;
      if (!this.state && pending) return { ok: true, created: false, awaiting_baseline: BaselineJobs.view(pending) };
      return { ok: true, created: false, loop: this.summary() };
    }
    if (input.refuse_new !== undefined) return { ok: false, code: "limit_reached", message: input.refuse_new };
    const { team_id: teamId, refuse_new: _refused, wait_ms: _wait, t0, t0_commit: t0Commit, ...creation } = input;
    const at = new Date().toISOString();
    if (t0 === undefined) {
      if (t0Commit === undefined) throw new Error("internal: a creation with neither t0 nor t0_commit");
      return this.baseline.request({ ...creation, commit: t0Commit, requested_at: at, fencing_counter: 0, lease: null }, teamId, input.request_hash);
    }
    const outcome = createLoop({ ...creation, t0, at });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    // The schema is created in the same transaction as the loop: a creation that fails leaves nothing.
    this.store.teamId = teamId;
    const appended = this.store.tryAppend(outcome.events, () => this.store.initialize(input.request_hash, teamId));
    if ("ok" in appended) {
      this.store.teamId = OWNER_TEAM;
      return appended;
    }
    await this.receipts.issueFinal();
    await this.scheduleAlarm();
    return { ok: true, created: true, loop: this.summary() };
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
    doctor?: DoctorRecord | undefined;
    request_hash: string;
  }): Promise<Answer<{ created: boolean; loop: LoopSummary }>> {
    if (!this.isMember(input.caller)) return NOT_FOUND;
    const { caller, ...report } = input;
    return this.baseline.report({ ...report, holder: holderOf(caller) });
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
   * Whether a proposal would be taken as far as the loop's candidate limit goes: asked before a
   * proposal's inline evidence is stored, so a proposal refused for the limit stores nothing. (`propose`
   * checks it again: a proposal that raced in between still stops there.)
   */
  async mayPropose(input: { caller: Caller; idempotency_key: string; max_candidates?: number }): Promise<Answer<object>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    return candidateLimitRefusal(state, input.idempotency_key, input.max_candidates ?? teamLimits(this.env).maxCandidates) ?? { ok: true };
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
    const overLimit = candidateLimitRefusal(state, input.proposal.idempotency_key, input.max_candidates ?? teamLimits(this.env).maxCandidates);
    if (overLimit) return overLimit;
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    await this.receipts.issueFinal();
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
   * Leases the next job to a runner whose labels satisfy the contract's (before the loop exists, its
   * baseline); with `wait_ms`, a long-poll (loop-leases.ts).
   */
  async lease(input: Parameters<LoopLeases["lease"]>[0]): ReturnType<LoopLeases["lease"]> {
    return this.leases.lease(input);
  }

  /** Extends a lease; refuses a reclaimed or superseded one. */
  async heartbeat(input: Parameters<LoopLeases["heartbeat"]>[0]): ReturnType<LoopLeases["heartbeat"]> {
    return this.leases.heartbeat(input);
  }

  /** Gives a lease back before its deadline: its job is queued again at once. */
  async release(input: Parameters<LoopLeases["release"]>[0]): ReturnType<LoopLeases["release"]> {
    return this.leases.release(input);
  }

  /** Whether the caller may act on a lease (its holder's token): checked before a report's inline evidence is stored. */
  async mayUseLease(input: Parameters<LoopLeases["mayUse"]>[0]): ReturnType<LoopLeases["mayUse"]> {
    return this.leases.mayUse(input);
  }

  /** Records an observation under a lease and answers the coordinator's verdict. */
  async report(input: Parameters<LoopLeases["report"]>[0]): ReturnType<LoopLeases["report"]> {
    return this.leases.report(input);
  }

  /**
   * Cancels the loop at a person's request (`cancel_requested`, then `halted` with `cancelled`): its
   * leases are over at their next heartbeat, and its final receipt is signed like any halt's.
   */
  async cancel(input: { caller: Caller; reason?: string | undefined }): Promise<Answer<{ loop: LoopSummary; replayed: boolean }>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const outcome = cancelLoop(state, { by: holderOf(input.caller), reason: input.reason, at: new Date().toISOString() });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    await this.receipts.issueFinal();
    await this.scheduleAlarm();
    return { ok: true, loop: this.summary(), replayed: outcome.value.replayed };
  }

  /**
   * A person's answer to a candidate's request to change protected files (docs/design.md §6.8): `ack`
   * queues it to be judged with exactly those files allowed to change, `reject` rejects it. The route
   * checked the admin or review scope first; who answered is recorded from the token, never the body.
   */
  async review(input: {
    caller: Caller;
    candidate_id: string;
    decision: "ack" | "reject";
    note: string;
  }): Promise<Answer<{ loop: LoopSummary; candidate: CandidateView; replayed: boolean }>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const outcome = reviewCandidate(state, {
      candidate_id: input.candidate_id,
      decision: input.decision,
      note: input.note,
      by: holderOf(input.caller),
      at: new Date().toISOString(),
    });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    await this.receipts.issueFinal();
    await this.scheduleAlarm();
    return { ok: true, loop: this.summary(), candidate: viewCandidate(this.store.state ?? state, input.candidate_id), replayed: outcome.value.replayed };
  }

  /**
   * A runner's report that the agent's context cannot fit its budget even at the first tier (§6.9): the
   * loop halts `context_budget_unsatisfiable` before any agent run, when the engine accepts the figures.
   */
  async contextUnsatisfiable(input: {
    caller: Caller;
    tier: "stack_trace";
    needed: number;
    budget: number;
    runner_id: string;
  }): Promise<Answer<{ loop: LoopSummary }>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const { caller, ...report } = input;
    const outcome = haltContextUnsatisfiable(state, { ...report, by: holderOf(caller), at: new Date().toISOString() });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    await this.receipts.issueFinal();
    await this.scheduleAlarm();
    return { ok: true, loop: this.summary() };
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
    await this.receipts.issueFinal();
    await this.scheduleAlarm();
    return { ok: true, answer: outcome.value, loop: this.summary() };
  }

  /**
   * Records a re-run of a best's gates (DESIGN §6.5) and what it changed against that best's recorded
   * outcome: on resume any change halts the loop, a periodic one feeds its flake monitor.
   */
  async recheck(
    input: Recheck & { caller: Caller; request_hash: string },
  ): Promise<Answer<{ changed: string[]; changed_count: number; replayed: boolean; loop: LoopSummary }>> {
    const state = this.admit(input.caller);
    if (!state) return this.absent(input.caller);
    const { caller, request_hash: requestHash, ...recheck } = input;
    const outcome = recheckBest(state, { ...recheck, by: holderOf(caller) }, { request_hash: requestHash, at: new Date().toISOString() });
    if (!outcome.ok) return { ok: false, ...outcome.error };
    const appended = this.store.tryAppend(outcome.events);
    if ("ok" in appended) return appended;
    if (outcome.value.halt && !outcome.value.replayed) await this.receipts.issueFinal();
    await this.scheduleAlarm();
    const { changed, changed_count: changedCount, replayed } = outcome.value;
    return { ok: true, changed, changed_count: changedCount, replayed, loop: this.summary() };
  }

  /** A page of the loop's dashboard, rendered from its state (dashboard/views.ts). */
  async dashboard(input: { caller: Caller; view: DashboardView; viewer: Viewer }): Promise<Answer<{ html: string }>> {
    const state = this.admit(input.caller);
    if (!state || !this.head) return this.absent(input.caller);
    return renderView(state, this.head, input.view, input.viewer, (candidateId) => this.store.candidateEvents(candidateId));
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

  /** The log after `after` as Server-Sent Events, then each event as it is appended (event-stream.ts). */
  async eventStream(input: { caller: Caller; after: number }): Promise<Answer<{ stream: ReadableStream<Uint8Array> }>> {
    if (!this.isMember(input.caller)) return NOT_FOUND;
    return { ok: true, stream: streamEvents(this.store, input.after) };
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
  async issueReceipt(input: { caller: Caller; kind: "interim"; max_interim?: number }): Promise<SignedReceipt> {
    if (!this.admit(input.caller)) return this.absent(input.caller);
    // At most LOOP_MAX_INTERIM_RECEIPTS (as the route read it) interim receipts, refused before anything is signed.
    const max = input.max_interim ?? teamLimits(this.env).maxInterimReceipts;
    if (this.store.interimReceipts() >= max) return { ok: false, code: "limit_reached", message: interimReceiptLimitMessage(max) };
    return this.receipts.sign(input.kind);
  }

  /**
   * Reclaims expired leases (a pending baseline's too), halts `human_required` on a review request nobody
   * answered in time, drains the outbox to D1, issues a halted loop's missing receipt, then re-arms for
   * whatever is next.
   */
  override async alarm(): Promise<void> {
    // This alarm is spent, and the outbox is drained now: whatever follows sets the next one.
    this.alarmAt = undefined;
    this.drainDue = null;
    if (this.state) {
      const now = new Date().toISOString();
      this.store.append(expireLeases(this.state, now));
      this.store.append(reviewTimeouts(this.state, now));
      await this.receipts.issueFinal();
    } else if (this.baseline.pending) this.baseline.expire(new Date().toISOString());
    else return;
    let drained = true;
    try {
      await this.receipts.drainOutbox();
    } catch (error) {
      drained = false;
      console.error("loopwarden: draining the outbox to D1 failed; will retry", error);
    }
    await this.scheduleAlarm(drained ? 0 : DRAIN_RETRY_MS);
  }
}
