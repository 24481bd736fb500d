import type { AgentReport } from "../wire/agent-report.js";
import type { ArtifactError, ArtifactRef } from "../wire/observation.js";
import type { Contract, Labels } from "../wire/contract.js";
import type { ExecConfinement } from "../wire/confinement.js";
import type { AgentRun, BaselineMeasurer, BestRef, ConfirmReadings, Confirmation, Halt, Verdict, BundleRef } from "./events.js";
import type { BaselineGuards } from "./guards.js";
import type { TestBase, TestStanding } from "./test-sets.js";
import type { ConfinementSummary } from "./confinement-summary.js";
import type { DoctorRecord } from "../wire/doctor.js";
import type { FlakeMonitor } from "./flake-monitor.js";
import type { ContextManifest, ReviewRequest } from "../wire/review.js";

// The shape of a loop's state (DESIGN §6): what the fold (state.ts) builds from the events, and what every
// decision reads. Types only.

/** Where a candidate is in its life: waiting for a person's review, waiting for a runner, being evaluated, or decided. */
export type CandidateStatus = "awaiting_review" | "queued" | "leased" | "promoted" | "rejected";

/** A person's answer to a candidate's review request (`review_decided`). */
export interface ReviewAnswer {
  decision: "ack" | "reject";
  by: string;
  note: string;
  at: string;
  files: string[];
}

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
  /** The labels its runner claimed; absent for a lease granted before they were recorded. */
  labels?: Labels;
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
        /**
         * When this report measured a tree whose outcome was already known — the same tree evaluated
         * before (another candidate of the same parent and change, or this one under an earlier lease) —
         * what it was compared with and the ids whose outcome differed (empty when it agreed). Null otherwise.
         */
        known_outcome: { against: string; changed: string[] } | null;
      })
    | null;
  verdict: Verdict | null;
  /** The last `need_samples` answer while more readings are awaited on the lease; null otherwise. */
  pending: Verdict | null;
  /** Reports re-queued unjudged because their comparison was stale, oldest first: a retry of one answers the same. */
  requeued: RequeuedReport[];
  /** Leases their runners gave back (`lease_released`), oldest first: a retry of a release answers the same. */
  released: { lease_id: string; fencing_token: number }[];
  /** What its agent asked a person to allow (protected files it changes, and why); null without a request. */
  review_request: ReviewRequest | null;
  /** The person's answer to that request; null while it waits, or without a request. */
  review: ReviewAnswer | null;
  /**
   * For an acknowledged candidate, what its report read of the approved files (sha256, null: deleted):
   * what the guards compare later candidates with once it is promoted.
   */
  approved_readings: Record<string, string | null> | null;
  /** The context the runner gave the agent run that produced it; null when none was recorded. */
  context: ContextManifest | null;
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

/** The best-so-far: t0 until the first promotion. */
export interface BestState extends TestStanding {
  candidate_id: string;
  commit: string;
  /** Optimize mode: the median reading of the contract's metric when it became the best (null otherwise). */
  metric: number | null;
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
  /** The runner that measured t0 on a baseline lease (DESIGN §11); null when the loop's creator measured it. */
  t0_measured_by: BaselineMeasurer | null;
  best: BestState;
  candidates: Record<string, CandidateState>;
  candidate_order: string[];
  /**
   * The candidates without a final verdict (queued, or out on a lease), in proposal order: what granting,
   * expiring and scheduling leases scan, so their cost is that of the open work, not of the loop's history
   * (DESIGN §4 invariant 9).
   */
  unsettled: string[];
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
  /** The precondition's record at creation (DESIGN §6.5); null in logs from before it existed. */
  doctor: DoctorRecord | null;
  /** The flake monitor (DESIGN §6.5); null in logs from before the precondition, whose rule is that any flip halts. */
  monitor: FlakeMonitor | null;
  /** How long t0's gates and tasks took in all (what decides whether the best is re-run by default). */
  t0_check_ms: number;
  /** The rechecks of a best reported (`recheck_reported`), by idempotency key: a retry answers the same. */
  rechecks: Record<string, RecordedRecheck>;
  /** The iteration count when a best was last re-run; null before any recheck. */
  last_recheck_iteration: number | null;
  /**
   * Protected files whose change a person approved, by path, as the promoted candidate that changed them
   * left them (sha256; null: deleted): the guards compare with these instead of t0's readings, and the
   * scope admits them (docs/design.md §6.8). Empty until an acknowledged candidate is promoted.
   */
  approved_changes: Record<string, string | null>;
  /** Every answer to a review request, in order, with its candidate: what a receipt shows of who approved what. */
  reviews: (ReviewAnswer & { candidate_id: string })[];
}

/** The most changed ids a recorded recheck keeps for its retries' answer (its count covers them all). */
export const MAX_RECHECK_IDS = 100;

/** A recheck as recorded, for a retry with its idempotency key: what it was, and what it changed. */
export interface RecordedRecheck {
  request_hash: string;
  candidate_id: string;
  /** The first MAX_RECHECK_IDS ids whose outcome differed from the recorded one, sorted. */
  changed: string[];
  changed_count: number;
}
