/** Exit classes of DESIGN §7, by halt reason. The reason string is the stable contract; the code is its class. */
export const HALT_EXIT_CODES = {
  success_condition_met: 10,
  human_required: 11,
  no_actionable_tasks: 11,
  cancelled: 11,
  context_budget_unsatisfiable: 11,
  max_iterations_reached: 12,
  blocked_path_modified: 13,
  metric_integrity_violation: 13,
  objective_unverified: 13,
  check_flaky: 14,
  check_has_side_effects: 14,
  check_inadequate: 15,
  escalation_pending: 16,
  no_progress_detected: 17,
  oscillation_detected: 17,
  unsatisfiable_constraints: 17,
  budget_exceeded: 18,
  heartbeat_stale: 19,
  workspace_invalid: 30,
  execution_failure: 40,
  internal_error: 50,
} as const;

/** A halt reason of DESIGN §7. */
export type HaltReason = keyof typeof HALT_EXIT_CODES;

/** All halt reasons, for schemas. */
export const HALT_REASONS = Object.keys(HALT_EXIT_CODES) as [HaltReason, ...HaltReason[]];

/** The process exit code of a halt reason's class. */
export function exitCodeFor(reason: HaltReason): number {
  return HALT_EXIT_CODES[reason];
}

/** What each halt means, in plain words (for `explain` and the receipt page). */
export const HALT_MEANINGS: Record<HaltReason, string> = {
  success_condition_met: "every gate passes on the best candidate",
  human_required:
    "the loop needs a person's decision: a candidate asked to change protected files and nobody answered (`loopwarden review`) within stop.review_timeout",
  no_actionable_tasks: "no task is left that the agent can act on",
  cancelled: "a person cancelled the loop (`loopwarden cancel`, or the API): nothing is decided after it",
  context_budget_unsatisfiable:
    "the agent's context could not fit agent.context.budget even at its first tier (the failing tests' output and the files their stack traces name): the agent was not run",
  max_iterations_reached: "the loop used all its iterations",
  blocked_path_modified: "a candidate changed a path outside the scope, or a protected file (a test, the contract, CI or a lockfile)",
  metric_integrity_violation: "a candidate weakened the measurement: tests disappeared, or coverage fell",
  objective_unverified: "the outcome could not be verified",
  check_flaky:
    "the check gave other outcomes for a tree it had measured (in the precondition, in the loop, or re-running the best): it is not deterministic, or what it depends on changed",
  check_has_side_effects: "the check changes its own outcome when re-run in the same place",
  check_inadequate: "the check cannot tell a broken change from a good one (it stayed green on a mutated tree, or a task has no check)",
  escalation_pending: "a judgment is pending",
  no_progress_detected: "no candidate was promoted for `stop.no_progress` iterations in a row",
  oscillation_detected: "candidates keep breaking a test that already passes",
  unsatisfiable_constraints: "fixing one test always broke another: the two may be mutually exclusive",
  budget_exceeded: "the cost or wall-time budget ran out",
  heartbeat_stale: "the runner stopped reporting",
  workspace_invalid: "the candidate's contract differs from the pinned one",
  execution_failure: "the agent command kept failing",
  internal_error: "the coordinator failed",
};
