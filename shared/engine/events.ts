import * as z from "zod";
import { Contract, Labels } from "../wire/contract.js";
import { Baseline, BestRef, Confirmation, ConfirmReadings, Halt, ProposalFields, Repository, Verdict } from "../wire/event-parts.js";
import { GitCommit, Observation, Sha256 } from "../wire/observation.js";
import { DoctorRecord } from "../wire/doctor.js";

// The parts of events that the API carries too (a verdict, a halt, a baseline…) are defined in
// wire/event-parts.ts, below the engine, since wire/api.ts uses them; re-exported here, where the engine
// and its callers name them.
export * from "../wire/event-parts.js";

// One zod schema per event type; `data` is the part the engine reads. Adding a type later is adding a
// member to the union and a case to `applyEvent`, never changing an existing one: old logs must fold.

const at = z.iso.datetime();

/** The runner that measured t0 on a baseline lease (`loop_created.data.t0_measured_by`). */
export const BaselineMeasurer = z.strictObject({
  runner_id: z.string().min(1).max(100),
  /** The token that held the lease (`owner` for the instance owner's). */
  holder: z.string().min(1).max(100),
  lease_id: z.string(),
  fencing_token: z.number().int().min(1),
  /** sha256 of the baseline report as sent: a retry with the same lease and another body is refused. */
  request_hash: Sha256,
});
export type BaselineMeasurer = z.infer<typeof BaselineMeasurer>;

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
    /**
     * Who measured t0 when a runner did, on a lease (a contract with `evaluate.labels`, DESIGN §11): the
     * runner, the token that held the lease, the lease and the report's hash. Absent when the loop's
     * creator measured t0 itself, and in logs from before baselines were leased.
     */
    t0_measured_by: BaselineMeasurer.optional(),
    /**
     * The precondition (DESIGN §6.5): what the runner measured of the check at t0 before the first agent
     * run, or that its creator skipped it. The engine decides from it at creation whether the loop may
     * start. Absent from logs written before the precondition existed, which keep their rules.
     */
    doctor: DoctorRecord.optional(),
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
    /**
     * The labels the runner claimed (DESIGN §11: `gpu=h100`), which satisfied the contract's
     * `evaluate.labels`: which machine measured the candidate. Absent from leases granted before they were
     * recorded.
     */
    labels: Labels.optional(),
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

/**
 * A person's request to stop the loop (`POST /v1/loops/:id/cancel`): an input to the engine, as an
 * observation is, answered by the `halted` (`cancelled`) event after it. Who asked is the token's id (or
 * `owner`); the reason is theirs, shown with the halt.
 */
const CancelRequested = z.strictObject({
  type: z.literal("cancel_requested"),
  at,
  data: z.strictObject({ by: z.string().min(1).max(100), reason: z.string().max(500).optional() }),
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

/**
 * A re-run of a best's gates whose outcome is known (DESIGN §6.5), reported outside any lease: before the
 * first agent run of a resumed loop (`resume`: it must reproduce what was recorded) or every
 * `determinism.recheck_every` iterations (`periodic`). `candidate_id` names the best re-run (`t0` or a
 * promoted candidate) and its commit; the engine compares the observation with that best's recorded
 * outcome: a sample for the flake monitor, and on resume any difference halts.
 */
const RecheckReported = z.strictObject({
  type: z.literal("recheck_reported"),
  at,
  data: z.strictObject({
    candidate_id: z.string(),
    commit: GitCommit,
    purpose: z.enum(["resume", "periodic"]),
    runner_id: z.string().min(1).max(100),
    /** Who reported it: a token's id, or `owner`. */
    by: z.string().min(1).max(100),
    observation: Observation,
    idempotency_key: z.string().min(1).max(200),
    request_hash: Sha256,
  }),
});

/**
 * A person's answer to a candidate's review request (`POST …/candidates/:id/review`, admin or review
 * scope): `ack` lets exactly the requested files change for that candidate, which then joins the queue
 * and is judged; `reject` rejects it (`review_rejected`, the verdict that follows). Who answered is the
 * token's id (or `owner`), never the agent's: no agent holds such a token.
 */
const ReviewDecided = z.strictObject({
  type: z.literal("review_decided"),
  at,
  data: z.strictObject({
    candidate_id: z.string(),
    decision: z.enum(["ack", "reject"]),
    by: z.string().min(1).max(100),
    note: z.string().max(2_000),
    /** The files the answer covers: the request's. */
    files: z.array(z.string()).max(100),
  }),
});

/** Nobody answered a review request within `stop.review_timeout`: the `halted` (`human_required`) after it is the engine's answer. */
const ReviewTimedOut = z.strictObject({
  type: z.literal("review_timed_out"),
  at,
  data: z.strictObject({ candidate_id: z.string(), deadline: at }),
});

/**
 * The runner could not fit even the first tier of the agent's context in `agent.context.budget`
 * (docs/design.md §6.9): the agent was not run; the `halted` (`context_budget_unsatisfiable`) after it is the engine's answer.
 */
const ContextUnsatisfiable = z.strictObject({
  type: z.literal("context_unsatisfiable"),
  at,
  data: z.strictObject({
    tier: z.literal("stack_trace"),
    needed: z.number().int().min(1),
    budget: z.number().int().min(1),
    runner_id: z.string().min(1).max(100),
    by: z.string().min(1).max(100),
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
  CancelRequested,
  RecheckReported,
  ReviewDecided,
  ReviewTimedOut,
  ContextUnsatisfiable,
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
  CancelRequested.extend(sealed),
  RecheckReported.extend(sealed),
  ReviewDecided.extend(sealed),
  ReviewTimedOut.extend(sealed),
  ContextUnsatisfiable.extend(sealed),
]);
export type LoopEvent = z.infer<typeof LoopEvent>;
