import { z } from "zod";
import { Contract } from "../wire/contract.js";
import { AgentReport } from "../wire/agent-report.js";
import { AgentConfinement } from "../wire/confinement.js";
import { FullObservation, GitCommit, Observation, Sha256 } from "../wire/observation.js";
import { HALT_REASONS } from "./halt-reasons.js";

// One zod schema per event type; `data` is the part the engine reads. Adding a type later is adding a
// member to the union and a case to `applyEvent`, never changing an existing one: old logs must fold.

/**
 * The immutable baseline (t0) as recorded at creation (DESIGN §2), its tests in full: t0's collected set
 * is stored once, here, and every later report is a difference from it (DESIGN §8).
 */
export const Baseline = z.strictObject({ commit: GitCommit, observation: FullObservation });
export type Baseline = z.infer<typeof Baseline>;

/** A repository's name as a runner gives it (a remote URL without credentials): informative, never used to decide. */
export const Repository = z.string().min(1).max(500);

/** Who proposed a candidate: the contract's agent command run by the runner, or an agent driving `loopwarden step` itself. */
export const Proposer = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("command"), command: z.string().max(4_000) }),
  z.strictObject({ kind: z.literal("step") }),
]);
export type Proposer = z.infer<typeof Proposer>;

/** How the agent run that produced a candidate ended (observed by the runner). */
export const AgentRun = z.strictObject({
  exit_code: z.number().int().nullable(),
  timed_out: z.boolean(),
  duration_ms: z.number().min(0),
  /** How the run was confined (DESIGN §6.7); absent in logs of runners that predate the agent zone. */
  confinement: AgentConfinement.optional(),
});
export type AgentRun = z.infer<typeof AgentRun>;

/** What a proposal says of its candidate: the same fields in the request and in the recorded event. */
/** A git bundle among a loop's artifacts, by digest and size. */
export const BundleRef = z.strictObject({ sha256: Sha256, size: z.number().int().min(1) });
export type BundleRef = z.infer<typeof BundleRef>;

/** The fields of a candidate proposal, as the runner sends them and `candidate_proposed` records them. */
export const ProposalFields = {
  commit: GitCommit,
  diff_sha256: Sha256,
  empty: z.boolean(),
  proposer: Proposer,
  /** How the agent run ended; null when no run was observed (`step`). */
  agent: AgentRun.nullable(),
  /** What the agent reported about itself (model, cost, context), when it wrote a valid report. */
  agent_report: AgentReport.nullable().optional(),
  /** Why the agent's report file was not recorded, when it wrote one that was invalid. */
  agent_report_error: z.string().max(2_000).optional(),
  /**
   * The candidate's commits since the loop's t0, as a git bundle stored with the loop's artifacts: how a
   * runner in another checkout gets the commit (it checks the commit id before evaluating).
   */
  bundle: BundleRef.optional(),
};

/** A verdict on one candidate (DESIGN §2). */
export const Verdict = z.strictObject({
  candidate_id: z.string(),
  /** `need_samples` is not final: the runner measures more pairs and reports again on the same lease. */
  decision: z.enum(["promoted", "rejected", "need_samples"]),
  reason: z.enum([
    "fewer_failures",
    "no_improvement",
    "regressed",
    "agent_failed",
    "no_change",
    "guard_violated",
    "flaky",
    "improved",
    "not_improved",
    "undecided",
    "no_samples",
    "secondary_regressed",
  ]),
  detail: z.string(),
  failing_before: z.number().int().min(0),
  failing_after: z.number().int().min(0).nullable(),
  regressed: z.array(z.string()),
  /** Optimize mode (DESIGN §6.3): the comparison of the metric with the best-so-far. */
  metric: z
    .strictObject({
      name: z.string(),
      /** Relative improvement over the best-so-far (0.08: 8% better). */
      estimate: z.number(),
      interval: z.array(z.number()).length(2).nullable(),
      level: z.number().nullable(),
      pairs: z.number().int().min(0),
      more: z.number().int().min(0),
      /** The candidate's median reading: what it is kept at if promoted. */
      candidate_median: z.number(),
    })
    .optional(),
});
export type Verdict = z.infer<typeof Verdict>;

/** A best-so-far as a lease names it: its candidate id (`t0` for the baseline) and its commit. */
export const BestRef = z.strictObject({ candidate_id: z.string(), commit: GitCommit });
export type BestRef = z.infer<typeof BestRef>;

