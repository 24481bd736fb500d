import type { Contract } from "../wire/contract.js";
import type { Observation } from "../wire/observation.js";
import type { Halt } from "../wire/event-parts.js";
import { decide, decideUnevaluated, haltAfter } from "./decide.js";
import type { AgentReport } from "../wire/agent-report.js";
import type { ContextManifest, ReviewRequest } from "../wire/review.js";
import type {
  AgentRun,
  Baseline,
  BaselineMeasurer,
  BestRef,
  BundleRef,
  ConfirmReadings,
  Confirmation,
  EventDraft,
  Proposer,
  ReportAnswer,
  Requeued,
} from "./events.js";
import { compareSamples } from "./statistics.js";
import { percentValue, type Labels } from "../wire/contract.js";
import { canonicalJson } from "../canonical-json.js";
import { applyEvent, BASELINE_ID, recheckChanges, recheckRunName, recordedStandingOf } from "./state.js";
import { MAX_RECHECK_IDS, type BestState, type LeaseState, type LoopState, type RequeuedReport } from "./state-types.js";
import { labelsSatisfy } from "./labels.js";
import { compactTests, deltaProblem } from "./test-sets.js";
import { isDeltaTests } from "../wire/observation.js";
import { addMs, refuse, type Outcome } from "./outcome.js";
import { findLease, isCurrentLease, notYours, refOf, RENEWAL_RECORD_MS } from "./lease-commands.js";
import { exitCodeFor } from "../wire/halt-reasons.js";
import type { DoctorRecord } from "../wire/doctor.js";
import { doctorHalt, doctorRecordProblem, monitorHalt, withSample } from "./flake-monitor.js";

// The commands the LoopObject runs. Each is pure: it reads a state and its inputs (time and ids come
// in as arguments) and answers with the events to append, or with an expected failure as a value
// (outcome.ts). Creating a loop, proposing, reporting and confirming are here; leases in lease-commands.ts.

/** Creates a loop from its contract and baseline; a baseline that already passes halts at once. */
export function createLoop(input: {
  loop_id: string;
  contract: Contract;
  contract_hash: string;
  t0: Baseline;
  repository?: string | undefined;
  /** The runner that measured t0 on a baseline lease (baseline-lease.ts); absent when the creator measured it. */
  t0_measured_by?: BaselineMeasurer | undefined;
  /** The precondition's record (DESIGN §6.5); absent only in logs from before it existed. */
  doctor?: DoctorRecord | undefined;
  at: string;
}): Outcome<null> {
  const problem = doctorRecordProblem(input.contract, input.doctor);
  if (problem) return refuse("invalid_observation", `the precondition's record does not fit the contract: ${problem}`);
  const created: EventDraft = {
    type: "loop_created",
    at: input.at,
    // The repository only when given, so logs written before it existed hash the same.
    data: {
      loop_id: input.loop_id,
      contract: input.contract,
      contract_hash: input.contract_hash,
      t0: input.t0,
      ...(input.repository === undefined ? {} : { repository: input.repository }),
      ...(input.t0_measured_by === undefined ? {} : { t0_measured_by: input.t0_measured_by }),
      ...(input.doctor === undefined ? {} : { doctor: input.doctor }),
    },
  };
  const events: EventDraft[] = [created];
  // The precondition first: a check that cannot be trusted decides nothing, success at t0 included.
  const initialHalt = doctorHalt(input.contract, input.doctor) ?? haltAfter(applyEvent(null, created), input.at);
  if (initialHalt) events.push({ type: "halted", at: input.at, data: initialHalt });
  return { ok: true, events, value: null };
}

/**
 * Stops a running loop at a person's request (`cancelled`, exit class 11): the request is recorded as
 * `cancel_requested` and answered by the halt, so a verifier sees who asked and re-derives the halt from
 * it. A loop already cancelled answers as it did (`replayed`); one halted for another reason is
 * `loop_halted`: its halt stands.
 */
