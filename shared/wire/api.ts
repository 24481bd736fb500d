import * as z from "zod";
import { Baseline, BestRef, BundleRef, ConfirmReadings, Confirmation, Halt, ProposalFields, ReportAnswer, Repository, Verdict } from "./event-parts.js";
import { Contract, Labels } from "./contract.js";
import { DoctorRecord } from "./doctor.js";
import { FullObservation, GitCommit, Observation, Sha256 } from "./observation.js";

// One schema per message of DESIGN §8. The worker validates requests with these; the runner parses
// every response with them.

/** The JSON error envelope of every 4xx/5xx answer. */
export const ErrorBody = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  }),
});
export type ErrorBody = z.infer<typeof ErrorBody>;

/** Loop ids: `lp_` and 24 hex digits. */
export const LoopId = z.string().regex(/^lp_[0-9a-f]{24}$/, "is not a loop id");

/** Idempotency keys chosen by clients. */
export const IdempotencyKey = z.string().regex(/^[A-Za-z0-9_.:-]{8,200}$/, "use 8-200 letters, digits or _.:-");

/**
 * `POST /v1/loops`: with `t0`, a baseline its creator measured; with `t0_commit` instead, the commit whose
 * baseline a runner with the contract's `evaluate.labels` is to measure on a lease (DESIGN §11): the loop
 * is created from that runner's report.
 */
export const CreateLoopRequest = z
  .strictObject({
    idempotency_key: IdempotencyKey,
    contract: Contract,
    t0: Baseline.optional(),
    t0_commit: GitCommit.optional(),
    /** The repository the loop runs in (e.g. its origin remote, without credentials): named in receipts. */
    repository: Repository.optional(),
    /**
     * The precondition's record (DESIGN §6.5): what the creator measured of its check at t0, or that it
     * was skipped. The loop halts at creation when the record says the check cannot be trusted. Absent
     * from creators from before the precondition: such a loop keeps the old rule, that any flip halts.
     */
    doctor: DoctorRecord.optional(),
  })
  .refine((request) => (request.t0 === undefined) !== (request.t0_commit === undefined), {
    message: "give exactly one of t0 (a measured baseline) and t0_commit (a baseline for a runner to measure)",
    path: ["t0"],
  });
export type CreateLoopRequest = z.infer<typeof CreateLoopRequest>;

/** A loop's state summary, as `GET /v1/loops/:id` answers it. */
export const LoopSummary = z.object({
  loop_id: LoopId,
  name: z.string(),
  mode: z.string(),
  status: z.enum(["running", "halted"]),
  contract_hash: Sha256,
  created_at: z.string(),
  iteration: z.number().int(),
  max_iterations: z.number().int(),
  t0: z.object({ commit: GitCommit, failing: z.number().int() }),
  best: z.object({ candidate_id: z.string(), commit: GitCommit, failing: z.number().int() }),
  halt: Halt.nullable(),
  head: z.object({ seq: z.number().int(), hash: Sha256 }),
  /** The final receipt's id, once the halted loop's receipt is issued (`/r/<id>`). */
  receipt_id: z.string().optional(),
  /** The candidates waiting for a person's answer to their review request (`loopwarden review`); absent when none waits. */
  awaiting_review: z.array(z.string()).optional(),
});
export type LoopSummary = z.infer<typeof LoopSummary>;

/** A loop whose baseline a runner is to measure (a creation with `t0_commit`), and how far that is. */
export const AwaitingBaseline = z.object({
  loop_id: LoopId,
  name: z.string(),
  contract_hash: Sha256,
  /** The commit t0 is measured at. */
  commit: GitCommit,
  /** What a runner needs to measure it: the contract's `evaluate.labels`. */
  labels: Labels,
  requested_at: z.string(),
  /** The runner measuring it now, and until when its lease lives; null while no runner has it. */
  lease: z.object({ runner_id: z.string(), granted_at: z.string(), expires_at: z.string() }).nullable(),
});
export type AwaitingBaseline = z.infer<typeof AwaitingBaseline>;

