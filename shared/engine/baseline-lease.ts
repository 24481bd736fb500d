import type { Contract, Labels } from "../wire/contract.js";
import type { FullObservation } from "../wire/observation.js";
import type { DoctorRecord } from "../wire/doctor.js";
import { createLoop } from "./commands.js";
import { formatLabels, labelsSatisfy } from "./labels.js";
import type { AwaitingBaseline } from "../wire/api.js";
import { addMs, refuse, type EngineError, type Outcome } from "./outcome.js";

// t0 as a leased job (DESIGN §11: comparisons only between samples from the same kind of runner). When a
// loop's contract says where it is evaluated (`evaluate.labels`) and its creator is not such a runner,
// the loop is requested with t0's commit alone: the coordinator keeps the request as a pending baseline
// (this record, no events yet), leases its measurement to a runner whose labels satisfy the contract's,
// and creates the loop from that runner's report — `loop_created` names the runner (`t0_measured_by`).
// Until then the loop has no log: what it waits for is coordination, as a lease is, and the first event
// records its result. Pure, as every engine command: time and ids come in as arguments.

/** A runner's claim on measuring a pending baseline; as a candidate's lease (lease-commands.ts), with its own ids. */
export interface BaselineLease {
  lease_id: string;
  runner_id: string;
  /** The token that took it (`owner` for the instance owner's): only it heartbeats, releases or reports. */
  holder: string;
  fencing_token: number;
  expires_at: string;
  granted_at: string;
}

/** A loop requested with t0's commit alone, waiting for a runner to measure t0. */
export interface PendingBaseline {
  loop_id: string;
  contract: Contract;
  contract_hash: string;
  /** The commit t0 is measured at: one the creator made (DESIGN §6.6). */
  commit: string;
  repository?: string | undefined;
  /** The creator's precondition record: `skipped` when it said so; else the measuring runner's record decides. */
  doctor?: DoctorRecord | undefined;
  requested_at: string;
  /** The last fencing token granted: every lease of the baseline has a higher one than the last. */
  fencing_counter: number;
  lease: BaselineLease | null;
}

/** A baseline lease's id: the loop's, then `B` and its fencing token (a candidate's lease has `L`). */
export function baselineLeaseId(loopId: string, fencingToken: number): string {
  return `${loopId}-B${fencingToken}`;
}

/** Whether a lease id names a baseline lease (`baselineLeaseId`). */
export function isBaselineLeaseId(leaseId: string): boolean {
  return /-B\d+$/.test(leaseId);
}

/** What the contract asks of the runner that measures t0: its `evaluate.labels`. */
export function baselineLabels(pending: PendingBaseline): Labels {
  return pending.contract.evaluate?.labels ?? {};
}

/**
 * Leases the baseline's measurement to a runner whose labels satisfy the contract's; null when it lacks
 * them or another runner holds a live lease. The same runner and token asking again while their lease
 * lives get it back, so a lost response never strands the job. Answers the pending record after it.
 */
export function grantBaselineLease(
  pending: PendingBaseline,
  input: { runner_id: string; labels: Readonly<Labels>; holder: string; at: string; ttl_ms: number },
): { pending: PendingBaseline; lease: BaselineLease } | null {
  if (!labelsSatisfy(baselineLabels(pending), input.labels)) return null;
  const current = pending.lease;
  if (current && Date.parse(current.expires_at) > Date.parse(input.at)) {
    return current.runner_id === input.runner_id && current.holder === input.holder ? { pending, lease: current } : null;
  }
  const fencingToken = pending.fencing_counter + 1;
  const lease: BaselineLease = {
    lease_id: baselineLeaseId(pending.loop_id, fencingToken),
    runner_id: input.runner_id,
    holder: input.holder,
    fencing_token: fencingToken,
    expires_at: addMs(input.at, input.ttl_ms),
    granted_at: input.at,
  };
  return { pending: { ...pending, fencing_counter: fencingToken, lease }, lease };
}