export function cancelLoop(state: LoopState, input: { by: string; reason?: string | undefined; at: string }): Outcome<{ replayed: boolean }> {
  if (state.halt?.halt_reason === "cancelled") return { ok: true, events: [], value: { replayed: true } };
  if (state.halt) return refuse("loop_halted", `the loop has halted already (${state.halt.halt_reason}); its halt stands`);
  const reason = input.reason?.trim();
  const requested: EventDraft = {
    type: "cancel_requested",
    at: input.at,
    data: { by: input.by, ...(reason ? { reason } : {}) },
  };
  const halted: EventDraft = {
    type: "halted",
    at: input.at,
    data: { halt_reason: "cancelled", exit_class: exitCodeFor("cancelled"), detail: `cancelled by ${input.by}${reason ? `: ${reason}` : ""}` },
  };
  return { ok: true, events: [requested, halted], value: { replayed: false } };
}

/** A candidate proposal as the runner sends it. */
export interface Proposal {
  idempotency_key: string;
  commit: string;
  diff_sha256: string;
  empty: boolean;
  proposer: Proposer;
  agent: AgentRun | null;
  agent_report?: AgentReport | null | undefined;
  agent_report_error?: string | undefined;
  bundle?: BundleRef | undefined;
  review_request?: ReviewRequest | undefined;
  context?: ContextManifest | undefined;
}

/** Registers a candidate. A failed agent run or an empty change is rejected at once, without a job. */
export function proposeCandidate(
  state: LoopState,
  proposal: Proposal,
  context: { request_hash: string; at: string },
): Outcome<{ candidate_id: string; replayed: boolean }> {
  const existing = state.idempotency[proposal.idempotency_key];
  if (existing !== undefined) {
    if (state.candidates[existing]?.request_hash !== context.request_hash) {
      return refuse("idempotency_conflict", "this idempotency key was used with a different candidate");
    }
    return { ok: true, events: [], value: { candidate_id: existing, replayed: true } };
  }
  if (state.halt) return refuse("loop_halted", `the loop has halted (${state.halt.halt_reason})`);

  const candidateId = `c${state.candidate_order.length + 1}`;
  const proposed: EventDraft = {
    type: "candidate_proposed",
    at: context.at,
    data: {
      candidate_id: candidateId,
      parent: state.best.candidate_id,
      commit: proposal.commit,
      diff_sha256: proposal.diff_sha256,
      empty: proposal.empty,
      proposer: proposal.proposer,
      agent: proposal.agent,
      // Only present when given, so logs written before agent reports existed hash the same.
      ...(proposal.agent_report ? { agent_report: proposal.agent_report } : {}),
      ...(proposal.agent_report_error ? { agent_report_error: proposal.agent_report_error } : {}),
      ...(proposal.bundle ? { bundle: proposal.bundle } : {}),
      ...(proposal.review_request ? { review_request: proposal.review_request } : {}),
      ...(proposal.context ? { context: proposal.context } : {}),
      idempotency_key: proposal.idempotency_key,
      request_hash: context.request_hash,
    },
  };
  const events: EventDraft[] = [proposed];
  // Only a candidate decided at once needs the loop with it in (its agent's cost counts for the budget).
  const after = () => applyEvent(state, proposed);
  const { agent } = proposal;
  if (agent && (agent.timed_out || agent.exit_code !== 0)) {
    const how = agent.timed_out ? "timed out" : `exited with ${agent.exit_code === null ? "a signal" : agent.exit_code}`;
    events.push(...decideUnevaluated(after(), candidateId, "agent_failed", `the agent command ${how}`, context.at).events);
  } else if (proposal.empty) {
    events.push(...decideUnevaluated(after(), candidateId, "no_change", "the agent changed nothing", context.at).events);
  }
  return { ok: true, events, value: { candidate_id: candidateId, replayed: false } };
}

/** Why a report's comparison is stale: what its lease named, what the runner said it compared with, and the best now. */
export interface StaleComparison {
  compare_to: BestRef;
  compared_to: string | null;
  best: BestRef;
}

