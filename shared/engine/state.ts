import type { Contract } from "../wire/contract.js";
import type { AgentReport } from "../wire/agent-report.js";
import type { ArtifactError, ArtifactRef, GateResult } from "../wire/observation.js";
import { MAX_HOST_CONTACTS, type AgentConfinement, type ExecConfinement, type HostContact } from "../wire/confinement.js";
import type { AgentRun, BestRef, ConfirmReadings, Confirmation, EventDraft, Halt, Verdict, BundleRef } from "./events.js";
import { baselineGuards, type BaselineGuards } from "./guards.js";
import { gatePassed, standingOf, testBaseOf, type TestBase, type TestStanding } from "./test-sets.js";

/** Where a candidate is in its life: waiting for a runner, being evaluated, or decided. */
export type CandidateStatus = "queued" | "leased" | "promoted" | "rejected";

/** A runner's current claim on a candidate's evaluation. */
export interface LeaseState {
  lease_id: string;
  runner_id: string;
  /** The token that took it (`owner` for the instance owner's); absent for a lease granted before holders were recorded. */
  holder?: string;
  fencing_token: number;
  expires_at: string;
  /** When `expires_at` was last recorded (the grant's or the last recorded renewal's time): renewals are recorded coarsely. */
  recorded_at: string;
  /** The best-so-far when it was granted, which the candidate is compared against; null for a lease granted before leases named it. */
  compare_to: BestRef | null;
}

/** A report that was not judged because its comparison was stale (`lease_requeued`): enough to answer its retry the same. */
export interface RequeuedReport {
  lease_id: string;
  fencing_token: number;
  request_hash: string;
  compare_to: BestRef;
  compared_to: string | null;
  best: BestRef;
}

/** Everything the engine knows about one candidate. */
export interface CandidateState {
  candidate_id: string;
  parent: string;
  commit: string;
  empty: boolean;
  agent: AgentRun | null;
  agent_report: AgentReport | null;
  /** Digest of the change from its parent: with the parent, it names the tree evaluated. */
  diff_sha256: string;
  /** The git bundle that carries its commit to runners in other checkouts, when the proposer uploaded one. */
  bundle: BundleRef | null;
  idempotency_key: string;
  request_hash: string;
  proposed_at: string;
  status: CandidateStatus;
  lease: LeaseState | null;
  /** Its report: the standing, and (`StoredEvidence`) how each gate ended and where its log and files are — what `logs` and a rejection line name. */
  report:
    | (StoredEvidence & {
        lease_id: string;
        fencing_token: number;
        request_hash: string;
        /** Where the report stands against t0's collected set (`standingOf`): as large as what differs from t0. */
        tests: TestStanding;
        /** How its evaluation's commands were confined; absent when its runner did not record it. */
        exec_zone?: ExecConfinement;
      })
    | null;
  verdict: Verdict | null;
  /** The last `need_samples` answer while more readings are awaited on the lease; null otherwise. */
  pending: Verdict | null;
  /** Reports re-queued unjudged because their comparison was stale, oldest first: a retry of one answers the same. */
  requeued: RequeuedReport[];
  /** Leases their runners gave back (`lease_released`), oldest first: a retry of a release answers the same. */
  released: { lease_id: string; fencing_token: number }[];
}

/** How one gate of a report ended, and its log. */
export interface GateSummary {
  name: string;
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  log: ArtifactRef | null;
  /** Whether the contract makes it a soft gate (judged on a metric's threshold, never stopping the gates after it). */
  soft: boolean;
  /** Whether it passed as the engine judges it (`gatePassed`): a hard gate by exit code and readable report, a soft one by its threshold. */
  passed: boolean;
}

/** What one evaluation stored besides its test outcomes: each gate's outcome and log, and its files. */
export interface StoredEvidence {
  gates: GateSummary[];
  /** The files the evaluation stored besides gate logs (the contract's `artifacts`, `metric.log`). */
  artifacts: ArtifactRef[];
  /** What it could not store as it was, and why; absent when everything was stored. */
  artifact_errors?: ArtifactError[];
}

/** The gates of an observation as the state keeps them, judged by the contract's gates (derived on every fold: no event records it). */
function gateSummariesOf(contract: Contract, gates: readonly GateResult[]): GateSummary[] {
  return gates.map((result) => {
    const gate = contract.gates.find((entry) => entry.name === result.name);
    const { name, exit_code, signal, timed_out, log } = result;
    return { name, exit_code, signal, timed_out, log, soft: gate?.soft !== undefined, passed: gate ? gatePassed(gate, result) : exit_code === 0 && !timed_out };
  });
}

