import type { CandidateState, GateSummary, LoopState } from "../../shared/engine/index.js";
import type { ArtifactRef } from "../../shared/wire/observation.js";
import { UserError } from "./errors.js";

// What a candidate's report left behind, read from the folded log: which gate failed and why, its first
// failing test, and the files stored with it — what a rejection line, `explain`, `logs` and `artifacts` name.

/** Whether a gate failed (a non-zero exit, a signal, or a timeout). */
export function gateFailed(gate: GateSummary): boolean {
  return gate.timed_out || gate.exit_code !== 0;
}

/** How a failed gate ended, in words. */
export function gateOutcome(gate: GateSummary): string {
  return gate.timed_out ? "timed out" : gate.exit_code === null ? `killed by ${gate.signal ?? "a signal"}` : `exit ${gate.exit_code}`;
}

/** The candidate's first failing gate and its first failing test (not a derived `gate:`/`task:` one), when it has a report. */
export function failureOf(candidate: CandidateState | undefined): { gate: GateSummary | null; test: string | null } {
  const report = candidate?.report;
  if (!report) return { gate: null, test: null };
  return {
    gate: report.gates.find(gateFailed) ?? null,
    test: report.tests.failing.find((id) => !id.startsWith("gate:") && !id.startsWith("task:")) ?? null,
  };
}

/** One line on why a rejected candidate's gates failed, pointing at its log; null when none failed. */
export function failureLine(candidate: CandidateState | undefined): string | null {
  const { gate, test } = failureOf(candidate);
  if (!gate || !candidate) return null;
  return `gate ${gate.name} ${gateOutcome(gate)}${test ? `, first failing test ${test}` : ""} — its output: loopwarden logs ${candidate.candidate_id}`;
}

/** The candidate a command is about: the one named, else the latest that has a report. */
export function candidateFor(state: LoopState, named: string | undefined): CandidateState {
  if (named !== undefined) {
    const candidate = state.candidates[named];
    if (!candidate)
      throw new UserError(`loop ${state.loop_id} has no candidate ${named} (it has ${state.candidate_order.length}: c1 … c${state.candidate_order.length})`, 2);
    return candidate;
  }
  const latest = [...state.candidate_order].reverse().find((id) => state.candidates[id]?.report);
  const candidate = latest ? state.candidates[latest] : undefined;
  if (!candidate) throw new UserError(`no candidate of loop ${state.loop_id} has been evaluated yet`, 2);
  return candidate;
}

/** Everything a candidate's report stored: each gate's log, then its files (the contract's artifacts, `metric.log`). */
export function storedFilesOf(candidate: CandidateState): ArtifactRef[] {
  const report = candidate.report;
  if (!report) return [];
  return [...report.gates.flatMap((gate) => (gate.log ? [gate.log] : [])), ...report.artifacts];
}