/**
 * Whether a report under `lease` compared its candidate with something other than the best it would be
 * judged against: the best changed since the lease was granted, or the runner says it compared with
 * another commit than the lease named. Null when it may be judged, and always for a lease granted
 * before leases named their `compare_to` (judged at report time, as it was then).
 *
 * In optimize mode this is what makes the evidence stale: the readings pair the candidate with
 * `compare_to` on one runner (DESIGN §6.3), and say nothing about beating a best they never measured.
 * In check_fixpoint and task_list the observation is of the candidate's tree alone and the ratchet
 * reads the best from the state, so judging it at report time would be sound as well; it is re-queued
 * all the same, and that is right there too: (1) a lease then means one thing in every mode — judged
 * against its `compare_to` — for the runner and for the verifier that re-derives it; (2) the verdict is
 * the same, only later: the re-run measures the same tree and is judged against the same new best;
 * (3) the cost is bounded: a re-queue for a moved best needs a promotion while the candidate was out,
 * and promotions are bounded (each one counts an iteration, and in these modes strictly shrinks the
 * failing set), so no candidate is re-queued forever by a loop that makes progress. Only a runner that
 * keeps naming another commit than its lease does can re-queue a candidate again and again; each time
 * is in the log.
 */
export function staleComparison(best: BestState, lease: LeaseState, comparedTo: string | undefined): StaleComparison | null {
  const compareTo = lease.compare_to;
  if (!compareTo) return null;
  const moved = best.candidate_id !== compareTo.candidate_id;
  const elsewhere = comparedTo !== undefined && comparedTo !== compareTo.commit;
  return moved || elsewhere ? { compare_to: compareTo, compared_to: comparedTo ?? null, best: refOf(best) } : null;
}

/**
 * Why a report may not be judged because it does not say which best its readings measured: in optimize
 * mode a report under a lease that names `compare_to` must echo it as `compared_to`, since its
 * `samples.best` are the runner's readings of some commit and only the echo says which (DESIGN §6.3);
 * judged without it, readings of another commit could promote the candidate over a best they never
 * measured. Null when the report may be judged: it echoes a commit (another one than its lease's is
 * re-queued instead, `staleComparison`), its lease predates `compare_to`, or the loop is not an optimize
 * loop — in check_fixpoint and task_list the observation measures the candidate's tree alone and the
 * engine itself compares it with the best, which `staleComparison` has checked is still the lease's, so
 * a runner that predates `compared_to` is judged as it was. Refused as `invalid_observation`, recording
 * nothing: it is a malformed report, not a moved best, and no re-queue would make its sender echo.
 */
export function unnamedComparison(state: LoopState, lease: LeaseState, observation: Observation): string | null {
  const compareTo = lease.compare_to;
  if (state.contract.mode !== "optimize" || !compareTo || observation.compared_to !== undefined) return null;
  return `the lease names ${compareTo.candidate_id} (${compareTo.commit.slice(0, 12)}) as the best to compare with, and an optimize report must echo it as compared_to: readings of an unnamed best are never judged`;
}

/** The report answer of a re-queued report, as recorded: the same for a retry as for the report itself. */
function requeuedAnswer(candidateId: string, stale: StaleComparison): Requeued {
  const { compare_to, compared_to, best } = stale;
  const short = (commit: string) => commit.slice(0, 12);
  const why =
    best.candidate_id !== compare_to.candidate_id
      ? `the best is now ${best.candidate_id} (${short(best.commit)}), not ${compare_to.candidate_id} (${short(compare_to.commit)}) as when it was leased`
      : `it was compared with ${short(compared_to ?? "")}, not with ${compare_to.candidate_id} (${short(compare_to.commit)}) as its lease named`;
  return {
    candidate_id: candidateId,
    decision: "requeued",
    reason: "stale_comparison",
    detail: `not judged: ${why}; back in the queue, to be compared with ${best.candidate_id}`,
    compare_to,
    best,
  };
}

