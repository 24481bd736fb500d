import * as z from "zod";
import type { ChainHead } from "../engine/chain.js";
import { Confirmation, Halt, Verdict } from "../engine/events.js";
import type { LoopState } from "../engine/state-types.js";
import { GitCommit, Sha256 } from "../wire/observation.js";
import { ConfinementAttestation, confinementAttestation } from "./confinement.js";
import { OracleAttestation, oracleAttestation } from "./oracle.js";
import { ContextManifest } from "../wire/review.js";

// What a receipt attests (DESIGN §9): an in-toto Statement v1 (github.com/in-toto/attestation,
// spec/v1/statement.md) whose subjects are the best commit and the baseline commit, and whose predicate
// summarises the loop at a head of its event log. Every field of the predicate but when and by which
// version it was issued is a function of the log up to that head, so a verifier recomputes it.

/** The in-toto Statement type. */
export const STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
/** The type of loopwarden's predicate. */
export const RECEIPT_PREDICATE_TYPE = "https://loopwarden.dev/receipt/v1";

const Count = z.number().int().min(0);

/** The predicate of a receipt. */
export const ReceiptPredicate = z.strictObject({
  loop_id: z.string(),
  /** The repository the loop ran in, as its runner named it; null when it gave none. */
  repository: z.string().nullable(),
  name: z.string(),
  objective: z.string().nullable(),
  mode: z.string(),
  contract_hash: Sha256,
  /** `final` at the halt, `interim` on demand. */
  kind: z.enum(["final", "interim"]),
  issued_at: z.iso.datetime(),
  coordinator: z.strictObject({ version: z.string() }),
  /** The event-log head the receipt covers: its last event's seq and hash. */
  log: z.strictObject({ seq: z.number().int().min(1), hash: Sha256 }),
  halt: Halt.nullable(),
  t0: z.strictObject({ commit: GitCommit, failing: Count, passing: Count, test_set: Sha256, metric: z.number().nullable() }),
  best: z.strictObject({
    candidate_id: z.string(),
    commit: GitCommit,
    failing: Count,
    passing: Count,
    metric: z.number().nullable(),
    /** The verdict that promoted it, with its evidence; null while the best is t0. */
    verdict: Verdict.nullable(),
    /** The context its agent run was given (docs/design.md §6.9), file by file; absent when none was recorded. */
    context: ContextManifest.optional(),
  }),
  /**
   * The confirm measurement of t0 against the best (DESIGN §6.3), interleaved on one runner: the only
   * figure a receipt claims as a gain over t0 (a chain of step-wise estimates is not one). Null until one
   * is recorded for the current best, and in modes without a metric.
   */
  confirm: Confirmation.nullable(),
  iterations: z.strictObject({ total: Count, promoted: Count, rejected: Count, max: Count }),
  /** How each zone was confined over the loop (DESIGN §6.7): an unconfined run says so here, and wherever the receipt is shown. */
  confinement: ConfinementAttestation.optional(),
  /**
   * The contract's scope (DESIGN §6.4): the only paths a candidate could change; null when the loop had
   * none and only the protected set guarded the check. Absent from receipts signed before scopes.
   */
  scope: z.array(z.string()).nullable().optional(),
  /** What the check was held to (DESIGN §6.5): its precondition and flake monitor. Absent from receipts signed before them. */
  oracle: OracleAttestation.optional(),
  /**
   * Every answer a person gave to a candidate's request to change protected files (docs/design.md §6.8):
   * who, which files, what they said, and where the candidate ended. Absent when no agent asked.
   */
  reviews: z
    .array(
      z.strictObject({
        candidate_id: z.string(),
        decision: z.enum(["ack", "reject"]),
        by: z.string(),
        at: z.string(),
        note: z.string(),
        files: z.array(z.string()),
        why: z.string(),
        status: z.string(),
      }),
    )
    .optional(),
});
export type ReceiptPredicate = z.infer<typeof ReceiptPredicate>;

/** An in-toto Statement v1 carrying a receipt predicate. */
export const ReceiptStatement = z.strictObject({
  _type: z.literal(STATEMENT_TYPE),
  subject: z.array(z.strictObject({ name: z.string(), digest: z.strictObject({ gitCommit: GitCommit }) })).min(1),
  predicateType: z.literal(RECEIPT_PREDICATE_TYPE),
  predicate: ReceiptPredicate,
});
export type ReceiptStatement = z.infer<typeof ReceiptStatement>;

/** What a receipt's issuer adds to what the log determines. */
export interface Issuance {
  kind: "final" | "interim";
  issued_at: string;
  version: string;
}

/** The recorded confirm measurement, when it is of the current best. */
function confirmationOf(state: LoopState): Confirmation | null {
  const recorded = state.confirm;
  if (!recorded || recorded.candidate_id !== state.best.candidate_id) return null;
  const { samples: _samples, ...confirm } = recorded;
  return confirm;
}

/** A statement as this version issues it: its predicate always attests the zones' confinement, the scope and the check's precondition. */
export type IssuedStatement = ReceiptStatement & {
  predicate: { confinement: ConfinementAttestation; scope: string[] | null; oracle: OracleAttestation };
};

/** The statement of a loop's state at `head` (the fold of its log up to there). */
export function receiptStatement(state: LoopState, head: ChainHead, issuance: Issuance): IssuedStatement {
  const candidates = state.candidate_order.map((id) => state.candidates[id]);
  const best = state.candidates[state.best.candidate_id];
  return {
    _type: STATEMENT_TYPE,
    // The repository (or, when its runner named none, the loop) and which commit each one is.
    subject: [
      { name: `${state.repository ?? state.contract.name}@best`, digest: { gitCommit: state.best.commit } },
      { name: `${state.repository ?? state.contract.name}@t0`, digest: { gitCommit: state.t0.commit } },
    ],
    predicateType: RECEIPT_PREDICATE_TYPE,
    predicate: {
      loop_id: state.loop_id,
      repository: state.repository,
      name: state.contract.name,
      objective: state.contract.objective ?? null,
      mode: state.contract.mode,
      contract_hash: state.contract_hash,
      kind: issuance.kind,
      issued_at: issuance.issued_at,
      coordinator: { version: issuance.version },
      log: { seq: head.seq, hash: head.hash },
      halt: state.halt,
      t0: {
        commit: state.t0.commit,
        failing: state.t0.failing.length,
        passing: state.t0.passing_count,
        test_set: state.t0_base.digest,
        metric: state.t0.metric,
      },
      best: {
        candidate_id: state.best.candidate_id,
        commit: state.best.commit,
        failing: state.best.failing.length,
        passing: state.best.passing_count,
        metric: state.best.metric,
        verdict: best?.verdict ?? null,
        ...(best?.context ? { context: best.context } : {}),
      },
      confirm: confirmationOf(state),
      iterations: {
        total: state.iterations,
        promoted: candidates.filter((candidate) => candidate?.status === "promoted").length,
        rejected: candidates.filter((candidate) => candidate?.status === "rejected").length,
        max: state.contract.stop.max_iterations,
      },
      confinement: confinementAttestation(state.confinement),
      scope: state.contract.scope ?? null,
      oracle: oracleAttestation(state),
      ...(state.reviews.length > 0
        ? {
            reviews: state.reviews.map((review) => ({
              candidate_id: review.candidate_id,
              decision: review.decision,
              by: review.by,
              at: review.at,
              note: review.note,
              files: review.files,
              why: state.candidates[review.candidate_id]?.review_request?.why ?? "",
              status: state.candidates[review.candidate_id]?.status ?? "unknown",
            })),
          }
        : {}),
    },
  };
}
