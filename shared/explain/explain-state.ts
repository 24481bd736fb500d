import { describeFailing, HALT_MEANINGS, type HaltReason, type LoopState } from "../engine/index.js";
import { failureLine, failureOf } from "./gate-failure.js";

// Why a loop halted, in plain words, with what to do next: what `loopwarden explain` prints and the
// dashboard's loop page shows, from the folded log alone.

/** What to do about a halt: raise a limit, fix the setup, or do not retry as is (what it means: HALT_MEANINGS). */
const ADVICE: Record<HaltReason, { next: string; retry: "raise_limit" | "fix_then_retry" | "do_not_retry" | "done" }> = {
  success_condition_met: { next: "review and merge the loop's branch", retry: "done" },
  human_required: {
    next: "nobody answered a candidate's request to change protected files in time: read it (loopwarden review), decide whether the change is right, and start a new loop with a longer stop.review_timeout if answers take longer",
    retry: "fix_then_retry",
  },
  no_actionable_tasks: { next: "add or unblock tasks", retry: "fix_then_retry" },
  cancelled: { next: "a person stopped it on purpose: start a new loop (run --new) when you want one", retry: "do_not_retry" },
  context_budget_unsatisfiable: {
    next: "raise agent.context.budget (the halt says how many tokens the first tier needs), or make the failing output shorter, then start a new loop",
    retry: "raise_limit",
  },
  max_iterations_reached: { next: "", retry: "raise_limit" },
  blocked_path_modified: {
    next: "tell the agent its scope and the files that are off limits (program.md); widen the scope in loop.yaml only by your own decision, then start a new loop",
    retry: "fix_then_retry",
  },
  metric_integrity_violation: { next: "tell the agent never to delete or skip tests, then start a new loop", retry: "fix_then_retry" },
  objective_unverified: { next: "re-run the verification", retry: "fix_then_retry" },
  check_flaky: { next: "make the flipping tests deterministic (loopwarden probe finds them), then start a new loop", retry: "fix_then_retry" },
  check_has_side_effects: { next: "make the gates independent of leftover state (loopwarden doctor)", retry: "fix_then_retry" },
  check_inadequate: { next: "strengthen the tests (loopwarden doctor --mutate)", retry: "fix_then_retry" },
  escalation_pending: { next: "answer it; the loop resumes", retry: "fix_then_retry" },
  no_progress_detected: { next: "do not retry as is: change the agent's instructions or the approach", retry: "do_not_retry" },
  oscillation_detected: { next: "do not retry as is: tell the agent which test it keeps breaking", retry: "do_not_retry" },
  unsatisfiable_constraints: { next: "do not retry as is: check that both tests can pass together", retry: "do_not_retry" },
  budget_exceeded: { next: "", retry: "raise_limit" },
  heartbeat_stale: { next: "check the runner's machine, then run again", retry: "fix_then_retry" },
  workspace_invalid: { next: "keep loop.yaml out of the agent's reach; a new contract is a new loop", retry: "fix_then_retry" },
  execution_failure: { next: "run the agent command by hand and fix it (see .loopwarden/logs/)", retry: "fix_then_retry" },
  internal_error: { next: "report it with the event log", retry: "fix_then_retry" },
};

/** The plain-words explanation of a loop's state (DESIGN §13 `explain`), built from its folded event log. */
export function explainState(state: LoopState): { lines: string[]; retry: string | null } {
  const lines: string[] = [];
  const decided = state.candidate_order.map((id) => state.candidates[id]).filter((c) => c?.verdict);
  const promoted = decided.filter((c) => c?.verdict?.decision === "promoted").length;
  lines.push(`loop ${state.loop_id} (${state.contract.name}): ${state.iterations} iteration(s), ${promoted} promoted`);
  lines.push(`  baseline ${state.t0.commit.slice(0, 10)}: ${describeFailing(state.t0.failing)}`);
  lines.push(`  best     ${state.best.candidate_id} at ${state.best.commit.slice(0, 10)}: ${describeFailing(state.best.failing)}`);
  if (!state.halt) {
    lines.push("  still running: nothing to explain yet (loopwarden watch follows it)");
    return { lines, retry: null };
  }
  const { halt_reason: reason, detail, still_improving: stillImproving } = state.halt;
  const advice = ADVICE[reason];
  lines.push("", `halted: ${reason} (exit ${state.halt.exit_class}): ${HALT_MEANINGS[reason]}`, `  evidence: ${detail}`);
  const recent = decided.slice(-Math.min(decided.length, state.contract.stop.no_progress));
  if (recent.length > 0) {
    lines.push("  last verdicts:");
    for (const candidate of recent) {
      const verdict = candidate?.verdict;
      if (!verdict) continue;
      lines.push(`    ${verdict.candidate_id} ${verdict.decision} (${verdict.reason}): ${verdict.detail}`);
      // A gate that failed says why in its own output: that is where to look before changing anything.
      const why = verdict.decision === "rejected" ? failureLine(candidate) : null;
      if (why) lines.push(`      ${why}`);
    }
  }
  if (state.contract.stop.budget?.cost_usd !== undefined || state.cost_usd > 0) {
    lines.push(
      `  reported cost: $${state.cost_usd.toFixed(2)}${state.contract.stop.budget?.cost_usd !== undefined ? ` of $${state.contract.stop.budget.cost_usd.toFixed(2)}` : ""}`,
    );
  }
  let retry: string = advice.retry;
  let next = advice.next;
  if (reason === "max_iterations_reached") {
    retry = stillImproving ? "raise_limit" : "do_not_retry";
    next = stillImproving
      ? "it was still improving: raise stop.max_iterations and run a new loop from the best commit"
      : "it had stalled: do not just raise the limit; change the agent's instructions or the approach";
  } else if (reason === "budget_exceeded") {
    next = "raise stop.budget if the progress so far is worth it, and run a new loop from the best commit";
  }
  // A loop that stopped on gate failures: their output says why before any instruction is changed.
  const last = recent.at(-1);
  const gateFailure = last?.verdict?.decision === "rejected" ? failureOf(last).gate : null;
  if (last && gateFailure && retry !== "done") next = `read why gate ${gateFailure.name} failed first (loopwarden logs ${last.candidate_id}); then ${next}`;
  lines.push("", `what next: ${next}`);
  return { lines, retry };
}