/**
 * `POST /v1/loops` answer: the loop, and whether this request created it (false on an idempotent retry);
 * or, for a creation with `t0_commit` whose baseline no runner has reported yet, what it waits for (202).
 */
export const CreateLoopResponse = z.union([
  z.object({ loop: LoopSummary, created: z.boolean() }),
  z.object({ awaiting_baseline: AwaitingBaseline, created: z.boolean() }),
]);
/** The `POST /v1/loops` answer to a creation with `t0`: always the loop. */
export type LoopCreated = Extract<CreateLoopResponse, { loop: LoopSummary }>;
export type CreateLoopResponse = z.infer<typeof CreateLoopResponse>;

/** `GET /v1/loops` answer, newest first. */
export const LoopList = z.object({
  loops: z.array(
    z.object({
      loop_id: LoopId,
      name: z.string(),
      mode: z.string(),
      status: z.string(),
      iteration: z.number().int(),
      halt_reason: z.string().nullable(),
      /** The pinned contract's hash: a runner evaluates only loops whose contract its checkout has (invariant 4). */
      contract_hash: Sha256,
      created_at: z.string(),
      updated_at: z.string(),
    }),
  ),
  next_cursor: z.string().nullable(),
});
export type LoopList = z.infer<typeof LoopList>;

/** Runner ids: chosen by the runner, unique per runner process (and per slot of `work --concurrency`). */
export const RunnerId = z.string().regex(/^[A-Za-z0-9_.:-]{1,100}$/, "use 1-100 letters, digits or _.:-");

/** The longest a long-poll is held open (DESIGN §8). */
export const MAX_WAIT_MS = 25_000;

/** `POST /v1/loops/:id/leases`: a job for a runner with these labels; `wait_ms` long-polls for one (at most 25 s). */
export const LeaseRequest = z.strictObject({
  runner_id: RunnerId,
  labels: Labels.default({}),
  wait_ms: z.number().int().min(0).max(MAX_WAIT_MS).default(0),
});
export type LeaseRequest = z.infer<typeof LeaseRequest>;
/** A lease request as a runner writes it (labels and wait have defaults). */
export type LeaseRequestInput = z.input<typeof LeaseRequest>;

/** A lease on one job (DESIGN §2). The job names a candidate and the contract hash, never a command (invariant 4). */
export const Lease = z.object({
  lease_id: z.string(),
  loop_id: LoopId,
  fencing_token: z.number().int().min(1),
  expires_at: z.string(),
  ttl_ms: z.number().int(),
  job: z.object({
    /** `evaluate` a candidate, or measure a new loop's `baseline` (candidate id `t0`, nothing to compare with). */
    kind: z.enum(["evaluate", "baseline"]),
    candidate_id: z.string(),
    commit: GitCommit,
    contract_hash: Sha256,
    /**
     * The best-so-far the candidate is measured and judged against (echoed as `compared_to` in the
     * observation); null only for a lease granted before leases named it.
     */
    compare_to: BestRef.nullable(),
    /**
     * Git bundles that carry the job's commits (the candidate's, and the best's when it is a candidate)
     * to a runner whose checkout lacks them; it checks each commit id after fetching (DESIGN §10).
     */
    bundles: z.array(BundleRef.extend({ commit: GitCommit })).default([]),
  }),
});
export type Lease = z.infer<typeof Lease>;

/**
 * What a proposal may ask besides the candidate: the next job leased to this runner in the same
 * request (a proposer usually evaluates its own candidate), one round trip rather than two. It is not
 * part of the proposal: neither recorded with it nor in its idempotency hash.
 */
export const ProposalLease = z.strictObject({ runner_id: RunnerId, labels: Labels.default({}) });

/** The largest file a report or a proposal may carry inline (`evidence`), and the most all of them may add up to. */
export const INLINE_EVIDENCE_MAX_BYTES = 64 * 1024;
export const INLINE_EVIDENCE_TOTAL_BYTES = 256 * 1024;
/** The most files one report carries inline. */
export const INLINE_EVIDENCE_MAX_FILES = 16;

