import { outcomesOf, type TestSets } from "../engine/test-sets.js";

// Comparing repeated runs of the gates on one commit (DESIGN §6.5). A run's outcome is the test sets
// the engine judges by (`testSetsOf`: reported test ids plus one `gate:<name>` test per gate), so a
// flip here is exactly a difference the engine would see between two evaluations of the same commit.

/** What one run said of one test id: passed, failed, or did not report it at all. */
export type TestOutcome = "passed" | "failed" | "missing";

/** A test id whose outcome was not the same in every run, with the runs (numbered from 1) of each outcome. */
export interface FlippingTest {
  id: string;
  consensus: TestOutcome;
  passed: number[];
  failed: number[];
  missing: number[];
}

/** How repeated runs of one commit compare. */
export interface RunComparison {
  runs: number;
  /** Runs in which at least one test id's outcome differed from that id's consensus outcome. */
  failures: number;
  /** The runs (numbered from 1) counted in `failures`. */
  deviating_runs: number[];
  /** Ids with more than one outcome across the runs, sorted. */
  flipping: FlippingTest[];
  /** The consensus outcome of every id seen in any run. */
  consensus: Record<string, TestOutcome>;
}

/**
 * A run's outcome of any id (failing wins over passing, as in the engine's test sets), read from one
 * map built once: asking about every id of a 100,000-test run stays linear.
 */
export function outcomeReader(run: TestSets): (id: string) => TestOutcome {
  const outcomes = outcomesOf(run);
  return (id) => outcomes.get(id) ?? "missing";
}

/**
 * Compares runs of one commit. Every id seen in any run has a consensus outcome: the one most runs
 * had, a tie going to the outcome of the earliest of the tied runs. A run deviates when any id's
 * outcome in it differs from that id's consensus (a test that a run did not report counts as
 * `missing`, itself an outcome); `failures` counts deviating runs, and an id flips when its outcome
 * was not the same in every run. So failures is 0 exactly when nothing flipped.
 */
export function compareRuns(runs: readonly TestSets[]): RunComparison {
  // One outcome map per run, so the comparison is linear in the runs' sizes (ids sorted once).
  const byRun = runs.map(outcomesOf);
  const ids = [...new Set(byRun.flatMap((outcomes) => [...outcomes.keys()]))].sort();
  const consensus: Record<string, TestOutcome> = {};
  const flipping: FlippingTest[] = [];
  const deviating = new Set<number>();
  for (const id of ids) {
    const outcomes = byRun.map((run) => run.get(id) ?? "missing");
    const counts = new Map<TestOutcome, number>();
    for (const outcome of outcomes) counts.set(outcome, (counts.get(outcome) ?? 0) + 1);
    // Iterating in run order, a strictly greater count is needed to displace an earlier outcome.
    let chosen: TestOutcome = outcomes[0] ?? "missing";
    for (const outcome of outcomes) if ((counts.get(outcome) ?? 0) > (counts.get(chosen) ?? 0)) chosen = outcome;
    consensus[id] = chosen;
    if (counts.size > 1) {
      const runsWith = (wanted: TestOutcome) => outcomes.flatMap((outcome, index) => (outcome === wanted ? [index + 1] : []));
      flipping.push({ id, consensus: chosen, passed: runsWith("passed"), failed: runsWith("failed"), missing: runsWith("missing") });
      outcomes.forEach((outcome, index) => {
        if (outcome !== chosen) deviating.add(index + 1);
      });
    }
  }
  const deviatingRuns = [...deviating].sort((a, b) => a - b);
  return { runs: runs.length, failures: deviatingRuns.length, deviating_runs: deviatingRuns, flipping, consensus };
}

/** Ids whose outcome differs between two runs (e.g. a run and its rerun in the same clone), sorted. */
export function changedTests(before: TestSets, after: TestSets): { id: string; before: TestOutcome; after: TestOutcome }[] {
  const was = outcomesOf(before);
  const now = outcomesOf(after);
  const ids = [...new Set([...was.keys(), ...now.keys()])].sort();
  return ids
    .map((id): { id: string; before: TestOutcome; after: TestOutcome } => ({ id, before: was.get(id) ?? "missing", after: now.get(id) ?? "missing" }))
    .filter((change) => change.before !== change.after);
}
