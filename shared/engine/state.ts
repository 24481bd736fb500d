import type { Contract } from "../wire/contract.js";
import type { GateResult, Observation } from "../wire/observation.js";
import type { EventDraft, Verdict } from "./events.js";
import { baselineGuards } from "./guards.js";
import { changedOutcomes, gatePassed, standingOf, testBaseOf, type TestStanding } from "./test-sets.js";
import { monitorAtCreation, withSample, type FlakeMonitor } from "./flake-monitor.js";
import { confinementAtCreation, countAgentRun, countEvaluation, type ConfinementSummary } from "./confinement-summary.js";
import { MAX_RECHECK_IDS, type CandidateState, type GateSummary, type LoopState, type ReviewAnswer } from "./state-types.js";

/** The gates of an observation as the state keeps them, judged by the contract's gates (derived on every fold: no event records it). */
function gateSummariesOf(contract: Contract, gates: readonly GateResult[]): GateSummary[] {
  return gates.map((result) => {
    const gate = contract.gates.find((entry) => entry.name === result.name);
    const { name, exit_code, signal, timed_out, log } = result;
    return { name, exit_code, signal, timed_out, log, soft: gate?.soft !== undefined, passed: gate ? gatePassed(gate, result) : exit_code === 0 && !timed_out };
  });
}

/** The median of readings (the mean of the middle two for an even count); null for none. */
export function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[middle] ?? null) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

/** The confinement summary of a state being folded, copied on the fold's first write to it (bounded: its lists are capped). */
function ownConfinement(state: LoopState): ConfinementSummary {
  const owned = OWNED.get(state);
  if (!owned) throw new Error("internal: a fold wrote a state it does not own");
  if (owned.has(state.confinement)) return state.confinement;
  const { agent, exec, index } = state.confinement;
  // Host records are replaced, never written, so the lists may share them.
  const copy: ConfinementSummary = {
    agent: { ...agent, runs: { ...agent.runs }, networks: { ...agent.networks }, allow: [...agent.allow], hosts: [...agent.hosts] },
    exec: { evaluations: { ...exec.evaluations }, networks: { ...exec.networks } },
    index: { allow: { ...index.allow }, hosts: { ...index.hosts } },
  };
  state.confinement = copy;
  owned.add(copy);
  return copy;
}

/** The id the baseline carries wherever a candidate id is expected (e.g. as a parent). */
export const BASELINE_ID = "t0";

/** What names a candidate's tree in `same_tree`: its parent and the digest of its change from it. */
export function sameTreeKey(parent: string, diffSha256: string): string {
  return `${parent} ${diffSha256}`;
}

/** The containers of a state that a fold writes in place. */
type Container = "candidates" | "candidate_order" | "unsettled" | "same_tree" | "idempotency" | "lease_index" | "regressions_since_promotion" | "rechecks";

/** For each state a fold owns, the containers it has already copied (and so may write). */
const OWNED = new WeakMap<LoopState, Set<unknown>>();

/**
 * A shallow copy of a state for a fold to write: its containers (candidates, their order, the
 * idempotency and lease indexes, the regression list) are copied on the fold's first write to each
 * (`own`), then written in place. One copy per container per fold, not per event, so folding a long log
 * is linear in its length, and an event copies only what it changes. Candidates themselves are never
 * written, only replaced.
 */
function writable(state: LoopState): LoopState {
  const copy = { ...state };
  OWNED.set(copy, new Set());
  return copy;
}

/** A container of a state being folded, copied on first write so the state the fold began from is never written. */
function own<K extends Container>(state: LoopState, key: K): LoopState[K] {
  const owned = OWNED.get(state);
  if (!owned) throw new Error("internal: a fold wrote a state it does not own");
  const container = state[key];
  if (owned.has(container)) return container;
  const copy = (Array.isArray(container) ? [...container] : { ...container }) as LoopState[K];
  state[key] = copy;
  owned.add(copy);
  return copy;
}

/** Replaces a candidate in a state being folded: the candidate object is new, the map (the fold's own) written in place. */
function updateCandidate(state: LoopState, id: string, change: Partial<CandidateState>): LoopState {
  const candidate = state.candidates[id];
  if (!candidate) throw new Error(`event refers to unknown candidate ${id}`);
  own(state, "candidates")[id] = { ...candidate, ...change };
  return state;
}

/**
 * Applies one event to a state, leaving the given state as it was. Total over well-formed logs; throws
 * only on a log that breaks the engine's own invariants (an event before `loop_created`, an unknown
 * candidate), which is corruption.
 */
