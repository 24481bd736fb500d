import * as z from "zod";
import { AgentReport } from "./agent-report.js";
import { AgentConfinement } from "./confinement.js";
import { HALT_REASONS } from "./halt-reasons.js";
import { FullObservation, GitCommit, Sha256 } from "./observation.js";
import { ContextManifest, ReviewRequest } from "./review.js";

// The parts of the engine's events that the API carries too: a baseline, a proposal's fields, a verdict,
// a halt, a confirm measurement. Here, in wire, so that wire/api.ts names them without importing the
// engine (wire is below it); engine/events.ts builds its events from them and re-exports them.

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
  /**
   * The agent's request to change protected files (docs/design.md §6.8): the candidate waits for a
   * person's `ack` or `reject` (`awaiting_review`) instead of being evaluated. Absent without one.
   */
  review_request: ReviewRequest.optional(),
  /** The context the runner built for the agent run (§6.9), pinned file by file. Absent from runners before it, and from `step`. */
  context: ContextManifest.optional(),
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
    "check_inadequate",
    "review_rejected",
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
