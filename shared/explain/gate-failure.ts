import { isDerivedTestId, type CandidateState, type GateSummary, type StoredEvidence } from "../engine/index.js";
import type { ArtifactRef } from "../wire/observation.js";

// What an evaluation left behind, read from the folded log: which gate failed and why, the test to look
// at first, and the files stored with it — what a rejection line, `explain`, `logs`, `artifacts` and the
// dashboard's pages name.

/** Whether a gate failed as the engine judged it: a hard gate by its exit code (or an unreadable test report), a soft gate by its threshold. */
export function gateFailed(gate: GateSummary): boolean {
  return !gate.passed;
}

/** How a failed gate ended, in words. */
export function gateOutcome(gate: GateSummary): string {
  if (gate.timed_out) return "timed out";
  if (gate.exit_code === null) return `killed by ${gate.signal ?? "a signal"}`;
  if (gate.exit_code !== 0 || gate.passed) return `exit ${gate.exit_code}`;
  // Failed with exit 0: a soft gate past its threshold (or without its metric), a hard one whose test report was unreadable.
  return gate.soft ? "missed its threshold" : "exit 0, its test report unreadable";
}

/**
 * The gate to look at among an evaluation's: the first failed hard gate, else the first failed soft gate
 * (a soft gate never stops the others, so one may fail beside the hard failure that decided); null when
 * every gate passed.
 */
export function failingGateOf(gates: readonly GateSummary[]): GateSummary | null {
  const failed = gates.filter(gateFailed);
  return failed.find((gate) => !gate.soft) ?? failed[0] ?? null;
}

/**
 * Why a candidate's gates failed: the gate to look at (`failingGateOf`) and the test to look at first: one the candidate broke (the
 * verdict's `regressed`, as the engine found it) before one that merely fails (which may have failed at
 * t0 already), never a derived `gate:`/`task:` id. Nulls when it has no report.
 */
export function failureOf(candidate: CandidateState | undefined): { gate: GateSummary | null; test: string | null; regressed: boolean } {
  const report = candidate?.report;
  if (!report) return { gate: null, test: null, regressed: false };
  const gate = failingGateOf(report.gates);
  const broken = candidate.verdict?.regressed.find((id) => !isDerivedTestId(id));
  if (broken !== undefined) return { gate, test: broken, regressed: true };
  return { gate, test: report.tests.failing.find((id) => !isDerivedTestId(id)) ?? null, regressed: false };
}

/** One line on why a rejected candidate's gates failed, pointing at its log; null when none failed. */
export function failureLine(candidate: CandidateState | undefined): string | null {
  const { gate, test, regressed } = failureOf(candidate);
  if (!gate || !candidate) return null;
  const which = test === null ? "" : regressed ? `, broke test ${test}` : `, first failing test ${test}`;
  return `gate ${gate.name}${gate.soft ? " (soft)" : ""} ${gateOutcome(gate)}${which} — its output: loopwarden logs ${candidate.candidate_id}`;
}

/** Everything an evaluation stored: each gate's log, then its files (the contract's artifacts, `metric.log`). */
export function storedFilesOf(evidence: StoredEvidence): ArtifactRef[] {
  return [...evidence.gates.flatMap((gate) => (gate.log ? [gate.log] : [])), ...evidence.artifacts];
}