export function applyEvent(state: LoopState | null, event: EventDraft): LoopState {
  return applyInPlace(state === null ? null : writable(state), event);
}

/**
 * For a candidate a person acknowledged, what its report read of the files they approved (sha256 of the
 * protected file; null: not among them, e.g. deleted): what the guards hold later candidates to once it
 * is promoted (docs/design.md §6.8). Null for any other candidate.
 */
function approvedReadings(candidate: CandidateState | undefined, observation: Observation): Record<string, string | null> | null {
  if (candidate?.review?.decision !== "ack") return null;
  const read = observation.guards?.protected_files ?? {};
  return Object.fromEntries(candidate.review.files.map((file) => [file, read[file] ?? null]));
}

/** `applyEvent` on a state a fold owns (from `writable`), writing its containers in place. */
function applyInPlace(state: LoopState | null, event: EventDraft): LoopState {
  if (event.type === "loop_created") {
    if (state) throw new Error("loop_created may only be the first event");
    const { data } = event;
    const base = testBaseOf(data.t0.observation.tests);
    const t0 = {
      candidate_id: BASELINE_ID,
      commit: data.t0.commit,
      ...standingOf(data.contract, data.t0.observation, base),
      metric: median(data.t0.observation.samples?.candidate ?? []),
    };
    const created: LoopState = {
      loop_id: data.loop_id,
      repository: data.repository ?? null,
      contract: data.contract,
      contract_hash: data.contract_hash,
      created_at: event.at,
      t0,
      t0_base: base,
      t0_guards: baselineGuards(data.t0.commit, data.t0.observation),
      t0_evidence: { gates: gateSummariesOf(data.contract, data.t0.observation.gates), artifacts: data.t0.observation.artifacts ?? [] },
      t0_measured_by: data.t0_measured_by ?? null,
      best: t0,
      candidates: {},
      candidate_order: [],
      unsettled: [],
      same_tree: {},
      idempotency: {},
      lease_index: {},
      iterations: 0,
      last_promotion_iteration: 0,
      regressions_since_promotion: [],
      consecutive_agent_failures: 0,
      cost_usd: 0,
      fencing_counter: 0,
      halt: null,
      halted_at: null,
      final_receipt: null,
      final_receipt_outdated: false,
      confirm: null,
      confirm_claim: null,
      confinement: confinementAtCreation(data.t0.observation.exec_zone),
      doctor: data.doctor ?? null,
      monitor: monitorAtCreation(data.doctor),
      t0_check_ms: [...data.t0.observation.gates, ...(data.t0.observation.tasks ?? [])].reduce((sum, gate) => sum + gate.duration_ms, 0),
      rechecks: {},
      last_recheck_iteration: null,
      approved_changes: {},
      reviews: [],
    };
    // Its containers are new: the fold owns them from the start.
    OWNED.set(
      created,
      new Set([
        created.candidates,
        created.candidate_order,
        created.unsettled,
        created.same_tree,
        created.idempotency,
        created.lease_index,
        created.regressions_since_promotion,
        created.confinement,
        created.rechecks,
      ]),
    );
    return created;
  }
  if (!state) throw new Error(`${event.type} before loop_created`);

  switch (event.type) {
    case "candidate_proposed": {
      const { data } = event;
      const candidate: CandidateState = {
        candidate_id: data.candidate_id,
        parent: data.parent,
        commit: data.commit,
        empty: data.empty,
        agent: data.agent,
        agent_report: data.agent_report ?? null,
        diff_sha256: data.diff_sha256,
        bundle: data.bundle ?? null,
        idempotency_key: data.idempotency_key,
        request_hash: data.request_hash,
        proposed_at: event.at,
        status: data.review_request ? "awaiting_review" : "queued",
        lease: null,
        report: null,
        verdict: null,
        pending: null,
        requeued: [],
        released: [],
        review_request: data.review_request ?? null,
        review: null,
        approved_readings: null,
        context: data.context ?? null,
      };
      own(state, "candidates")[data.candidate_id] = candidate;
      own(state, "candidate_order").push(data.candidate_id);
      own(state, "unsettled").push(data.candidate_id);
      // A new list, not a push: the lists are shared with the state the fold began from.
      const tree = sameTreeKey(data.parent, data.diff_sha256);
      own(state, "same_tree")[tree] = [...(state.same_tree[tree] ?? []), data.candidate_id];
      own(state, "idempotency")[data.idempotency_key] = data.candidate_id;
      state.cost_usd += data.agent_report?.cost?.usd ?? 0;
      countAgentRun(ownConfinement(state), data.agent);
      return state;
    }
    case "lease_granted": {
      const { data } = event;
      const lease = {
        lease_id: data.lease_id,
        runner_id: data.runner_id,
        ...(data.holder === undefined ? {} : { holder: data.holder }),
        fencing_token: data.fencing_token,
        expires_at: data.expires_at,
        recorded_at: event.at,
        compare_to: data.compare_to ?? null,
        ...(data.labels === undefined ? {} : { labels: data.labels }),
      };
      updateCandidate(state, data.candidate_id, { status: "leased", lease });
      own(state, "lease_index")[data.lease_id] = data.candidate_id;
      state.fencing_counter = Math.max(state.fencing_counter, data.fencing_token);
      return state;
    }
    case "lease_renewed": {
      const candidate = state.candidates[event.data.candidate_id];
      if (!candidate?.lease) throw new Error(`lease_renewed for a candidate without a lease`);
      return updateCandidate(state, candidate.candidate_id, {
        lease: { ...candidate.lease, expires_at: event.data.expires_at, recorded_at: event.at },
      });
    }
    case "lease_expired":
      return updateCandidate(state, event.data.candidate_id, { status: "queued", lease: null });
    case "lease_released": {
      // As an expiry, only sooner: back to the queue in its place (an earlier `need_samples` answer on the
      // lease stays as it was; the next lease's reports bring their own readings).
      const { data } = event;
      const candidate = state.candidates[data.candidate_id];
      if (!candidate) throw new Error(`lease_released for unknown candidate ${data.candidate_id}`);
      return updateCandidate(state, data.candidate_id, {
        status: "queued",
        lease: null,
        released: [...candidate.released, { lease_id: data.lease_id, fencing_token: data.fencing_token }],
      });
    }
    case "lease_requeued": {
      // As an expiry: back to the queue in its place. An earlier `need_samples` answer on the lease stays
      // as it was (its retry answers the same); the next lease's reports bring their own readings.
      const { data } = event;
      const candidate = state.candidates[data.candidate_id];
      if (!candidate) throw new Error(`lease_requeued for unknown candidate ${data.candidate_id}`);
      const { lease_id, fencing_token, request_hash, compare_to, compared_to, best } = data;
      return updateCandidate(state, data.candidate_id, {
        status: "queued",
        lease: null,
        requeued: [...candidate.requeued, { lease_id, fencing_token, request_hash, compare_to, compared_to, best }],
      });
    }
    case "observation_reported": {
      const { data } = event;
      countEvaluation(ownConfinement(state), data.observation.exec_zone);
      const tests = standingOf(state.contract, data.observation, state.t0_base);
      const { known, monitor } = reportSample(state, data.candidate_id, data.lease_id, tests);
      state.monitor = monitor;
      const approved = approvedReadings(state.candidates[data.candidate_id], data.observation);
      return updateCandidate(state, data.candidate_id, {
        ...(approved ? { approved_readings: approved } : {}),
        report: {
          known_outcome: known,
          lease_id: data.lease_id,
          fencing_token: data.fencing_token,
          request_hash: data.request_hash,
          tests,
          gates: gateSummariesOf(state.contract, data.observation.gates),
          artifacts: data.observation.artifacts ?? [],
          ...(data.observation.artifact_errors ? { artifact_errors: data.observation.artifact_errors } : {}),
          ...(data.observation.exec_zone ? { exec_zone: data.observation.exec_zone } : {}),
        },
      });
    }
    case "verdict": {
      const verdict = event.data;
      const candidate = state.candidates[verdict.candidate_id];
      if (!candidate) throw new Error(`verdict for unknown candidate ${verdict.candidate_id}`);
      // Not final: the candidate stays leased while the runner measures more pairs.
      if (verdict.decision === "need_samples") return updateCandidate(state, verdict.candidate_id, { pending: verdict });
      const next = updateCandidate(state, verdict.candidate_id, { status: verdict.decision, verdict, pending: null, lease: null });
      // A promoted candidate's approved change to protected files is what they are compared with from now on.
      if (verdict.decision === "promoted" && candidate.approved_readings) next.approved_changes = { ...next.approved_changes, ...candidate.approved_readings };
      // Few candidates are unsettled at once (those in the queue or out on a lease): a scan of them is short.
      const unsettled = own(next, "unsettled");
      const at = unsettled.indexOf(verdict.candidate_id);
      if (at >= 0) unsettled.splice(at, 1);
      settleVerdict(next, verdict, candidate, candidate.report?.tests ?? null, (entry) => own(next, "regressions_since_promotion").push(entry));
      return next;
    }
    case "halted":
      state.halt = event.data;
      state.halted_at = event.at;
      return state;
    case "receipt_issued":
      if (event.data.kind === "final") {
        state.final_receipt = event.data.receipt_id;
        state.final_receipt_outdated = false;
      }
      return state;
    case "confirm_claimed":
      state.confirm_claim = {
        candidate_id: event.data.candidate_id,
        holder: event.data.holder,
        ...(event.data.expires_at === undefined ? {} : { expires_at: event.data.expires_at }),
        recorded_at: event.at,
      };
      return state;
    case "confirm_measured":
      state.confirm = event.data;
      state.final_receipt_outdated = state.final_receipt !== null;
      return state;
    case "cancel_requested":
    case "review_timed_out":
    case "context_unsatisfiable":
      // An input: the `halted` event the engine answers it with changes the state.
      return state;
    case "review_decided": {
      const { data } = event;
      const review: ReviewAnswer = { decision: data.decision, by: data.by, note: data.note, at: event.at, files: data.files };
      state.reviews = [...state.reviews, { candidate_id: data.candidate_id, ...review }];
      // An acknowledged candidate joins the queue in its place; a rejected one is settled by the verdict that follows.
      return updateCandidate(state, data.candidate_id, { review, ...(data.decision === "ack" ? { status: "queued" as const } : {}) });
    }
    case "recheck_reported": {
      const { data } = event;
      const changed = recheckChanges(state, data.candidate_id, data.observation);
      if (state.monitor) state.monitor = withSample(state.monitor, { run: recheckRunName(data.candidate_id, data.purpose, state.iterations), changed });
      own(state, "rechecks")[data.idempotency_key] = {
        request_hash: data.request_hash,
        candidate_id: data.candidate_id,
        changed: changed.slice(0, MAX_RECHECK_IDS),
        changed_count: changed.length,
      };
      state.last_recheck_iteration = state.iterations;
      return state;
    }
  }
}