/**
 * The `lease_requeued` event a report gets instead of a verdict when its comparison is stale
 * (`staleComparison`); null when the report is judged, or would be refused (the lease is not current, or
 * the loop has halted). What `reportObservation` appends, and what a verifier recomputes (`rederive`).
 */
export function requeueIfStale(
  state: LoopState,
  report: { lease_id: string; fencing_token: number; request_hash: string; compared_to: string | undefined; at: string },
): Extract<EventDraft, { type: "lease_requeued" }> | null {
  const candidate = findLease(state, report.lease_id);
  if (state.halt || !candidate || !isCurrentLease(candidate, report)) return null;
  const stale = staleComparison(state.best, candidate.lease, report.compared_to);
  if (!stale) return null;
  return {
    type: "lease_requeued",
    at: report.at,
    data: {
      lease_id: report.lease_id,
      candidate_id: candidate.candidate_id,
      fencing_token: report.fencing_token,
      request_hash: report.request_hash,
      reason: "stale_comparison",
      ...stale,
    },
  };
}

/**
 * Records a runner's observation and decides the candidate, or — when the comparison it was made under
 * is stale (`staleComparison`) — records nothing of it, puts the candidate back in the queue
 * (`lease_requeued`) and answers `requeued`: nothing is ever promoted on stale evidence. A retry of the
 * same report returns the recorded answer; a report under a reclaimed, superseded or re-queued lease or
 * an old fencing token is refused.
 */
export function reportObservation(
  state: LoopState,
  input: { lease_id: string; fencing_token: number; observation: Observation; request_hash: string; at: string; holder?: string | undefined },
): Outcome<ReportAnswer> {
  const candidate = findLease(state, input.lease_id);
  if (!candidate) return refuse("lease_not_found", `no lease ${input.lease_id}`);
  const foreign = notYours(candidate, input);
  if (foreign) return foreign;
  const isRetry = (report: { lease_id: string; fencing_token: number; request_hash: string }) =>
    report.lease_id === input.lease_id && report.fencing_token === input.fencing_token && report.request_hash === input.request_hash;
  const answered = candidate.verdict ?? candidate.pending;
  if (candidate.report && isRetry(candidate.report) && answered) return { ok: true, events: [], value: answered };
  // Checked before `already_reported`: a re-queued report's retry answers the same even once the
  // candidate was judged under a later lease.
  const requeued = candidate.requeued.find((report: RequeuedReport) => report.lease_id === input.lease_id);
  if (requeued) {
    if (isRetry(requeued)) return { ok: true, events: [], value: requeuedAnswer(candidate.candidate_id, requeued) };
    return refuse("stale_lease", "the lease's comparison went stale and its candidate was re-queued; the observation was not recorded");
  }
  // Only an answer of need_samples invites another report: more readings on the same lease. A report's
  // idempotency key is its lease and fencing token (invariant 6): that key with another body, once
  // judged, is a conflict (422), never a second observation; another lease's report is merely late (409).
  if (candidate.report && (candidate.verdict || !candidate.pending)) {
    const { lease_id, fencing_token } = candidate.report;
    if (lease_id === input.lease_id && fencing_token === input.fencing_token) {
      return refuse("idempotency_conflict", "this lease already reported a different observation, which was judged; a retry must send the same body");
    }
    return refuse("already_reported", "this candidate already has a reported observation");
  }
  if (!isCurrentLease(candidate, input)) {
    return refuse("stale_lease", "the lease was reclaimed or superseded; the observation was not recorded");
  }
  if (state.halt) return refuse("loop_halted", `the loop has halted (${state.halt.halt_reason})`);
  // Recorded as a difference from t0's collected set whatever form it came in (DESIGN §8), so the log
  // grows with what changed, not with the suite; a difference that does not fit this loop's set is refused.
  const recorded = asRecorded(state, input.observation);
  if ("problem" in recorded) return refuse("invalid_observation", recorded.problem);
  const requeue = requeueIfStale(state, { ...input, compared_to: input.observation.compared_to });
  if (requeue) return { ok: true, events: [requeue], value: requeuedAnswer(candidate.candidate_id, requeue.data) };
  // Checked after the re-queue: a report whose best has moved is not judged whatever it names.
  const unnamed = unnamedComparison(state, candidate.lease, input.observation);
  if (unnamed) return refuse("invalid_observation", unnamed);
  const { observation } = recorded;
  const reported: EventDraft = {
    type: "observation_reported",
    at: input.at,
    data: {
      candidate_id: candidate.candidate_id,
      lease_id: input.lease_id,
      fencing_token: input.fencing_token,
      observation,
      request_hash: input.request_hash,
    },
  };
  // Decided on the loop as it stands: a decision never reads the candidate's own report, so the loop
  // need not be copied to record it first. Each report's readings are its own lease's, cumulative over
  // that lease (a `need_samples` answer asks the same runner for more): never merged with another's.
  const decision = decide(state, state.contract, candidate.candidate_id, observation, input.at);
  return { ok: true, events: [reported, ...decision.events], value: decision.verdict };
}

