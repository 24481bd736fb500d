/** Exit classes of DESIGN §7, by halt reason. The reason string is the stable contract; the code is its class. */
export const HALT_EXIT_CODES = {
  success_condition_met: 10,
  human_required: 11,
  no_actionable_tasks: 11,
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