/** A recheck's run as the monitor names it, e.g. `c3 re-run on resume`, `t0 re-run at iteration 5`. */
export function recheckRunName(candidateId: string, purpose: "resume" | "periodic", iterations: number): string {
  return purpose === "resume" ? `${candidateId} re-run on resume` : `${candidateId} re-run at iteration ${iterations}`;
}

/** The recorded standing of a best that may be re-run: t0's, or a promoted candidate's report; null for anything else. */
export function recordedStandingOf(state: LoopState, candidateId: string): TestStanding | null {
  if (candidateId === BASELINE_ID) return state.t0;
  const candidate = state.candidates[candidateId];
  return candidate?.status === "promoted" ? (candidate.report?.tests ?? null) : null;
}

/** The ids whose outcome a recheck of `candidateId` changed against its recorded standing (every id, linear in the differences). */
export function recheckChanges(state: LoopState, candidateId: string, observation: Observation): string[] {
  const recorded = recordedStandingOf(state, candidateId);
  if (!recorded) throw new Error(`recheck of ${candidateId}, which is neither t0 nor a promoted candidate`);
  return changedOutcomes(standingOf(state.contract, observation, state.t0_base), recorded, state.t0_base);
}

/**
 * What a report of `candidateId` under `leaseId` that measured `tests` tells the flake monitor, from the
 * loop before the report is recorded: the known outcome it was compared with (null when none was known)
 * and the monitor with its sample. What the fold records and what `decide` judges the report by, so the
 * coordinator (which decides before it records) and a verifier agree.
 */