/**
 * What a report answers when its comparison is stale (`lease_requeued`): the observation was not judged
 * and the candidate is back in the queue, to be evaluated again against `best`. Never recorded as a
 * verdict (Verdict's `decision` has no such value), so it can never count as one.
 */
export const Requeued = z.strictObject({
  candidate_id: z.string(),
  decision: z.literal("requeued"),
  reason: z.literal("stale_comparison"),
  detail: z.string(),
  /** What the lease compared against, and the best the candidate will be compared with next. */
  compare_to: BestRef,
  best: BestRef,
});
export type Requeued = z.infer<typeof Requeued>;

/** A report's answer, by `decision`: a verdict (`promoted`, `rejected`, `need_samples`) or `requeued`. */
export const ReportAnswer = z.discriminatedUnion("decision", [Verdict, Requeued]);
export type ReportAnswer = z.infer<typeof ReportAnswer>;

/** A computed halt (DESIGN §7). */
export const Halt = z.strictObject({
  halt_reason: z.enum(HALT_REASONS),
  exit_class: z.number().int(),
  detail: z.string(),
  still_improving: z.boolean().optional(),
});
export type Halt = z.infer<typeof Halt>;

const at = z.iso.datetime();

const LoopCreated = z.strictObject({
  type: z.literal("loop_created"),
  at,
  data: z.strictObject({
    loop_id: z.string(),
    contract: Contract,
    contract_hash: Sha256,
    t0: Baseline,
    /** The repository the loop runs in, as its runner names it (its origin remote); absent when it has none. */
    repository: Repository.optional(),
  }),
});
const CandidateProposed = z.strictObject({
  type: z.literal("candidate_proposed"),
  at,
  data: z.strictObject({
    candidate_id: z.string(),
    parent: z.string(),
    ...ProposalFields,
    idempotency_key: z.string(),
    request_hash: Sha256,
  }),
});
const LeaseGranted = z.strictObject({
  type: z.literal("lease_granted"),
  at,
  data: z.strictObject({
    lease_id: z.string(),
    candidate_id: z.string(),
    runner_id: z.string(),
    fencing_token: z.number().int().min(1),
    expires_at: at,
    /**
     * Who holds it (DESIGN §11): the id of the token that took it, or `owner` for the instance owner's.
     * Only the holder heartbeats, releases or reports on it. Absent from leases granted before holders
     * were recorded, which any token of the loop's team may act on, as then.
     */
    holder: z.string().min(1).max(100).optional(),
    /**
     * The best-so-far when the lease was granted: what the candidate is compared against. Absent from
     * leases granted before it existed, which are judged against the best at report time as they were.
     */
    compare_to: BestRef.optional(),
  }),
});
const LeaseRenewed = z.strictObject({
  type: z.literal("lease_renewed"),
  at,
  data: z.strictObject({ lease_id: z.string(), candidate_id: z.string(), expires_at: at }),
});
const LeaseExpired = z.strictObject({
  type: z.literal("lease_expired"),
  at,
  data: z.strictObject({ lease_id: z.string(), candidate_id: z.string() }),
});
/**
 * A lease its runner gave back before its deadline (`POST /v1/leases/:id/release`): the runner was
 * stopped, or could not finish the job on its side. As at an expiry, the candidate goes back to the queue
 * at once, in its place, so another runner need not wait out the lease's TTL. Only the lease's current
 * holder can release it (its lease id and fencing token), and nothing it measured is recorded.
 */
const LeaseReleased = z.strictObject({
  type: z.literal("lease_released"),
  at,
  data: z.strictObject({ lease_id: z.string(), candidate_id: z.string(), fencing_token: z.number().int().min(1) }),
});
/**
 * A report not judged because its comparison was stale (`staleComparison`): the best changed since the
 * lease was granted, or the runner compared against another commit than its lease named. The candidate
 * goes back to the queue in its place; the observation itself is not recorded, only what identifies
 * the report (so a retry answers the same) and the three commits that made it stale.
 */
