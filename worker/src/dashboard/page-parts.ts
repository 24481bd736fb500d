import { html } from "hono/html";
import type { BestState, CandidateState, LoopState } from "#shared/engine/index.js";
import { formatPercent } from "#shared/format-percent.js";
import { formatLabels } from "#shared/engine/labels.js";
import type { Labels } from "#shared/wire/contract.js";

// Small pieces the dashboard's pages share: links to candidates, a candidate's status in words, a score.

/** Where a candidate's page is. */
export function candidateHref(loopId: string, candidateId: string): string {
  return `/loops/${loopId}/candidates/${candidateId}`;
}

/** A link to a candidate's page, named by its id. */
export function candidateLink(loopId: string, candidateId: string) {
  return html`<a href="${candidateHref(loopId, candidateId)}">${candidateId}</a>`;
}

/** A candidate's status in words: its verdict and why once decided, else where it waits. */
export function statusWord(candidate: CandidateState): string {
  const verdict = candidate.verdict;
  if (verdict) return `${verdict.decision} (${verdict.reason})`;
  if (candidate.status === "leased") return `being evaluated by ${candidate.lease?.runner_id ?? "a runner"}`;
  if (candidate.status === "awaiting_review") return "awaiting a person's review";
  return candidate.pending ? "needs more samples" : "queued";
}

/** A runner's labels as recorded with its lease: `gpu=h100, os=linux`, none, or not recorded (older leases). */
export function labelsText(labels: Readonly<Labels> | undefined): string {
  if (labels === undefined) return "not recorded";
  return Object.keys(labels).length === 0 ? "none" : formatLabels(labels);
}

/** What a standing scores, in words: its failing count, or in optimize mode its metric's median. */
export function scoreText(state: LoopState, standing: BestState): string {
  if (state.contract.mode === "optimize") return standing.metric === null ? "–" : String(standing.metric);
  return `${standing.failing.length} failing`;
}

/** A score against the baseline's: `12 → 3 failing`, or a metric's relative change. */
export function againstBaseline(mode: string, t0: number | null, best: number | null): string {
  if (t0 === null || best === null) return "–";
  if (mode !== "optimize") return `${t0} → ${best} failing`;
  if (t0 === 0) return `${t0} → ${best}`;
  const change = best / t0 - 1;
  return `${t0} → ${best} (${change > 0 ? "+" : ""}${formatPercent(change)} vs t0)`;
}
