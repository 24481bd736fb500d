import { BASELINE_ID, type LoopState, type StoredEvidence } from "#shared/engine/index.js";
import { UserError } from "../errors.js";

// The evaluation a command (`logs`, `artifacts`) is about, read from the folded log. Which gate failed and
// why, and the files an evaluation stored, are read the same way by the dashboard: shared/explain/gate-failure.ts.

/** One evaluation's stored evidence: a candidate's report's, or t0's (the baseline, measured when the loop was created). */
export interface Evaluated extends StoredEvidence {
  /** `t0` or the candidate's id. */
  id: string;
}

/** The evaluation a command is about: t0, the candidate named, else the latest candidate that has a report. */
export function evaluatedFor(state: LoopState, named: string | undefined): Evaluated {
  if (named === BASELINE_ID) return { id: BASELINE_ID, ...state.t0_evidence };
  if (named !== undefined) {
    const candidate = state.candidates[named];
    if (!candidate)
      throw new UserError(
        `loop ${state.loop_id} has no candidate ${named} (it has t0${state.candidate_order.length > 0 ? ` and c1 … c${state.candidate_order.length}` : " only"})`,
        2,
      );
    const report = candidate.report;
    return {
      id: candidate.candidate_id,
      gates: report?.gates ?? [],
      artifacts: report?.artifacts ?? [],
      ...(report?.artifact_errors ? { artifact_errors: report.artifact_errors } : {}),
    };
  }
  const latest = [...state.candidate_order].reverse().find((id) => state.candidates[id]?.report);
  const report = latest ? state.candidates[latest]?.report : undefined;
  if (!latest || !report) throw new UserError(`no candidate of loop ${state.loop_id} has been evaluated yet (t0's output: name t0)`, 2);
  return { id: latest, gates: report.gates, artifacts: report.artifacts, ...(report.artifact_errors ? { artifact_errors: report.artifact_errors } : {}) };
}