/**
 * A small file a report's observation cites (a gate's log) or a proposal names (its bundle), sent with
 * the request instead of uploaded before it (DESIGN §10): its digest and its bytes, base64-encoded. The
 * coordinator checks the bytes against the digest and the size the request gives, stores them as an
 * upload would, then decides.
 */
export const InlineEvidence = z.strictObject({
  sha256: Sha256,
  base64: z
    .string()
    .max(Math.ceil(INLINE_EVIDENCE_MAX_BYTES / 3) * 4)
    .regex(/^[A-Za-z0-9+/]*={0,2}$/, "must be base64"),
});
export type InlineEvidence = z.infer<typeof InlineEvidence>;

/** The name and media type a candidate's bundle is stored under (by the runner's upload, or inline). */
export function bundleArtifact(commit: string): { name: string; content_type: string } {
  return { name: `candidate-${commit.slice(0, 10)}.bundle`, content_type: "application/x-git-bundle" };
}

/**
 * `POST /v1/loops/:id/candidates`; with `lease`, also `POST /v1/loops/:id/leases` for that runner (the
 * token needs both scopes); with `evidence`, the bytes of the bundle it names.
 */
export const ProposeCandidateRequest = z.strictObject({
  idempotency_key: IdempotencyKey,
  ...ProposalFields,
  lease: ProposalLease.optional(),
  /** The bundle's bytes, when small, instead of an upload before the proposal. Not part of the proposal recorded, nor of its hash. */
  evidence: z.array(InlineEvidence).length(1).optional(),
});
export type ProposeCandidateRequest = z.infer<typeof ProposeCandidateRequest>;

/** A candidate as the API shows it. */
export const CandidateView = z.object({
  candidate_id: z.string(),
  parent: z.string(),
  commit: GitCommit,
  status: z.enum(["awaiting_review", "queued", "leased", "promoted", "rejected"]),
  verdict: Verdict.nullable(),
});
export type CandidateView = z.infer<typeof CandidateView>;

/**
 * The log's events after the `?events_after=N` a proposal or a report gave (the last one its caller had
 * folded), as stored: one JSON line each, in order. Absent when not asked for, or when more than the
 * coordinator puts in one answer followed: the caller then reads the log (`GET …/events?after=N`).
 */
export const AnsweredEvents = z.array(z.string());

/**
 * `POST /v1/loops/:id/candidates` answer; `verdict` is set when it was decided without evaluation.
 * `lease` answers a request's `lease`: the job now leased to that runner (this candidate or an older
 * one still queued), or null when there is none for it.
 */
export const ProposeCandidateResponse = z.object({
  candidate: CandidateView,
  replayed: z.boolean(),
  loop: LoopSummary,
  lease: Lease.nullable().optional(),
  events: AnsweredEvents.optional(),
});
export type ProposeCandidateResponse = z.infer<typeof ProposeCandidateResponse>;

/** `POST /v1/leases/:leaseId/heartbeat`. */
export const HeartbeatRequest = z.strictObject({ fencing_token: z.number().int().min(1) });
export type HeartbeatRequest = z.infer<typeof HeartbeatRequest>;

/** `POST /v1/leases/:leaseId/release`: the lease's holder gives it back before its deadline (the job goes back to the queue at once). */
export const ReleaseRequest = z.strictObject({ fencing_token: z.number().int().min(1) });
export type ReleaseRequest = z.infer<typeof ReleaseRequest>;

/**
 * `POST /v1/leases/:leaseId/release` answer: the candidate whose lease it was; `replayed` when this lease
 * was released before (a retry: nothing was recorded this time).
 */
export const ReleaseResponse = z.object({ lease_id: z.string(), candidate_id: z.string(), replayed: z.boolean() });
export type ReleaseResponse = z.infer<typeof ReleaseResponse>;