/** What a confirm report answers: more pairs wanted, or the measurement recorded. */
export type ConfirmAnswer = { status: "need_samples"; more: number; pairs: number } | { status: "recorded"; confirm: Confirmation };

/**
 * Records the confirm measurement of an optimize loop (DESIGN §6.3): t0 against the current best,
 * interleaved by one runner, judged by the sequential comparison of promotions — more pairs while it is
 * undecided and under `samples.max`, then recorded with its estimate, interval and pairs. The runner
 * only measures; the estimate is computed here. A retry of the recorded readings answers the record.
 *
 * Bound like a lease (DESIGN §11): the first `holder` to send readings for a best claims its measurement
 * (`confirm_claimed`), for `ttl_ms`; while the claim is live another holder's readings are
 * `confirm_not_yours` (403), and each request of its holder renews it (recorded coarsely, as lease
 * renewals are); a claim its holder let lapse (a runner that died) is taken over by the next holder
 * that sends readings. Once a figure is recorded for a claimed best it is final, and other readings are
 * `confirm_recorded` (409). A verifier re-running the log names no holder; a log from before claims is
 * judged as it was.
 */
export function confirmBest(
  state: LoopState,
  input: {
    candidate_id: string;
    samples: ConfirmReadings;
    holder?: string | undefined;
    labels?: Readonly<Labels> | undefined;
    ttl_ms?: number | undefined;
  },
  at: string,
): Outcome<ConfirmAnswer> {
  const metric = state.contract.metric;
  if (state.contract.mode !== "optimize" || !metric) return refuse("confirm_inapplicable", "only an optimize loop's best is confirmed against t0");
  if (state.best.candidate_id === BASELINE_ID) return refuse("confirm_inapplicable", "the best is t0 itself: there is no gain over t0 to confirm");
  if (input.candidate_id !== state.best.candidate_id) {
    return refuse("confirm_stale", `the best is now ${state.best.candidate_id}, not ${input.candidate_id}: measure it against t0 instead`);
  }
  const { t0, best } = input.samples;
  if (t0.length === 0 || t0.length !== best.length || t0.length > metric.samples.max) {
    return refuse(
      "invalid_observation",
      `a confirm measurement is 1 to samples.max (${metric.samples.max}) pairs of readings, t0's and the best's; got ${t0.length} and ${best.length}`,
    );
  }
  // Measured only where the loop's candidates are: on a runner the contract's evaluate.labels admit (DESIGN §11).
  if (input.labels !== undefined && !labelsSatisfy(state.contract.evaluate?.labels ?? {}, input.labels)) {
    return refuse("labels_unsatisfied", "the confirm measurement runs on a runner with the contract's evaluate.labels, which this one lacks");
  }
  const claim = state.confirm_claim?.candidate_id === input.candidate_id ? state.confirm_claim : null;
  const now = Date.parse(at);
  const live = claim !== null && (claim.expires_at === undefined || now < Date.parse(claim.expires_at));
  if (live && input.holder !== undefined && claim.holder !== input.holder) {
    return refuse("confirm_not_yours", `the confirm measurement of ${input.candidate_id} is another runner's (${claim.holder}); only its readings count`);
  }
  const recorded = state.confirm;
  if (recorded?.candidate_id === input.candidate_id && canonicalJson(recorded.samples) === canonicalJson(input.samples)) {
    const { samples: _samples, ...confirm } = recorded;
    return { ok: true, events: [], value: { status: "recorded", confirm } };
  }
  if (claim && recorded?.candidate_id === input.candidate_id) {
    return refuse("confirm_recorded", `the confirm measurement of ${input.candidate_id} is recorded and final; it is not measured again`);
  }
  // The first readings for this best claim its measurement for their holder (or take over a lapsed
  // claim); the holder's later ones renew it, recorded at most every min(RENEWAL_RECORD_MS, ttl/2).
  const mine = live && claim.holder === input.holder;
  const renewal = mine && input.ttl_ms !== undefined && now - Date.parse(claim.recorded_at) >= Math.min(RENEWAL_RECORD_MS, input.ttl_ms / 2);
  const claimed: EventDraft[] =
    input.holder === undefined || (mine && !renewal)
      ? []
      : [
          {
            type: "confirm_claimed",
            at,
            data: { candidate_id: input.candidate_id, holder: input.holder, ...(input.ttl_ms === undefined ? {} : { expires_at: addMs(at, input.ttl_ms) }) },
          },
        ];
  const result = compareSamples({
    best: t0,
    candidate: best,
    direction: metric.direction,
    minEffect: percentValue(metric.min_effect),
    confidence: metric.confidence,
    samples: metric.samples,
  });
  if (result.decision === "need_samples" && result.pairs < metric.samples.max) {
    return { ok: true, events: claimed, value: { status: "need_samples", more: Math.max(1, result.more), pairs: result.pairs } };
  }
  const confirm: Confirmation = {
    candidate_id: state.best.candidate_id,
    commit: state.best.commit,
    t0_commit: state.t0.commit,
    metric: metric.name,
    estimate: result.estimate,
    interval: result.interval,
    level: result.level,
    pairs: result.pairs,
  };
  return {
    ok: true,
    events: [...claimed, { type: "confirm_measured", at, data: { ...confirm, samples: input.samples } }],
    value: { status: "recorded", confirm },
  };
}

