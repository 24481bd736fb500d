import { monitorLowerBound } from "../determinism/flake-rate.js";
import { formatList } from "../format-list.js";
import { formatPercent } from "../format-percent.js";
import { DEFAULT_MAX_FLAKE_RATE, percentValue, type Contract } from "../wire/contract.js";
import type { DoctorRecord } from "../wire/doctor.js";
import { exitCodeFor, type HaltReason } from "../wire/halt-reasons.js";
import type { Halt } from "../wire/event-parts.js";

// The check's trustworthiness as the engine keeps it (DESIGN §6.5): the precondition measured at t0
// (`doctorHalt`), then every run whose outcome was known — a tree evaluated again, a re-run of a best —
// as one Bernoulli sample of a flake monitor that halts `check_flaky` once the runs show the check
// flakier than the contract's `determinism.max_flake_rate`. Pure: the fold and `decide` call these.

/** The most distinct flipped ids the monitor keeps as evidence (the counts cover them all). */
export const MAX_MONITORED_FLIPS = 100;
/** The most runs named per flipped id. */
const MAX_RUNS_PER_FLIP = 10;

/** One run whose outcome was known and what it flipped: named for people (`c4, a re-run of c2's tree`). */
export interface FlakeSample {
  run: string;
  /** Ids whose outcome differed from the known one, sorted; empty when the run agreed. */
  changed: readonly string[];
}

/** The flake monitor of a loop: how many runs had a known outcome, how many deviated, and what flipped where. */
export interface FlakeMonitor {
  samples: number;
  deviations: number;
  /** Flipped ids (at most MAX_MONITORED_FLIPS), each with how often and in which runs (the first few). */
  flips: Record<string, { count: number; runs: string[] }>;
  /** Flipped ids left out of `flips` for room. */
  flips_untracked: number;
}

/** The flake rate the contract holds its check to (`determinism.max_flake_rate`, default 1%), as a fraction. */
export function maxFlakeRate(contract: Contract): number {
  return percentValue(contract.determinism?.max_flake_rate ?? DEFAULT_MAX_FLAKE_RATE);
}

/**
 * The monitor a new loop starts with: the precondition's runs after t0's are its first samples (each was
 * compared with t0's run), and a skipped precondition starts it empty. Null for a log from before the
 * precondition existed: such loops keep their rule, that any flip halts.
 */
export function monitorAtCreation(doctor: DoctorRecord | undefined): FlakeMonitor | null {
  if (!doctor) return null;
  const monitor: FlakeMonitor = { samples: 0, deviations: 0, flips: {}, flips_untracked: 0 };
  if (doctor.status === "skipped") return monitor;
  const deviating = new Map(doctor.deviations.map((deviation) => [deviation.run, deviation.tests]));
  let after = monitor;
  for (let run = 2; run <= doctor.runs; run++) after = withSample(after, { run: `doctor run ${run}`, changed: deviating.get(run) ?? [] });
  return after;
}

/** The monitor with one more sample: a new object, its `flips` copied (it is bounded), the input left as it was. */
export function withSample(monitor: FlakeMonitor, sample: FlakeSample): FlakeMonitor {
  if (sample.changed.length === 0) return { ...monitor, samples: monitor.samples + 1 };
  const flips = { ...monitor.flips };
  let untracked = monitor.flips_untracked;
  for (const id of sample.changed) {
    const known = flips[id];
    if (known) flips[id] = { count: known.count + 1, runs: known.runs.length < MAX_RUNS_PER_FLIP ? [...known.runs, sample.run] : known.runs };
    else if (Object.keys(flips).length < MAX_MONITORED_FLIPS) flips[id] = { count: 1, runs: [sample.run] };
    else untracked++;
  }
  return { samples: monitor.samples + 1, deviations: monitor.deviations + 1, flips, flips_untracked: untracked };
}

function halt(reason: HaltReason, detail: string): Halt {
  return { halt_reason: reason, exit_class: exitCodeFor(reason), detail };
}

/** The flipped ids of a monitor, most often first, e.g. `gate:unit 3× (c2 re-run, recheck of c3 at iteration 5)`. */
export function describeFlips(monitor: FlakeMonitor, limit = 5): string {
  const entries = Object.entries(monitor.flips).sort(([a, x], [b, y]) => y.count - x.count || (a < b ? -1 : 1));
  const named = entries.slice(0, limit).map(([id, flip]) => `${id} ${flip.count}× (${flip.runs.join(", ")})`);
  const more = entries.length - named.length + monitor.flips_untracked;
  return named.join("; ") + (more > 0 ? `; and ${more} more` : "");
}

/**
 * The monitor's halt: once its runs show the check flakier than `determinism.max_flake_rate` — the lower
 * bound at this look (`monitorLowerBound`) above it — the loop halts `check_flaky` with the evidence,
 * before another verdict can rest on the check. Null while the bound stays at or below the target.
 */
