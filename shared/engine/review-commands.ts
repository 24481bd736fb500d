import { parseDuration } from "../duration.js";
import { DEFAULT_CONTEXT_BUDGET, DEFAULT_REVIEW_TIMEOUT } from "../wire/contract.js";
import { exitCodeFor } from "../wire/halt-reasons.js";
import { formatList } from "../format-list.js";
import { decideUnevaluated } from "./decide.js";
import type { EventDraft } from "./events.js";
import { addMs, refuse, type Outcome } from "./outcome.js";
import { applyEvent } from "./state.js";
import type { CandidateState, LoopState } from "./state-types.js";

// The human step and the context budget (docs/design.md §6.8, §6.9): a person's answer to a candidate's
// request to change protected files, the timeout that halts `human_required` when nobody answers, and
// the runner's report that the agent's context cannot fit its budget. Pure, as every command is: time and
// who asked come in as arguments.

/** How long a review request waits for its answer, in ms (`stop.review_timeout`, 24h without one). */
export function reviewTimeoutMs(state: LoopState): number {
  return parseDuration(state.contract.stop.review_timeout ?? DEFAULT_REVIEW_TIMEOUT) ?? 0;
}

/** The agent's context budget in tokens (`agent.context.budget`, DEFAULT_CONTEXT_BUDGET without one). */
export function contextBudget(state: Pick<LoopState, "contract">): number {
  return state.contract.agent.context?.budget ?? DEFAULT_CONTEXT_BUDGET;
}

/** The candidates waiting for a person's answer, oldest first (they are among the unsettled: a short scan). */
export function awaitingReview(state: LoopState): CandidateState[] {
  return state.unsettled.map((id) => state.candidates[id]).filter((candidate): candidate is CandidateState => candidate?.status === "awaiting_review");
}

/** When the oldest waiting request times out, or null when none waits (or the loop halted). */
export function nextReviewDeadline(state: LoopState): string | null {
  if (state.halt) return null;
  const oldest = awaitingReview(state)[0];
  return oldest ? addMs(oldest.proposed_at, reviewTimeoutMs(state)) : null;
}

/**
 * A person's answer to a candidate's request (admin or review scope; `by` is their token's id, or
 * `owner`). `ack` lets exactly the requested files change for that candidate: it joins the queue and is
 * judged as any other. `reject` rejects it (`review_rejected`). The same answer again is `replayed`;
 * another answer to an answered request, an answer to a candidate that asked for none, or to one that
 * was decided without waiting (its agent failed, it changed nothing), is refused.
 */
export function reviewCandidate(
  state: LoopState,
  input: { candidate_id: string; decision: "ack" | "reject"; note: string; by: string; at: string },
): Outcome<{ replayed: boolean }> {
  const candidate = Object.hasOwn(state.candidates, input.candidate_id) ? state.candidates[input.candidate_id] : undefined;
  if (!candidate) return refuse("candidate_not_found", `the loop has no candidate ${input.candidate_id}`);
  if (!candidate.review_request) return refuse("not_awaiting_review", `${input.candidate_id} asked for no review: nothing is there to approve`);
  if (candidate.review) {
    if (candidate.review.decision === input.decision && candidate.review.by === input.by && candidate.review.note === input.note.trim()) {
      return { ok: true, events: [], value: { replayed: true } };
    }
    return refuse("not_awaiting_review", `${input.candidate_id}'s request was answered already (${candidate.review.decision} by ${candidate.review.by})`);
  }
  if (state.halt) return refuse("loop_halted", `the loop has halted (${state.halt.halt_reason}); its halt stands`);
  // A candidate rejected at once (its agent failed, it changed nothing) carries its request but waits for
  // nobody: an ack would put a settled candidate back in the queue for a second verdict.
  if (candidate.status !== "awaiting_review") {
    const settled = candidate.verdict ? `${candidate.verdict.decision}: ${candidate.verdict.reason}` : candidate.status;
    return refuse("not_awaiting_review", `${input.candidate_id} was decided already (${settled}): nothing is there to approve`);
  }
  const decided: EventDraft = {
    type: "review_decided",
    at: input.at,
    data: { candidate_id: input.candidate_id, decision: input.decision, by: input.by, note: input.note.trim(), files: candidate.review_request.files },
  };
  if (input.decision === "ack") return { ok: true, events: [decided], value: { replayed: false } };
  const rejected = decideUnevaluated(
    applyEvent(state, decided),
    input.candidate_id,
    "review_rejected",
    `${input.by} rejected its change to ${formatList(candidate.review_request.files)}: ${input.note.trim()}`,
    input.at,
  );
  return { ok: true, events: [decided, ...rejected.events], value: { replayed: false } };
}

/**
 * The halt due at `now` for a request nobody answered within `stop.review_timeout`: `review_timed_out`
 * and `halted` (`human_required`, exit class 11). Nothing when none is due.
 */
export function reviewTimeouts(state: LoopState, now: string): EventDraft[] {
  if (state.halt) return [];
  const oldest = awaitingReview(state)[0];
  if (!oldest) return [];
  const deadline = addMs(oldest.proposed_at, reviewTimeoutMs(state));
  if (Date.parse(deadline) > Date.parse(now)) return [];
  const files = oldest.review_request?.files ?? [];
  return [
    { type: "review_timed_out", at: now, data: { candidate_id: oldest.candidate_id, deadline } },
    {
      type: "halted",
      at: now,
      data: {
        halt_reason: "human_required",
        exit_class: exitCodeFor("human_required"),
        detail: `${oldest.candidate_id} asked to change ${formatList(files)} and nobody answered by ${deadline} (stop.review_timeout ${state.contract.stop.review_timeout ?? DEFAULT_REVIEW_TIMEOUT}): loopwarden review shows it`,
      },
    },
  ];
}

/**
 * The runner's report that the first tier of the agent's context needs more tokens than the budget
 * (docs/design.md §6.9): `context_unsatisfiable`, then `halted` (`context_budget_unsatisfiable`, class
 * 11), before any agent run. The budget must be the contract's and the need above it: a report that
 * would fit is refused, so no runner halts a loop on a figure the engine does not accept.
 */
export function haltContextUnsatisfiable(
  state: LoopState,
  input: { tier: "stack_trace"; needed: number; budget: number; runner_id: string; by: string; at: string },
): Outcome<null> {
  if (state.halt) return refuse("loop_halted", `the loop has halted (${state.halt.halt_reason}); its halt stands`);
  const budget = contextBudget(state);
  if (input.budget !== budget) return refuse("invalid_observation", `the report names a budget of ${input.budget} tokens; the contract's is ${budget}`);
  if (input.needed <= budget) return refuse("invalid_observation", `${input.needed} tokens fit the budget of ${budget}: the context is satisfiable`);
  const { at, ...data } = input;
  return {
    ok: true,
    events: [
      { type: "context_unsatisfiable", at, data },
      {
        type: "halted",
        at,
        data: {
          halt_reason: "context_budget_unsatisfiable",
          exit_class: exitCodeFor("context_budget_unsatisfiable"),
          detail: `the agent's context needs ${input.needed} tokens for its first tier (the failing tests' output and the files their stack traces name), over agent.context.budget ${budget}; the agent was not run`,
        },
      },
    ],
    value: null,
  };
}