/** A re-run of a best's gates as its runner reports it (`POST /v1/loops/:id/rechecks`). */
export interface Recheck {
  idempotency_key: string;
  candidate_id: string;
  commit: string;
  purpose: "resume" | "periodic";
  runner_id: string;
  observation: Observation;
  /** The measuring runner's labels: it must be one the contract's `evaluate.labels` admit. */
  labels?: Labels | undefined;
}

/** What a recheck answers: the ids whose outcome differed from the best's recorded one (the first MAX_RECHECK_IDS, and how many), and the halt it caused, if any. */
export interface RecheckAnswer {
  changed: string[];
  changed_count: number;
  halt: Halt | null;
  replayed: boolean;
}

/**
 * Records a re-run of a best's gates (DESIGN §6.5) and judges it against that best's recorded outcome:
 * `t0`, or a promoted candidate. On resume (`purpose: resume`) any difference halts `check_flaky` with
 * both outcomes named, before the next agent run rests on the check; a periodic recheck is one more
 * sample of the flake monitor, which halts once the check is shown flakier than its target (in a log
 * from before the monitor, any difference halts). A retry with the same key and body answers the same;
 * the same key with another body is a conflict.
 */
export function recheckBest(state: LoopState, input: Recheck & { by: string }, context: { request_hash: string; at: string }): Outcome<RecheckAnswer> {
  const earlier = state.rechecks[input.idempotency_key];
  if (earlier) {
    if (earlier.request_hash !== context.request_hash) return refuse("idempotency_conflict", "this idempotency key was used with a different recheck");
    return { ok: true, events: [], value: { changed: earlier.changed, changed_count: earlier.changed_count, halt: state.halt, replayed: true } };
  }
  if (state.halt) return refuse("loop_halted", `the loop has halted (${state.halt.halt_reason})`);
  // Re-run only where the loop's candidates are measured: on a runner the contract's evaluate.labels admit (DESIGN §11).
  if (input.labels !== undefined && !labelsSatisfy(state.contract.evaluate?.labels ?? {}, input.labels)) {
    return refuse("labels_unsatisfied", "a best's gates are re-run on a runner with the contract's evaluate.labels, which this one lacks");
  }
  const recorded = recordedStandingOf(state, input.candidate_id);
  const commit = input.candidate_id === BASELINE_ID ? state.t0.commit : state.candidates[input.candidate_id]?.commit;
  if (!recorded || commit === undefined)
    return refuse("not_a_best", `${input.candidate_id} is neither t0 nor a promoted candidate: only a best's recorded outcome is known`);
  if (commit !== input.commit) return refuse("invalid_observation", `${input.candidate_id} is commit ${commit.slice(0, 12)}, not ${input.commit.slice(0, 12)}`);
  const asDelta = asRecorded(state, input.observation);
  if ("problem" in asDelta) return refuse("invalid_observation", asDelta.problem);
  const { observation } = asDelta;
  const reported: EventDraft = {
    type: "recheck_reported",
    at: context.at,
    data: {
      candidate_id: input.candidate_id,
      commit: input.commit,
      purpose: input.purpose,
      runner_id: input.runner_id,
      by: input.by,
      observation,
      idempotency_key: input.idempotency_key,
      request_hash: context.request_hash,
    },
  };
  const changed = recheckChanges(state, input.candidate_id, observation);
  const halt = recheckHalt(state, input.candidate_id, input.purpose, changed);
  const events: EventDraft[] = halt ? [reported, { type: "halted", at: context.at, data: halt }] : [reported];
  return { ok: true, events, value: { changed: changed.slice(0, MAX_RECHECK_IDS), changed_count: changed.length, halt, replayed: false } };
}