/** The current baseline lease under `lease_id` and its fencing token, for its holder; else why not. */
function heldLease(
  pending: PendingBaseline,
  input: { lease_id: string; fencing_token: number; holder: string },
): { ok: true; lease: BaselineLease } | { ok: false; error: EngineError } {
  const refusal = baselineLeaseRefusal(pending, input);
  if (refusal) return { ok: false, error: refusal };
  const lease = pending.lease;
  if (!lease || lease.fencing_token !== input.fencing_token) return refuse("stale_lease", "the baseline lease was reclaimed or superseded; stop this job");
  return { ok: true, lease };
}

/** Extends the baseline lease (a heartbeat); its holder only, under its fencing token. */
export function renewBaselineLease(
  pending: PendingBaseline,
  input: { lease_id: string; fencing_token: number; holder: string; at: string; ttl_ms: number },
): Outcome<{ pending: PendingBaseline; lease: BaselineLease }> {
  const held = heldLease(pending, input);
  if (!held.ok) return held;
  const lease = { ...held.lease, expires_at: addMs(input.at, input.ttl_ms) };
  return { ok: true, events: [], value: { pending: { ...pending, lease }, lease } };
}

/** Gives the baseline lease back before its deadline: the next runner that asks may take it at once. */
export function releaseBaselineLease(
  pending: PendingBaseline,
  input: { lease_id: string; fencing_token: number; holder: string },
): Outcome<{ pending: PendingBaseline }> {
  const held = heldLease(pending, input);
  if (!held.ok) return held;
  return { ok: true, events: [], value: { pending: { ...pending, lease: null } } };
}

/** The pending record with its lease reclaimed once it expired by `at`; the same record otherwise. */
export function expireBaselineLease(pending: PendingBaseline, at: string): PendingBaseline {
  return pending.lease && Date.parse(pending.lease.expires_at) <= Date.parse(at) ? { ...pending, lease: null } : pending;
}

/**
 * The loop's creation from the baseline its lease holder measured: `loop_created` (naming the runner in
 * `t0_measured_by`) and, for a baseline that already meets the loop's goal, its halt — what `createLoop`
 * answers for a baseline its creator measured. Refused unless the lease is current and the caller's.
 */
export function recordBaseline(
  pending: PendingBaseline,
  input: {
    lease_id: string;
    fencing_token: number;
    holder: string;
    observation: FullObservation;
    /** The precondition as the measuring runner ran it at t0 (DESIGN §6.5). */
    doctor?: DoctorRecord | undefined;
    request_hash: string;
    at: string;
  },
): Outcome<null> {
  const held = heldLease(pending, input);
  if (!held.ok) return held;
  const { lease } = held;
  return createLoop({
    loop_id: pending.loop_id,
    contract: pending.contract,
    contract_hash: pending.contract_hash,
    t0: { commit: pending.commit, observation: input.observation },
    repository: pending.repository,
    // A creator that skipped the precondition skipped it for whoever measures t0.
    doctor: pending.doctor?.status === "skipped" ? pending.doctor : input.doctor,
    t0_measured_by: {
      runner_id: lease.runner_id,
      holder: lease.holder,
      lease_id: lease.lease_id,
      fencing_token: lease.fencing_token,
      request_hash: input.request_hash,
    },
    at: input.at,
  });
}

/** Why `holder` may not store evidence under a baseline lease (not current, or another token's), or null. */
export function baselineLeaseRefusal(pending: PendingBaseline | null, input: { lease_id: string; holder: string }): EngineError | null {
  const lease = pending?.lease;
  if (!lease || lease.lease_id !== input.lease_id)
    return { code: "stale_lease", message: "the baseline lease was reclaimed, superseded or reported; stop this job" };
  if (lease.holder !== input.holder) return { code: "lease_not_yours", message: `lease ${input.lease_id} is held by another token (${lease.holder})` };
  return null;
}

/** What a loop awaiting its baseline waits for, in words: `waiting for a runner with gpu=h100 to measure …`. */
export function awaitingBaselineLine(view: AwaitingBaseline): string {
  const at = view.commit.slice(0, 10);
  if (view.lease) return `runner ${view.lease.runner_id} is measuring the baseline at ${at}`;
  const wanted = Object.keys(view.labels).length > 0 ? `a runner with ${formatLabels(view.labels)}` : "a runner";
  return `waiting for ${wanted} to measure the baseline at ${at}`;
}
