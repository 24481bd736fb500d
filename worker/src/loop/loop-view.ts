import { awaitingReview, type ChainHead, type LoopState } from "#shared/engine/index.js";
import type { CandidateView, Lease, LoopSummary } from "#shared/wire/api.js";

/** The API's summary of a loop (DESIGN §8 `GET /v1/loops/:id`). */
export function summarizeLoop(state: LoopState, head: ChainHead): LoopSummary {
  return {
    loop_id: state.loop_id,
    name: state.contract.name,
    mode: state.contract.mode,
    status: state.halt ? "halted" : "running",
    contract_hash: state.contract_hash,
    created_at: state.created_at,
    iteration: state.iterations,
    max_iterations: state.contract.stop.max_iterations,
    t0: { commit: state.t0.commit, failing: state.t0.failing.length },
    best: { candidate_id: state.best.candidate_id, commit: state.best.commit, failing: state.best.failing.length },
    halt: state.halt,
    head,
    ...(state.final_receipt ? { receipt_id: state.final_receipt } : {}),
    ...awaitingField(state),
  };
}

function awaitingField(state: LoopState): { awaiting_review?: string[] } {
  const waiting = awaitingReview(state).map((candidate) => candidate.candidate_id);
  return waiting.length > 0 ? { awaiting_review: waiting } : {};
}

/** The API's view of one candidate. */
export function viewCandidate(state: LoopState, candidateId: string): CandidateView {
  const candidate = state.candidates[candidateId];
  if (!candidate) throw new Error(`unknown candidate ${candidateId}`);
  return {
    candidate_id: candidate.candidate_id,
    parent: candidate.parent,
    commit: candidate.commit,
    status: candidate.status,
    verdict: candidate.verdict,
  };
}

/**
 * A lease on a candidate's evaluation as the API shows it: the job names the candidate, its commit, the
 * contract hash and the best it is compared with (never a command, DESIGN §4), with the bundles of the
 * job's commits for a runner whose checkout lacks them.
 */
export function viewLease(state: LoopState | null, ttlMs: number, leaseId: string, fencingToken: number, expiresAt: string, candidateId: string): Lease {
  const candidate = state?.candidates[candidateId];
  if (!state || !candidate) throw new Error(`lease for unknown candidate ${candidateId}`);
  return {
    lease_id: leaseId,
    loop_id: state.loop_id,
    fencing_token: fencingToken,
    expires_at: expiresAt,
    ttl_ms: ttlMs,
    job: {
      kind: "evaluate",
      candidate_id: candidateId,
      commit: candidate.commit,
      contract_hash: state.contract_hash,
      compare_to: candidate.lease?.compare_to ?? null,
      bundles: [candidate, state.candidates[candidate.lease?.compare_to?.candidate_id ?? ""]].flatMap((holder) =>
        holder?.bundle ? [{ commit: holder.commit, ...holder.bundle }] : [],
      ),
    },
  };
}