/** `POST /v1/leases/:leaseId/report`; `evidence` carries small files the observation cites (their bytes: the rest are uploaded first). */
export const ReportRequest = z.strictObject({
  fencing_token: z.number().int().min(1),
  observation: Observation,
  evidence: z.array(InlineEvidence).min(1).max(INLINE_EVIDENCE_MAX_FILES).optional(),
});
export type ReportRequest = z.infer<typeof ReportRequest>;

/**
 * `POST /v1/leases/:leaseId/baseline`: t0 as measured on a baseline lease — the whole observation (there
 * is no t0 yet to send a difference from) — with its small logs inline, as a report's.
 */
export const BaselineReportRequest = z.strictObject({
  fencing_token: z.number().int().min(1),
  observation: FullObservation,
  evidence: z.array(InlineEvidence).min(1).max(INLINE_EVIDENCE_MAX_FILES).optional(),
  /** The precondition as the measuring runner ran it at t0 (DESIGN §6.5). */
  doctor: DoctorRecord.optional(),
});
export type BaselineReportRequest = z.infer<typeof BaselineReportRequest>;

/** `POST /v1/leases/:leaseId/baseline` answer: the loop created from it (`created` false on a retry). */
export const BaselineReportResponse = z.object({ loop: LoopSummary, created: z.boolean() });
export type BaselineReportResponse = z.infer<typeof BaselineReportResponse>;

/**
 * `POST /v1/leases/:leaseId/report` answer: the verdict, or `requeued` when the best moved on since the
 * lease (the candidate goes back to the queue, to be compared with the new best).
 */
export const ReportResponse = z.object({ verdict: ReportAnswer, loop: LoopSummary, events: AnsweredEvents.optional() });
export type ReportResponse = z.infer<typeof ReportResponse>;

/** `POST /v1/loops/:id/artifacts`: the intent to upload one content-addressed file (DESIGN §10). */
export const ArtifactIntent = z.strictObject({
  sha256: Sha256,
  size: z.number().int().min(0),
  content_type: z.string().min(1).max(100),
  /** The file's name, for listings and downloads (sanitised by the coordinator); default `<first 12 hex digits of the sha256>.bin`. */
  name: z.string().min(1).max(200).optional(),
  /**
   * Sent right after the caller's own PUT to a presigned URL (S3 mode): an object of this size found in
   * storage and not recorded is verified in the background and answered `verifying`, not checked while
   * the caller waits (issue 30). Without it, such an object is verified before the intent is answered.
   */
  after_upload: z.literal(true).optional(),
});
export type ArtifactIntent = z.infer<typeof ArtifactIntent>;

/**
 * The answer to an upload intent: already stored; one PUT of the whole file; or a multipart upload, one
 * PUT per part (each answering its ETag), then `complete_url` with the parts' ETags (or `abort_url`).
 * A URL that starts with `/` is the coordinator's own (send the token); any other is presigned storage
 * (send nothing else but `headers`).
 */
export const ArtifactIntentResponse = z.discriminatedUnion("status", [
  z.object({ status: z.literal("exists") }),
  /**
   * Only to an intent with `after_upload`: storage holds an object of this size, not recorded; the
   * coordinator is checking its digest. It is recorded (and then `exists`) only if its bytes hash to the
   * sha256; until then it is never served nor accepted as evidence. An intent without `after_upload`
   * waits for the check and answers `exists`, or `upload` when the object was not the artifact.
   */
  z.object({ status: z.literal("verifying") }),
  z.object({
    status: z.literal("upload"),
    method: z.literal("PUT"),
    url: z.string(),
    /**
     * Headers the PUT must carry as given, besides its Content-Type (a presigned URL signs them: S3 mode's
     * `x-amz-checksum-sha256`, with which storage refuses any bytes but the artifact's).
     */
    headers: z.record(z.string(), z.string()).optional(),
  }),
  z.object({
    status: z.literal("multipart"),
    upload_id: z.string().min(1).max(1_000),
    part_size: z.number().int().min(1),
    part_urls: z.array(z.string()).min(1).max(10_000),
    complete_url: z.string(),
    abort_url: z.string(),
  }),
]);
export type ArtifactIntentResponse = z.infer<typeof ArtifactIntentResponse>;