/** The best-so-far: t0 until the first promotion. */
export interface BestState extends TestStanding {
  candidate_id: string;
  commit: string;
  /** Optimize mode: the median reading of the contract's metric when it became the best (null otherwise). */
  metric: number | null;
}

/** The median of readings (the mean of the middle two for an even count); null for none. */
export function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[middle] ?? null) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

/** A loop's state: always `foldEvents(events)`, never edited directly. */
export interface LoopState {
  loop_id: string;
  /** The repository as its runner named it at creation; null when it gave none. */
  repository: string | null;
  contract: Contract;
  contract_hash: string;
  created_at: string;
  t0: BestState;
  /**
   * t0's collected test set, named by its digest (DESIGN §8): stored once, in the loop's first event;
   * every later report is a difference from it, and every standing is read against it.
   */
  t0_base: TestBase;
  /** What the guards compare against besides t0's collected set (DESIGN §6.4): fixed at creation, never re-captured. */
  t0_guards: BaselineGuards;
  /** What t0's measurement stored: its gates' outcomes and logs, and its files (uploaded right after the creation). */
  t0_evidence: StoredEvidence;
  best: BestState;
  candidates: Record<string, CandidateState>;
  candidate_order: string[];
  /**
   * The candidates of each tree — the same parent and the same change (`sameTreeKey`) — in proposal
   * order: a flip is looked for among these (DESIGN §6.5) in time linear in what shares the tree, not
   * in the loop's length.
   */
  same_tree: Record<string, string[]>;
  idempotency: Record<string, string>;
  /** Every lease ever granted, to its candidate: a reclaimed lease is known, and refused as stale. */
  lease_index: Record<string, string>;
  /** Candidates with a final verdict: one iteration is one agent run and the verdict on its candidate. */
  iterations: number;
  /** The iteration of the last promotion; 0 when nothing was promoted. */
  last_promotion_iteration: number;
  /**
   * Since the last promotion, each rejected candidate that broke a passing test: what it fixed and what
   * it broke (DESIGN §6.2: oscillation and unsatisfiable constraints are read from these).
   */
  regressions_since_promotion: { candidate_id: string; fixed: string[]; broken: string[] }[];
  consecutive_agent_failures: number;
  /** The sum of the costs agents reported, in USD (stop.budget.cost_usd). */
  cost_usd: number;
  fencing_counter: number;
  halt: Halt | null;
  halted_at: string | null;
  /** The receipt issued at the halt (DESIGN §9), once it is. */
  final_receipt: string | null;
  /** Whether something a final receipt attests changed since it was issued (a confirm measurement came in). */
  final_receipt_outdated: boolean;
  /** The last confirm measurement of t0 against a best (DESIGN §6.3), with its readings. */
  confirm: (Confirmation & { samples: ConfirmReadings }) | null;
  /** Who claimed the confirm measurement of which best (`confirm_claimed`); null before any claim, and in logs from before claims. */
  confirm_claim: { candidate_id: string; holder: string; expires_at?: string; recorded_at: string } | null;
  /** How the agent runs and evaluations so far were confined (DESIGN §6.7), summed event by event: what a receipt attests of them. */
  confinement: ConfinementSummary;
}

/** Zone counts by what walled the zone off; `unrecorded` for a record without it (a runner older than the zones). */
export interface MechanismCounts {
  bwrap: number;
  none: number;
  unrecorded: number;
}

/**
 * How a loop's two zones were confined (DESIGN §6.7), kept by the fold in O(1) per event (invariant 9):
 * never re-read from the candidates. Its lists are bounded, so a receipt of 5,000 runs is as large as
 * one of 5.
 */
export interface ConfinementSummary {
  agent: {
    /** Agent runs by mechanism; `unobserved` counts proposals with no run the runner observed (`loopwarden step`). */
    runs: MechanismCounts & { unobserved: number };
    /** Agent runs by network policy, of those that recorded one. */
    networks: Record<AgentConfinement["network"], number>;
    /** The union of the runs' allowlists in the order first seen, at most MAX_ALLOW_UNION entries. */
    allow: string[];
    /** Allowlist entries not itemised because `allow` was full, summed over runs (one entry in two runs counts twice). */
    allow_omitted: number;
    /** The hosts the runs asked the proxy for, summed per (host, port, allowed), at most MAX_HOST_CONTACTS in the order first seen. */
    hosts: HostContact[];
    /** Host records not itemised: those each run left out, and those that came when `hosts` was full, summed over runs. */
    hosts_omitted: number;
    /** Whether any run had a per-run credential minted for it. */
    credential: boolean;
  };
  exec: {
    /** Evaluations (t0's and every reported observation) by mechanism. */
    evaluations: MechanismCounts;
    /** Evaluations by network policy, of those that recorded one. */
    networks: Record<ExecConfinement["network"], number>;
  };
  /** Where each itemised entry is in its list: the fold's hash lookups, never a scan. */
  index: { allow: Record<string, true>; hosts: Record<string, number> };
}

