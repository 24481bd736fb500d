import type { BestRef, EventDraft } from "./events.js";
import { type Labels } from "../wire/contract.js";
import { type BestState, type CandidateState, type LeaseState, type LoopState } from "./state-types.js";
import { labelsSatisfy } from "./labels.js";
import { addMs, refuse, type EngineError, type Outcome } from "./outcome.js";

// Leases (DESIGN §2, §11): a runner's claim on a candidate's evaluation — granted to a runner whose labels
// satisfy the contract's, held by the token that took it, renewed by heartbeats (recorded at most once a
// minute), released, or reclaimed once expired. Pure, as every engine command (commands.ts).

/** A granted lease, with the candidate it is for and the best-so-far it is compared against (`compare_to`). */
export interface GrantedLease extends LeaseState {
  candidate: CandidateState;
}

/** A best-so-far as a lease names it. */
export function refOf(best: BestState): BestRef {
  return { candidate_id: best.candidate_id, commit: best.commit };
}

/**
 * Leases the oldest queued candidate to a runner whose labels satisfy the contract's
 * (`evaluate.labels`); any other runner gets no job (null), never an error, since another may have them.
 * The lease names the best-so-far as `compare_to`: what the candidate is measured and judged against.
 * A runner that asks again while holding a live lease gets the same lease back, so a lost response
 * never strands a job.
 */
export function grantLease(
  state: LoopState,
  input: { runner_id: string; labels: Readonly<Labels>; at: string; ttl_ms: number; holder?: string | undefined },
): Outcome<GrantedLease | null> {
  if (state.halt) return { ok: true, events: [], value: null };
  // The requirement is the contract's, the same for every candidate: a runner that lacks a label is
  // offered nothing, not merely another candidate.
  if (!labelsSatisfy(state.contract.evaluate?.labels ?? {}, input.labels)) return { ok: true, events: [], value: null };
  const now = Date.parse(input.at);
  for (const id of state.unsettled) {
    const candidate = state.candidates[id];
    // The runner's own lease again (a retried lease request), never another token's under the same runner id.
    const sameHolder = candidate?.lease?.holder === undefined || candidate.lease.holder === input.holder;
    if (candidate?.status === "leased" && candidate.lease?.runner_id === input.runner_id && sameHolder && Date.parse(candidate.lease.expires_at) > now) {
      return { ok: true, events: [], value: { ...candidate.lease, candidate } };
    }
  }
  // Oldest first, in proposal order: a candidate back from an expiry or a re-queue keeps its place.
  const next = state.unsettled.map((id) => state.candidates[id]).find((c) => c?.status === "queued");
  if (!next) return { ok: true, events: [], value: null };
  const lease: LeaseState = {
    lease_id: `${state.loop_id}-L${state.fencing_counter + 1}`,
    runner_id: input.runner_id,
    ...(input.holder === undefined ? {} : { holder: input.holder }),
    fencing_token: state.fencing_counter + 1,
    expires_at: addMs(input.at, input.ttl_ms),
    recorded_at: input.at,
    compare_to: refOf(state.best),
    labels: { ...input.labels },
  };
  const event: EventDraft = {
    type: "lease_granted",
    at: input.at,
    data: {
      lease_id: lease.lease_id,
      candidate_id: next.candidate_id,
      runner_id: lease.runner_id,
      ...(input.holder === undefined ? {} : { holder: input.holder }),
      fencing_token: lease.fencing_token,
      expires_at: lease.expires_at,
      compare_to: refOf(state.best),
      labels: { ...input.labels },
    },
  };
  return { ok: true, events: [event], value: { ...lease, candidate: { ...next, status: "leased", lease } } };
}

/** The candidate whose current or past lease is `leaseId` (by the loop's lease index). */
export function findLease(state: LoopState, leaseId: string): CandidateState | undefined {
  const candidateId = state.lease_index[leaseId];
  return candidateId === undefined ? undefined : state.candidates[candidateId];
}

/**
 * Whether `holder` may act on lease `lease_id` of the loop: refused as `lease_not_found` or
 * `lease_not_yours`, else null (whatever else a command may find wrong with the request). What a route
 * checks before it stores anything a report carries.
 */
export function leaseRefusal(state: LoopState, input: { lease_id: string; holder: string }): EngineError | null {
  const candidate = findLease(state, input.lease_id);
  if (!candidate) return { code: "lease_not_found", message: `no lease ${input.lease_id}` };
  return notYours(candidate, input)?.error ?? null;
}

/**
 * Why a caller may not act on a lease (DESIGN §11: a lease belongs to the token that took it), or null:
 * the candidate's current lease is `lease_id`, it records a holder, and the caller is another. A caller
 * that names no holder (a verifier re-running the log) and a lease granted before holders were recorded
 * are not checked.
 */
export function notYours(candidate: CandidateState, input: { lease_id: string; holder?: string | undefined }): { ok: false; error: EngineError } | null {
  const lease = candidate.lease;
  if (input.holder === undefined || lease?.lease_id !== input.lease_id || lease.holder === undefined || lease.holder === input.holder) return null;
  return refuse(
    "lease_not_yours",
    `lease ${input.lease_id} is held by another token (${lease.holder}); only its holder may heartbeat, release or report on it`,
  );
}

/** The longest a lease's renewals go unrecorded: the log records a lease's expiry at most once a minute. */
export const RENEWAL_RECORD_MS = 60_000;