export function monitorHalt(contract: Contract, monitor: FlakeMonitor | null): Halt | null {
  if (!monitor || monitor.deviations === 0) return null;
  const target = maxFlakeRate(contract);
  const bound = monitorLowerBound(monitor.deviations, monitor.samples);
  if (bound <= target) return null;
  return halt(
    "check_flaky",
    `${monitor.deviations} of ${monitor.samples} run(s) whose outcome was known gave other outcomes: the flake rate is at least ${formatPercent(bound)}, above determinism.max_flake_rate ${formatPercent(target)} (95% over every look); flipped: ${describeFlips(monitor)}`,
  );
}

/**
 * What the precondition's record says of a new loop (DESIGN §6.5), before anything else at creation: a
 * task without a check of its own, runs in fresh clones that disagreed with t0's, a re-run in the same
 * clone that changed an outcome, or a mutation that turned nothing red of what passed at t0 — each halts
 * the loop before its first agent run. A skipped precondition decides nothing but the tasks.
 */
export function doctorHalt(contract: Contract, doctor: DoctorRecord | undefined): Halt | null {
  const unchecked = (contract.tasks ?? []).filter((task) => task.check === undefined).map((task) => task.id);
  if (unchecked.length > 0) {
    return halt(
      "check_inadequate",
      `task${unchecked.length === 1 ? "" : "s"} ${formatList(unchecked)} ha${unchecked.length === 1 ? "s" : "ve"} no check of its own: nothing could ever say ${unchecked.length === 1 ? "it is" : "they are"} done (give each task a check)`,
    );
  }
  if (!doctor || doctor.status === "skipped") return null;
  if (doctor.deviations.length > 0) {
    const first = doctor.deviations[0];
    const ids = first ? `${formatList(first.tests)}${first.count > first.tests.length ? ` (${first.count} in all)` : ""}` : "";
    return halt(
      "check_flaky",
      `the precondition: ${doctor.deviations.length} of ${doctor.runs - 1} run(s) in fresh clones gave other outcomes than t0's (run ${doctor.deviations.map((deviation) => deviation.run).join(", ")}; run ${first?.run ?? ""} flipped ${ids})`,
    );
  }
  if (doctor.rerun.count > 0) {
    return halt(
      "check_has_side_effects",
      `the precondition: a second run of the gates in the same clone changed ${formatList(doctor.rerun.changed)}${doctor.rerun.count > doctor.rerun.changed.length ? ` (${doctor.rerun.count} in all)` : ""}: they leave state behind that changes their next run`,
    );
  }
  const mutation = doctor.mutation;
  if (mutation && mutation.passing_at_t0 > 0 && mutation.red_count === 0) {
    return halt(
      "check_inadequate",
      `the precondition: the gates stayed green on the mutated tree (\`${mutation.command}\` changed ${mutation.changed_paths} path(s); all ${mutation.passing_at_t0} passing id(s) still passed): the check cannot tell a broken change from a good one`,
    );
  }
  return null;
}

/**
 * Why a creation's precondition record does not fit its contract, or null: a measured record must have
 * run the contract's mutation when it names one (and no other), and a skipped one is always accepted.
 */
export function doctorRecordProblem(contract: Contract, doctor: DoctorRecord | undefined): string | null {
  if (!doctor || doctor.status === "skipped") return null;
  const wanted = contract.doctor?.mutate;
  if (wanted !== undefined && doctor.mutation?.command !== wanted)
    return `the contract's doctor.mutate is \`${wanted}\`, and the record ran ${doctor.mutation ? `\`${doctor.mutation.command}\`` : "no mutation"}`;
  if (wanted === undefined && doctor.mutation) return "the record ran a mutation the contract does not name (doctor.mutate)";
  if (doctor.deviations.some((deviation) => deviation.run > doctor.runs)) return "a deviation names a run beyond the record's runs";
  return null;
}

/** Iterations between re-runs of the best when the contract says nothing and t0's gates took at most RECHECK_FAST_CHECK_MS. */
export const DEFAULT_RECHECK_EVERY = 5;
/** The longest check (t0's gates and tasks, in all) that is re-run by default: a slower one only when the contract asks. */
export const RECHECK_FAST_CHECK_MS = 60_000;

/**
 * Every how many iterations the best's gates are re-run (`determinism.recheck_every`), or null for never:
 * `off`, or, by default, a check slower than a minute at t0.
 */
export function recheckEvery(contract: Contract, t0CheckMs: number): number | null {
  const every = contract.determinism?.recheck_every;
  if (every === "off") return null;
  if (every !== undefined) return every;
  return t0CheckMs <= RECHECK_FAST_CHECK_MS ? DEFAULT_RECHECK_EVERY : null;
}