/** The most allowlist entries a confinement summary itemises: the most one run's allowlist holds. */
export const MAX_ALLOW_UNION = 100;

/** The summary of a loop whose t0 evaluation was confined as `zone` (absent: unrecorded), before any agent run. */
function confinementAtCreation(zone: ExecConfinement | undefined): ConfinementSummary {
  const summary: ConfinementSummary = {
    agent: {
      runs: { bwrap: 0, none: 0, unrecorded: 0, unobserved: 0 },
      networks: { none: 0, host: 0, allow: 0 },
      allow: [],
      allow_omitted: 0,
      hosts: [],
      hosts_omitted: 0,
      credential: false,
    },
    exec: { evaluations: { bwrap: 0, none: 0, unrecorded: 0 }, networks: { none: 0, host: 0 } },
    index: { allow: {}, hosts: {} },
  };
  countEvaluation(summary, zone);
  return summary;
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

/** Counts one evaluation's exec zone into a summary the fold owns. */
function countEvaluation(summary: ConfinementSummary, zone: ExecConfinement | undefined): void {
  if (!zone) {
    summary.exec.evaluations.unrecorded += 1;
    return;
  }
  summary.exec.evaluations[zone.mechanism] += 1;
  summary.exec.networks[zone.network] += 1;
}

/** Counts one proposal's agent run into a summary the fold owns: linear in what the run recorded (bounded by its schema), never in the loop. */
function countAgentRun(summary: ConfinementSummary, run: AgentRun | null): void {
  const { agent, index } = summary;
  if (!run) {
    agent.runs.unobserved += 1;
    return;
  }
  const zone = run.confinement;
  if (!zone) {
    agent.runs.unrecorded += 1;
    return;
  }
  agent.runs[zone.mechanism] += 1;
  agent.networks[zone.network] += 1;
  if (zone.credential === true) agent.credential = true;
  for (const entry of zone.allow ?? []) {
    if (index.allow[entry]) continue;
    if (agent.allow.length >= MAX_ALLOW_UNION) {
      agent.allow_omitted += 1;
      continue;
    }
    index.allow[entry] = true;
    agent.allow.push(entry);
  }
  agent.hosts_omitted += zone.hosts_omitted ?? 0;
  for (const contact of zone.hosts ?? []) {
    const key = `${contact.host} ${contact.port} ${contact.allowed}`;
    const at = index.hosts[key];
    const seen = at === undefined ? undefined : agent.hosts[at];
    if (at !== undefined && seen) {
      agent.hosts[at] = {
        ...seen,
        requests: seen.requests + contact.requests,
        bytes_out: seen.bytes_out + contact.bytes_out,
        bytes_in: seen.bytes_in + contact.bytes_in,
      };
    } else if (agent.hosts.length >= MAX_HOST_CONTACTS) {
      agent.hosts_omitted += 1;
    } else {
      index.hosts[key] = agent.hosts.length;
      agent.hosts.push({ ...contact });
    }
  }
}

/** The id the baseline carries wherever a candidate id is expected (e.g. as a parent). */
export const BASELINE_ID = "t0";

/** What names a candidate's tree in `same_tree`: its parent and the digest of its change from it. */
export function sameTreeKey(parent: string, diffSha256: string): string {
  return `${parent} ${diffSha256}`;
}

/** The containers of a state that a fold writes in place. */
type Container = "candidates" | "candidate_order" | "same_tree" | "idempotency" | "lease_index" | "regressions_since_promotion";

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
      best: t0,
      candidates: {},
      candidate_order: [],
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
    };
    // Its containers are new: the fold owns them from the start.
    OWNED.set(
      created,
      new Set([
        created.candidates,
        created.candidate_order,
        created.same_tree,
        created.idempotency,
        created.lease_index,
        created.regressions_since_promotion,
        created.confinement,
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
        status: "queued",
        lease: null,
        report: null,
        verdict: null,
        pending: null,
        requeued: [],
        released: [],
      };
      own(state, "candidates")[data.candidate_id] = candidate;
      own(state, "candidate_order").push(data.candidate_id);
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
      return updateCandidate(state, data.candidate_id, {
        report: {
          lease_id: data.lease_id,
          fencing_token: data.fencing_token,
          request_hash: data.request_hash,
          tests: standingOf(state.contract, data.observation, state.t0_base),
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
  }
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