export function reportSample(
  state: LoopState,
  candidateId: string,
  leaseId: string | undefined,
  tests: TestStanding,
): { known: { against: string; changed: string[] } | null; monitor: FlakeMonitor | null } {
  const known = knownOutcomeOf(state, candidateId, leaseId, tests);
  if (!known || !state.monitor) return { known, monitor: state.monitor };
  return { known, monitor: withSample(state.monitor, { run: `${candidateId}, a re-run of ${known.against}'s tree`, changed: known.changed }) };
}

/**
 * Whether a report measured a tree whose outcome was already known, and what differed: the candidate's
 * own earlier report under another lease, else the report of another candidate with the same parent and
 * change. A further report on the same lease (more metric pairs) measures nothing new: null.
 */
function knownOutcomeOf(
  state: LoopState,
  candidateId: string,
  leaseId: string | undefined,
  tests: TestStanding,
): { against: string; changed: string[] } | null {
  const candidate = state.candidates[candidateId];
  if (!candidate) return null;
  if (candidate.report) {
    if (candidate.report.lease_id === leaseId) return null;
    return { against: candidateId, changed: changedOutcomes(tests, candidate.report.tests, state.t0_base) };
  }
  const twin = (state.same_tree[sameTreeKey(candidate.parent, candidate.diff_sha256)] ?? [])
    .map((id) => state.candidates[id])
    .find((other) => other !== undefined && other.candidate_id !== candidateId && other.report !== null);
  if (!twin?.report) return null;
  return { against: twin.candidate_id, changed: changedOutcomes(tests, twin.report.tests, state.t0_base) };
}