/** The answer to one part's PUT: its number and the ETag `complete` needs. */
export const UploadedPart = z.object({ part_number: z.number().int().min(1).max(10_000), etag: z.string().min(1).max(200) });
export type UploadedPart = z.infer<typeof UploadedPart>;

/** `POST <complete_url>`: every part's ETag, in order. */
export const CompleteMultipartRequest = z.strictObject({ parts: z.array(UploadedPart.strict()).min(1).max(10_000) });
export type CompleteMultipartRequest = z.infer<typeof CompleteMultipartRequest>;

/** An artifact as the coordinator recorded it, once the object exists with its size and digest. */
export const ArtifactView = z.object({
  sha256: Sha256,
  size: z.number().int().min(0),
  name: z.string(),
  content_type: z.string(),
  created_at: z.string(),
});
export type ArtifactView = z.infer<typeof ArtifactView>;

/** What a finished upload answers (a single PUT, or `complete`). */
export const ArtifactStored = z.object({ status: z.literal("stored"), artifact: ArtifactView });
export type ArtifactStored = z.infer<typeof ArtifactStored>;

/**
 * `complete`'s answer (202) once storage has put the parts together with the declared size and the loop's
 * quota has room: the coordinator checks the object's SHA-256 after answering (issue 30), records it if
 * it hashes to its key and deletes it if not. Until then it is never listed, served, nor accepted as
 * evidence; an intent for it (without `after_upload`) waits for the check.
 */
export const ArtifactVerifying = z.object({
  status: z.literal("verifying"),
  artifact: z.object({ sha256: Sha256, size: z.number().int().min(0) }),
});
export type ArtifactVerifying = z.infer<typeof ArtifactVerifying>;

/** What `complete` answers: recorded already (a retry, or the same bytes uploaded before), or being verified. */
export const CompleteMultipartResponse = z.discriminatedUnion("status", [ArtifactStored, ArtifactVerifying]);
export type CompleteMultipartResponse = z.infer<typeof CompleteMultipartResponse>;

/** `GET /v1/loops/:id/artifacts` answer, newest first, paged by cursor. */
export const ArtifactList = z.object({ artifacts: z.array(ArtifactView), next_cursor: z.string().nullable() });
export type ArtifactList = z.infer<typeof ArtifactList>;

/** `GET /healthz`. */
export const Health = z.object({ ok: z.literal(true), version: z.string() });

/** Receipt ids: `rc_` and 32 hex digits, unguessable (DESIGN §9). */
export const ReceiptId = z.string().regex(/^rc_[0-9a-f]{32}$/, "is not a receipt id");

/** `POST /v1/loops/:id/receipts`: no fields (an empty body is taken as `{}`). */
export const IssueReceiptRequest = z.strictObject({});

/** `POST /v1/loops/:id/receipts` answer: an interim receipt over the log as it is now. */
export const ReceiptIssued = z.object({
  receipt_id: ReceiptId,
  /** The receipt's public page; `<url>.json` is the envelope, `<url>/events.jsonl` the log it signs. */
  url: z.string(),
  head: z.object({ seq: z.number().int(), hash: Sha256 }),
});
export type ReceiptIssued = z.infer<typeof ReceiptIssued>;

/** A one-time link that logs a browser in to the dashboard as the token that asked for it (`POST /v1/dashboard/links`). */
export const LoginLink = z.object({ url: z.string().url(), expires_at: z.string() });
export type LoginLink = z.infer<typeof LoginLink>;

/** `POST /v1/loops/:id/cancel`: stop a running loop (`cancelled`), with a reason shown beside the halt. */
export const CancelRequest = z.strictObject({ reason: z.string().max(500).optional() });
export type CancelRequest = z.infer<typeof CancelRequest>;