/**
 * Extends a lease (heartbeat). A lease is valid until the coordinator reclaims it (the alarm does at
 * its deadline), its runner releases it, or another lease supersedes it; then it answers `stale_lease`:
 * stop work. Once the loop has halted no report can be judged, so a heartbeat answers `loop_halted`:
 * stop work too, rather than measure for nothing.
 *
 * Renewals are recorded coarsely, so a long job does not grow the log a heartbeat at a time: a
 * `lease_renewed` is appended only once min(RENEWAL_RECORD_MS, ttl/2) has passed since the expiry was
 * last recorded; a heartbeat before that appends nothing and leaves the deadline as recorded. Runners
 * heartbeat every ttl/4, so the recorded deadline stays at least ttl/2 ahead of the last heartbeat: a
 * live runner's lease never lapses, and a dead runner's is reclaimed between ttl/2 and ttl after its
 * last heartbeat.
 */
export function renewLease(
  state: LoopState,
  input: { lease_id: string; fencing_token: number; at: string; ttl_ms: number; holder?: string | undefined },
): Outcome<GrantedLease> {
  const candidate = findLease(state, input.lease_id);
  if (!candidate) return refuse("lease_not_found", `no lease ${input.lease_id}`);
  const foreign = notYours(candidate, input);
  if (foreign) return foreign;
  const lease = candidate.lease;
  if (candidate.status !== "leased" || !lease || lease.lease_id !== input.lease_id || lease.fencing_token !== input.fencing_token) {
    return refuse("stale_lease", "the lease was reclaimed or superseded; stop this job");
  }
  if (state.halt) return refuse("loop_halted", `the loop has halted (${state.halt.halt_reason}); stop this job`);
  if (Date.parse(input.at) - Date.parse(lease.recorded_at) < Math.min(RENEWAL_RECORD_MS, input.ttl_ms / 2)) {
    return { ok: true, events: [], value: { ...lease, candidate } };
  }
  const expires_at = addMs(input.at, input.ttl_ms);
  const event: EventDraft = {
    type: "lease_renewed",
    at: input.at,
    data: { lease_id: lease.lease_id, candidate_id: candidate.candidate_id, expires_at },
  };
  return { ok: true, events: [event], value: { ...lease, expires_at, candidate } };
}

/**
 * Gives a lease back before its deadline (`lease_released`): its runner was stopped, or cannot finish
 * the job on its side. The candidate goes back to the queue at once, in its place, as at an expiry, so
 * another runner (or the same one) leases it under a higher fencing token without waiting out the TTL.
 * Only the current holder may release: a lease reclaimed, superseded, re-queued or already reported is
 * `stale_lease` (409), as for a heartbeat. Idempotent: a retry of a release that was recorded answers
 * it again (`replayed`), with no event, whatever happened to the candidate since. A halted loop's lease
 * may be released too: nothing is leased from it again, but the lease is no longer out.
 */
export function releaseLease(
  state: LoopState,
  input: { lease_id: string; fencing_token: number; at: string; holder?: string | undefined },
): Outcome<{ candidate_id: string; replayed: boolean }> {
  const candidate = findLease(state, input.lease_id);
  if (!candidate) return refuse("lease_not_found", `no lease ${input.lease_id}`);
  const foreign = notYours(candidate, input);
  if (foreign) return foreign;
  if (candidate.released.some((released) => released.lease_id === input.lease_id && released.fencing_token === input.fencing_token)) {
    return { ok: true, events: [], value: { candidate_id: candidate.candidate_id, replayed: true } };
  }
  if (!isCurrentLease(candidate, input)) return refuse("stale_lease", "the lease was reclaimed, superseded or reported; there is nothing to release");
  const event: EventDraft = {
    type: "lease_released",
    at: input.at,
    data: { lease_id: input.lease_id, candidate_id: candidate.candidate_id, fencing_token: input.fencing_token },
  };
  return { ok: true, events: [event], value: { candidate_id: candidate.candidate_id, replayed: false } };
}

/** Reclaims every lease that expired by `at`; its candidate goes back to the queue. */
export function expireLeases(state: LoopState, at: string): EventDraft[] {
  const now = Date.parse(at);
  return state.unsettled
    .map((id) => state.candidates[id])
    .filter((c): c is CandidateState => c?.status === "leased" && c.lease !== null && Date.parse(c.lease.expires_at) <= now)
    .map((c) => ({ type: "lease_expired", at, data: { lease_id: c.lease?.lease_id ?? "", candidate_id: c.candidate_id } }));
}

/** The earliest lease deadline, for the alarm; null when no lease is out. */
export function nextLeaseDeadline(state: LoopState): string | null {
  let earliest: string | null = null;
  for (const id of state.unsettled) {
    const candidate = state.candidates[id];
    const expires = candidate?.status === "leased" ? candidate.lease?.expires_at : undefined;
    if (expires && (earliest === null || Date.parse(expires) < Date.parse(earliest))) earliest = expires;
  }
  return earliest;
}

/** Whether `lease` is the candidate's current lease under that fencing token. */
export function isCurrentLease(
  candidate: CandidateState,
  lease: { lease_id: string; fencing_token: number },
): candidate is CandidateState & { lease: LeaseState } {
  const current = candidate.lease;
  return candidate.status === "leased" && current !== null && current.lease_id === lease.lease_id && current.fencing_token === lease.fencing_token;
}