/**
 * What a final verdict changes for the loop as a whole — the iteration count, the agent-failure streak,
 * the best-so-far and the regressions since the last promotion — written on `state`. `tests` is the
 * candidate's standing (its report's); `record` adds a regression entry.
 */
function settleVerdict(
  state: LoopState,
  verdict: Verdict,
  candidate: { candidate_id: string; commit: string },
  tests: TestStanding | null,
  record: (entry: LoopState["regressions_since_promotion"][number]) => void,
): void {
  state.iterations += 1;
  state.consecutive_agent_failures = verdict.reason === "agent_failed" ? state.consecutive_agent_failures + 1 : 0;
  if (verdict.decision === "promoted") {
    // A promoted candidate always has its report; an empty standing only keeps a corrupt log foldable.
    const standing = tests ?? { failing: [], base_not_passing: [...state.t0_base.ids], extra_passing: [], passing_count: 0 };
    state.best = { candidate_id: candidate.candidate_id, commit: candidate.commit, ...standing, metric: verdict.metric?.candidate_median ?? null };
    state.last_promotion_iteration = state.iterations;
    state.regressions_since_promotion = [];
  } else if (verdict.reason === "regressed" && tests) {
    const stillFailing = new Set(tests.failing);
    const fixed = state.best.failing.filter((id) => !stillFailing.has(id) && !id.startsWith("gate:"));
    record({ candidate_id: candidate.candidate_id, fixed, broken: verdict.regressed.filter((id) => !id.startsWith("gate:")) });
  }
}

/**
 * The loop as a final verdict on a candidate (with standing `tests`) leaves it, for deciding whether it
 * halts (`haltAfter` reads only loop-level fields): its candidates are not updated, so nothing that grows
 * with the loop is copied but the regression list. A decision is then as cheap at 5,000 candidates as at 5.
 */
export function loopAfterVerdict(state: LoopState, verdict: Verdict, tests: TestStanding | null): LoopState {
  const candidate = state.candidates[verdict.candidate_id];
  if (!candidate) throw new Error(`verdict for unknown candidate ${verdict.candidate_id}`);
  const next = { ...state };
  settleVerdict(next, verdict, candidate, tests, (entry) => {
    next.regressions_since_promotion = [...next.regressions_since_promotion, entry];
  });
  return next;
}

/**
 * A fold that goes on writing one state as events come, for a reader that needs the state after each
 * event (a verifier re-deriving verdicts): linear in the log, where `applyEvent` per event would copy the
 * loop's containers every time. The state it answers is the fold's own and changes with the next event.
 */
export function stepwiseFold(): { apply(event: EventDraft): LoopState } {
  let state: LoopState | null = null;
  return {
    apply(event) {
      state = applyInPlace(state, event);
      return state;
    },
  };
}

/**
 * `fold(events) → state` (DESIGN §6), linear in the log's length. With `from`, folds only the events
 * that follow the state given (read incrementally, `?after=seq`), which is left as it was. Null for an
 * empty log.
 */
export function foldEvents(events: readonly EventDraft[], from: LoopState | null = null): LoopState | null {
  let state = from === null ? null : writable(from);
  for (const event of events) state = applyInPlace(state, event);
  return state;
}

/**
 * `foldEvents` writing `state` itself rather than a copy, for a holder that owns its state and only ever
 * reads it as it is now (the LoopObject's event store). An append then costs what its events change: a
 * copy of the loop's candidates, indexes and order on every append made a decision's cost grow with the
 * loop's history (DESIGN §4 invariant 9), 17 ms a candidate at 5,000. Answers the folded state: `state`,
 * changed, unless it was null. Whoever kept a reference to `state` sees it change.
 */
export function foldEventsInto(events: readonly EventDraft[], state: LoopState | null): LoopState | null {
  if (state !== null) {
    OWNED.set(
      state,
      new Set<unknown>([
        state.candidates,
        state.candidate_order,
        state.unsettled,
        state.same_tree,
        state.idempotency,
        state.lease_index,
        state.regressions_since_promotion,
        state.confinement,
      ]),
    );
  }
  let folded = state;
  for (const event of events) folded = applyInPlace(folded, event);
  return folded;
}