/** `POST /v1/loops/:id/cancel` answer: the loop, halted; `replayed` when it was cancelled already. */
export const CancelResponse = z.object({ loop: LoopSummary, replayed: z.boolean() });
export type CancelResponse = z.infer<typeof CancelResponse>;

/** `POST /v1/loops/:id/candidates/:candidateId/review` answer: the candidate as it now is, and the loop. */
export const ReviewResponse = z.object({ candidate: CandidateView, loop: LoopSummary, replayed: z.boolean() });
export type ReviewResponse = z.infer<typeof ReviewResponse>;

/**
 * `POST /v1/loops/:id/context-unsatisfiable`: the first tier of the agent's context needs `needed` tokens,
 * over the contract's `budget` (docs/design.md §6.9). The loop halts `context_budget_unsatisfiable`.
 */
export const ContextUnsatisfiableRequest = z.strictObject({
  runner_id: RunnerId,
  tier: z.literal("stack_trace"),
  needed: z.number().int().min(1).max(1_000_000_000),
  budget: z.number().int().min(1),
});
export type ContextUnsatisfiableRequest = z.infer<typeof ContextUnsatisfiableRequest>;

/** `POST /v1/loops/:id/context-unsatisfiable` answer: the loop, halted. */
export const ContextUnsatisfiableResponse = z.object({ loop: LoopSummary });
export type ContextUnsatisfiableResponse = z.infer<typeof ContextUnsatisfiableResponse>;

/** `POST /v1/loops/:id/confirm`: t0 and the best measured interleaved by a runner (cumulative readings). */
export const ConfirmRequest = z.strictObject({
  candidate_id: z.string(),
  samples: ConfirmReadings,
  /** The measuring runner's labels: it must be one the contract's `evaluate.labels` admit, as for a lease. */
  labels: Labels.default({}),
});
export type ConfirmRequest = z.infer<typeof ConfirmRequest>;

/**
 * `POST /v1/loops/:id/rechecks`: a re-run of a best's gates in a fresh clone (DESIGN §6.5) — on resume,
 * before the next agent run, or every `determinism.recheck_every` iterations — judged against the
 * outcome recorded for that best. Its logs are uploaded first, as a report's.
 */
export const RecheckRequest = z.strictObject({
  idempotency_key: IdempotencyKey,
  /** `t0`, or the promoted candidate that is the best. */
  candidate_id: z.string().min(1).max(100),
  commit: GitCommit,
  purpose: z.enum(["resume", "periodic"]),
  runner_id: RunnerId,
  observation: Observation,
  /** The measuring runner's labels: one the contract's `evaluate.labels` admit, as for a lease. */
  labels: Labels.default({}),
});
export type RecheckRequest = z.infer<typeof RecheckRequest>;

/** `POST /v1/loops/:id/rechecks` answer: the ids whose outcome differed from the recorded one, and the loop after it (a retry answers the same ids). */
export const RecheckResponse = z.object({
  /** The first 100 ids whose outcome differed from the recorded one, sorted; `changed_count` counts them all. */
  changed: z.array(z.string()).max(100),
  changed_count: z.number().int().min(0),
  loop: LoopSummary,
  replayed: z.boolean(),
});
export type RecheckResponse = z.infer<typeof RecheckResponse>;

/** `POST /v1/loops/:id/confirm` answer: more pairs wanted, or the measurement recorded (with the loop after it). */
export const ConfirmResponse = z.discriminatedUnion("status", [
  z.object({
    status: z.literal("need_samples"),
    more: z.number().int().min(1),
    pairs: z.number().int(),
    /** How long the caller's claim on the measurement lives without another request (absent from coordinators before claims lapsed). */
    ttl_ms: z.number().int().positive().optional(),
  }),
  z.object({ status: z.literal("recorded"), confirm: Confirmation, loop: LoopSummary }),
]);
export type ConfirmResponse = z.infer<typeof ConfirmResponse>;