const LeaseRequeued = z.strictObject({
  type: z.literal("lease_requeued"),
  at,
  data: z.strictObject({
    lease_id: z.string(),
    candidate_id: z.string(),
    fencing_token: z.number().int().min(1),
    request_hash: Sha256,
    reason: z.enum(["stale_comparison"]),
    /** What the lease named; what the runner said it compared against (null when it did not say); the best when it reported. */
    compare_to: BestRef,
    compared_to: GitCommit.nullable(),
    best: BestRef,
  }),
});
const ObservationReported = z.strictObject({
  type: z.literal("observation_reported"),
  at,
  data: z.strictObject({
    candidate_id: z.string(),
    lease_id: z.string(),
    fencing_token: z.number().int().min(1),
    observation: Observation,
    request_hash: Sha256,
  }),
});
const VerdictIssued = z.strictObject({ type: z.literal("verdict"), at, data: Verdict });
const Halted = z.strictObject({ type: z.literal("halted"), at, data: Halt });
/**
 * The confirm measurement (DESIGN §6.3): t0 against the best, interleaved on one runner (pair i is
 * (t0[i], best[i]), t0 measured first), judged by the same sequential comparison as a promotion. The
 * receipt's headline gain over t0 is this, never a product of step-wise estimates.
 */
export const ConfirmReadings = z.strictObject({
  t0: z.array(z.number().positive().finite()).max(10_000),
  best: z.array(z.number().positive().finite()).max(10_000),
});
export type ConfirmReadings = z.infer<typeof ConfirmReadings>;

/** What a confirm measurement concluded, as recorded and attested. */
export const Confirmation = z.strictObject({
  /** The best it confirms, and the two commits measured. */
  candidate_id: z.string(),
  commit: GitCommit,
  t0_commit: GitCommit,
  metric: z.string(),
  /** Relative improvement of the best over t0 (0.8: 80% better), with its interval at the contract's confidence. */
  estimate: z.number(),
  interval: z.array(z.number()).length(2).nullable(),
  level: z.number().nullable(),
  pairs: z.number().int().min(1),
});
export type Confirmation = z.infer<typeof Confirmation>;

/**
 * The confirm measurement of a best is claimed by the token that sends its first readings (DESIGN §11):
 * from then on only that token's readings count, and the first figure recorded is final.
 */
const ConfirmClaimed = z.strictObject({
  type: z.literal("confirm_claimed"),
  at,
  data: z.strictObject({
    candidate_id: z.string(),
    holder: z.string().min(1).max(100),
    /** When the claim lapses unless its holder sends readings (or renews it) again: then another runner may take it over. */
    expires_at: at.optional(),
  }),
});

const ConfirmMeasured = z.strictObject({
  type: z.literal("confirm_measured"),
  at,
  data: z.strictObject({ ...Confirmation.shape, samples: ConfirmReadings }),
});

/** A signed receipt over the log up to `head` (DESIGN §9): recorded after it, so the log says what was attested and when. */
const ReceiptIssued = z.strictObject({
  type: z.literal("receipt_issued"),
  at,
  data: z.strictObject({
    receipt_id: z.string(),
    /** `final` at the halt; `interim` on demand while the loop runs (or after, for another copy). */
    kind: z.enum(["final", "interim"]),
    head: z.strictObject({ seq: z.number().int().min(1), hash: Sha256 }),
    keyid: z.string(),
    /** sha256 of the envelope's JSON as served at `/r/<id>.json`. */
    envelope_sha256: Sha256,
  }),
});

/** The body of an event before it is sealed into the chain. */
export const EventDraft = z.discriminatedUnion("type", [
  LoopCreated,
  CandidateProposed,
  LeaseGranted,
  LeaseRenewed,
  LeaseExpired,
  LeaseReleased,
  LeaseRequeued,
  ObservationReported,
  VerdictIssued,
  Halted,
  ReceiptIssued,
  ConfirmClaimed,
  ConfirmMeasured,
]);
export type EventDraft = z.infer<typeof EventDraft>;
export type EventType = EventDraft["type"];

const sealed = { seq: z.number().int().min(1), prev: z.union([Sha256, z.literal("")]), hash: Sha256 };

/** A sealed event: a draft with its place in the hash chain (DESIGN §9). */
export const LoopEvent = z.discriminatedUnion("type", [
  LoopCreated.extend(sealed),
  CandidateProposed.extend(sealed),
  LeaseGranted.extend(sealed),
  LeaseRenewed.extend(sealed),
  LeaseExpired.extend(sealed),
  LeaseReleased.extend(sealed),
  LeaseRequeued.extend(sealed),
  ObservationReported.extend(sealed),
  VerdictIssued.extend(sealed),
  Halted.extend(sealed),
  ReceiptIssued.extend(sealed),
  ConfirmClaimed.extend(sealed),
  ConfirmMeasured.extend(sealed),
]);
export type LoopEvent = z.infer<typeof LoopEvent>;