/**
 * The halt a recheck of `candidateId` that changed `changed` causes, judged on the loop before it is
 * recorded: on resume, or in a log without a flake monitor, any change; else the monitor with this
 * sample. What `recheckBest` appends and what a verifier recomputes.
 */
export function recheckHalt(state: LoopState, candidateId: string, purpose: "resume" | "periodic", changed: readonly string[]): Halt | null {
  if (changed.length === 0) return null;
  if (purpose === "resume" || !state.monitor) {
    const when = purpose === "resume" ? "on resume, before the next agent run" : "when re-run";
    return {
      halt_reason: "check_flaky",
      exit_class: exitCodeFor("check_flaky"),
      detail: `the best ${candidateId} gave other outcomes ${when} than recorded for ${changed.length} test(s): ${changed
        .slice(0, 5)
        .join(", ")}${changed.length > 5 ? ", …" : ""}; the check no longer gives what it gave (the check or what it depends on changed, or it is flaky)`,
    };
  }
  return monitorHalt(state.contract, withSample(state.monitor, { run: recheckRunName(candidateId, purpose, state.iterations), changed }));
}

/**
 * An observation as the log records it (DESIGN §8): its tests a difference from t0's collected set,
 * whatever form they came in, so the log grows with what changed, not with the suite; or why a
 * difference sent does not fit this loop's set.
 */
function asRecorded(state: LoopState, observation: Observation): { observation: Observation } | { problem: string } {
  const { tests } = observation;
  if (!isDeltaTests(tests)) return { observation: { ...observation, tests: compactTests(tests, state.t0_base) } };
  const problem = deltaProblem(tests, state.t0_base);
  return problem ? { problem } : { observation };
}
