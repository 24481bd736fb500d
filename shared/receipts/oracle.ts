import * as z from "zod";
import { formatPercent } from "../format-percent.js";
import { maxFlakeRate } from "../engine/flake-monitor.js";
import type { LoopState } from "../engine/state-types.js";

// What a receipt says of the loop's check (DESIGN §6.5, §9): whether its precondition was measured or
// skipped, and what the flake monitor saw over the loop, with one sentence a person reads beside the
// verdict. A function of the log, so a verifier recomputes it like every other figure of the predicate.

const Count = z.number().int().min(0);

/** The check's trustworthiness, as a receipt attests it. */
export const OracleAttestation = z.strictObject({
  /** `measured` before the first agent run; `skipped` by `--skip-doctor`; `not_recorded` by a creator that sent no record. */
  precondition: z.enum(["measured", "skipped", "not_recorded"]),
  /** Runs of the gates in fresh clones the precondition made, t0's included; null unless measured. */
  precondition_runs: Count.nullable(),
  /** The mutation the precondition ran (`doctor.mutate`), null when none. */
  mutation: z.string().nullable(),
  /** The flake monitor: runs whose outcome was known, how many deviated, and the target; null without a monitor. */
  monitor: z.strictObject({ samples: Count, deviations: Count, max_flake_rate: z.number() }).nullable(),
  /** The same in one sentence. */
  summary: z.string(),
});
export type OracleAttestation = z.infer<typeof OracleAttestation>;

/** What the receipt says of a loop's check, from its folded state. */
export function oracleAttestation(state: LoopState): OracleAttestation {
  const doctor = state.doctor;
  const target = maxFlakeRate(state.contract);
  const monitor = state.monitor ? { samples: state.monitor.samples, deviations: state.monitor.deviations, max_flake_rate: target } : null;
  const watched = monitor
    ? `; in the loop, ${monitor.deviations} of ${monitor.samples} run(s) whose outcome was known deviated (held to ${formatPercent(target)})`
    : "";
  if (!doctor) {
    return {
      precondition: "not_recorded",
      precondition_runs: null,
      mutation: null,
      monitor,
      summary: "precondition not recorded: the loop's creator sent no record of its check, which any flip halts",
    };
  }
  if (doctor.status === "skipped") {
    return {
      precondition: "skipped",
      precondition_runs: null,
      mutation: null,
      monitor,
      summary: `precondition skipped (--skip-doctor): the check was not re-run before the first agent run${watched}`,
    };
  }
  const mutation = doctor.mutation
    ? `, and \`${doctor.mutation.command}\` turned ${doctor.mutation.red_count} of ${doctor.mutation.passing_at_t0} passing id(s) red`
    : "";
  return {
    precondition: "measured",
    precondition_runs: doctor.runs,
    mutation: doctor.mutation?.command ?? null,
    monitor,
    summary: `precondition: ${doctor.runs} run(s) in fresh clones with ${doctor.deviations.length} deviating, a re-run in one clone changing ${doctor.rerun.count}${mutation}${doctor.cached_from ? ` (measured ${doctor.cached_from})` : ""}${watched}`,
  };
}
