import type { ChainHead, LoopState } from "../../shared/engine/index.js";
import type { CandidateView, LoopSummary } from "../../shared/wire/api.js";

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
  };
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
