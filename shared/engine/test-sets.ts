import type { Contract, Gate } from "../wire/contract.js";
import type { DeltaTests, FullObservation, FullTests, GateResult, Observation } from "../wire/observation.js";
import { isDeltaTests } from "../wire/observation.js";
import { sha256Hex } from "../hash.js";
import { containsSorted, isStrictlyAscending, mergeSorted, sortedDifference } from "../sorted-ids.js";
import { formatList } from "../format-list.js";

// Test sets at the size of real suites (DESIGN §4 invariant 9, §8). t0's collected set is stored once
// and named by its digest; every later observation is a difference from it (what was added or removed,
// what failed or was skipped), and the engine compares candidates through that difference. So a
// decision on a 100,000-test suite costs what differs from t0, never the suite, and no comparison is
// `includes` in a loop: every set operation here is a hash-set pass.

/** The test id a gate's own outcome is recorded under: every gate is also one test (DESIGN §5). */
export function gateTestId(gateName: string): string {
  return `gate:${gateName}`;
}

/** The test id of a task of a task_list loop: done when its own check passes. */
export function taskTestId(taskId: string): string {
  return `task:${taskId}`;
}

/** Whether a test id is derived by the engine (a gate's or a task's own outcome) rather than reported. */
export function isDerivedTestId(id: string): boolean {
  return id.startsWith("gate:") || id.startsWith("task:");
}

/** Whether a gate passed: a hard gate by exit code, a soft gate by its threshold (DESIGN §5). */
export function gatePassed(gate: Gate, result: GateResult | undefined): boolean {
  if (!result || result.timed_out || result.report_error !== undefined) return false;
  if (!gate.soft) return result.exit_code === 0;
  const value = result.metrics?.[gate.soft.metric];
  if (value === undefined) return false;
  return (gate.soft.max === undefined || value <= gate.soft.max) && (gate.soft.min === undefined || value >= gate.soft.min);
}

/**
 * The derived tests of an observation: one per contract gate from its observed outcome (`gatePassed`;
 * a gate missing from the observation, not run after an earlier failure, fails) and, in task_list
 * mode, one per task. Always derived here, never taken from the report, so a report cannot call a red
 * gate green.
 */
function derivedOutcomes(contract: Contract, observation: Pick<Observation, "gates" | "tasks">): { passing: string[]; failing: string[] } {
  const passing: string[] = [];
  const failing: string[] = [];
  for (const gate of contract.gates) {
    const result = observation.gates.find((candidate) => candidate.name === gate.name);
    (gatePassed(gate, result) ? passing : failing).push(gateTestId(gate.name));
  }
  // task_list mode: a task is done only when its own check passes (DESIGN §5).
  for (const task of contract.tasks ?? []) {
    const result = observation.tasks?.find((candidate) => candidate.name === task.id);
    const done = result !== undefined && result.exit_code === 0 && !result.timed_out;
    (done ? passing : failing).push(taskTestId(task.id));
  }
  return { passing, failing };
}

/** Passing and failing test ids in full, each sorted and unique: what one run of the gates says. */
export interface TestSets {
  passing: string[];
  failing: string[];
}

/** Every id of test sets with its outcome, failing winning over passing: one pass, for linear comparisons. */
export function outcomesOf(sets: TestSets): Map<string, "passed" | "failed"> {
  const outcomes = new Map<string, "passed" | "failed">();
  for (const id of sets.passing) outcomes.set(id, "passed");
  for (const id of sets.failing) outcomes.set(id, "failed");
  return outcomes;
}

/**
 * The test sets of one run in full (repeated runs of one commit compare these, DESIGN §6.5): the
 * reported test ids plus the derived gate and task tests, sorted and de-duplicated.
 */
export function testSetsOf(contract: Contract, observation: FullObservation): TestSets {
  const passing = new Set(observation.tests.passing.filter((id) => !isDerivedTestId(id)));
  const failing = new Set(observation.tests.failing.filter((id) => !isDerivedTestId(id)));
  const derived = derivedOutcomes(contract, observation);
  for (const id of derived.passing) passing.add(id);
  for (const id of derived.failing) failing.add(id);
  return { passing: [...passing].sort(), failing: [...failing].sort() };
}

/** A test set stored once and named by its digest: t0's collected set, which every later report differs from. */
export interface TestBase {
  digest: string;
  /** Sorted and unique. */
  ids: readonly string[];
}

/**
 * Whether the base collects `id`: a binary search of its sorted ids. Every lookup is of an id a difference
 * names, so a hash set of the whole suite (40 ms to build for 100,000 ids, most of a large creation's
 * fold, issue 30) would cost more than all of them. A function beside the base rather than a method of
 * it: the base is part of the loop's state, plain data that can be cloned and compared.
 */
export function inBase(base: TestBase, id: string): boolean {
  return containsSorted(base.ids, id);
}

/** The digest that names a test set: sha256 of the JSON array of its ids, sorted (UTF-16 order) and unique. */
export function testSetDigest(sortedIds: readonly string[]): string {
  return sha256Hex(JSON.stringify(sortedIds));
}

const sortedUnique = (ids: Iterable<string>): string[] => [...new Set(ids)].sort();

/**
 * Bases already computed, by the outcomes they were computed from. A loop's creation folds its
 * `loop_created` event twice (the engine, to see whether it halts at once, then the store that appends
 * it), and sorting and hashing a 100,000-id suite took 250 ms each time. Events are never changed once
 * made, so the same outcomes always give the same base; held weakly, so nothing outlives its event.
 */
const bases = new WeakMap<FullTests, TestBase>();

/** The collected set of full test outcomes (every reported id whatever its outcome, derived ids excluded), as a base. */
export function testBaseOf(tests: FullTests): TestBase {
  const known = bases.get(tests);
  if (known) return known;
  const lists = [tests.passing, tests.failing, tests.skipped ?? []];
  const collected = sortedIdsOf(lists).filter((id) => !isDerivedTestId(id));
  const base = { digest: testSetDigest(collected), ids: collected };
  bases.set(tests, base);
  return base;
}

/** The ids of several lists, sorted and unique: merged when each is sorted, as the runner sends them (a sort takes 150-200 ms for 100,000 ids). */
function sortedIdsOf(lists: readonly (readonly string[])[]): readonly string[] {
  return lists.every(isStrictlyAscending) ? mergeSorted(lists) : [...new Set(lists.flat())].sort();
}

/** Which of `ids` ran (are passing or failing): one pass over the outcomes, with a set of `ids` alone, however large the suite. */
export function ranAmong(tests: { passing: readonly string[]; failing: readonly string[] }, ids: readonly string[]): Set<string> {
  const ran = new Set<string>();
  if (ids.length === 0) return ran;
  const wanted = new Set(ids);
  for (const list of [tests.passing, tests.failing]) for (const id of list) if (wanted.has(id)) ran.add(id);
  return ran;
}

/**
 * Full test outcomes as a difference from a base (DESIGN §8): what a runner reports. Linear in the
 * suite; derived ids are dropped (the engine derives them). A test both run and skipped counts as run.
 */
export function compactTests(tests: FullTests, base: TestBase): DeltaTests {
  if (bases.get(tests) === base) {
    // The base was made of these very outcomes (t0's standing): nothing is added or removed, and only the
    // short lists are sorted. A 100,000-test creation spent 100 ms here building sets of the whole suite.
    const skipped = (tests.skipped ?? []).filter((id) => !isDerivedTestId(id));
    const ran = ranAmong(tests, skipped);
    return {
      base: base.digest,
      added: [],
      removed: [],
      failing: sortedUnique(tests.failing.filter((id) => !isDerivedTestId(id))),
      skipped: sortedUnique(skipped.filter((id) => !ran.has(id))),
    };
  }
  const skippedIds = (tests.skipped ?? []).filter((id) => !isDerivedTestId(id));
  const ran = ranAmong(tests, skippedIds);
  // Both sides sorted: what was added and removed is one walk of the two, with no set of the suite.
  const collected = sortedIdsOf([tests.passing, tests.failing, skippedIds]).filter((id) => !isDerivedTestId(id));
  const { onlyA: added, onlyB: removed } = sortedDifference(collected, base.ids);
  return {
    base: base.digest,
    added,
    removed,
    failing: sortedUnique(tests.failing.filter((id) => !isDerivedTestId(id))),
    skipped: sortedUnique(skippedIds.filter((id) => !ran.has(id))),
  };
}

/**
 * Why a reported difference cannot be read against the loop's base, or null: it differs from another
 * set, adds what the base has, removes what it lacks, or names as failing or skipped a test it does not
 * collect. Linear in the difference.
 */
export function deltaProblem(tests: DeltaTests, base: TestBase): string | null {
  if (tests.base !== base.digest) {
    return `the tests are a difference from test set ${tests.base.slice(0, 12)}, not from this loop's t0 collected set ${base.digest.slice(0, 12)}`;
  }
  const alreadyThere = tests.added.filter((id) => inBase(base, id));
  if (alreadyThere.length > 0) return `${alreadyThere.length} added test(s) are already in t0's collected set: ${formatList(alreadyThere)}`;
  const unknown = tests.removed.filter((id) => !inBase(base, id));
  if (unknown.length > 0) return `${unknown.length} removed test(s) are not in t0's collected set: ${formatList(unknown)}`;
  const removed = new Set(tests.removed);
  const added = new Set(tests.added);
  const collected = (id: string) => added.has(id) || (inBase(base, id) && !removed.has(id));
  const stray = sortedUnique([...tests.failing, ...tests.skipped].filter((id) => !isDerivedTestId(id) && !collected(id)));
  if (stray.length > 0) return `${stray.length} failing or skipped test(s) are not collected: ${formatList(stray)}`;
  return null;
}

/** A difference from the base as sets of reported ids (derived ids dropped): what every comparison reads. */
interface Difference {
  added: Set<string>;
  removed: Set<string>;
  failing: Set<string>;
  /** Not run; a test also failing counts as failing. */
  skipped: Set<string>;
}

/** Test outcomes in either form as a difference from the base. Total: a difference that does not fit the base is read as far as it does. */
function differenceOf(tests: FullTests | DeltaTests, base: TestBase): Difference {
  const delta = isDeltaTests(tests) ? tests : compactTests(tests, base);
  const reported = (ids: readonly string[]) => new Set(ids.filter((id) => !isDerivedTestId(id)));
  const failing = reported(delta.failing);
  return {
    added: new Set(delta.added.filter((id) => !isDerivedTestId(id) && !inBase(base, id))),
    removed: new Set(delta.removed.filter((id) => inBase(base, id))),
    failing,
    skipped: new Set(delta.skipped.filter((id) => !isDerivedTestId(id) && !failing.has(id))),
  };
}

/**
 * Where an evaluation stands against t0's collected set (the base): its failing ids and, instead of
 * its passing set in full, the base's ids that did not pass and the ids outside the base that did. So
 * a candidate's standing is as large as what differs from t0, and every comparison is linear in that.
 */
export interface TestStanding {
  /** Every failing id, gates and tasks included, sorted. */
  failing: string[];
  /** Ids of the base that did not pass here (failed, skipped, or not collected), sorted. */
  base_not_passing: string[];
  /** Ids outside the base that passed here (added tests, gates, tasks), sorted. */
  extra_passing: string[];
  passing_count: number;
}

/** The standing of an observation (tests in either form) against the base, with its derived gate and task tests. */
export function standingOf(contract: Contract, observation: Observation, base: TestBase): TestStanding {
  const difference = differenceOf(observation.tests, base);
  const derived = derivedOutcomes(contract, observation);
  const failing = new Set([...difference.failing, ...derived.failing]);
  const notPassing = new Set<string>();
  for (const ids of [difference.failing, difference.skipped, difference.removed]) {
    for (const id of ids) if (inBase(base, id)) notPassing.add(id);
  }
  const extra = [...difference.added].filter((id) => !failing.has(id) && !difference.skipped.has(id));
  for (const id of derived.passing) if (!failing.has(id)) extra.push(id);
  const extraPassing = sortedUnique(extra);
  return {
    failing: [...failing].sort(),
    base_not_passing: [...notPassing].sort(),
    extra_passing: extraPassing,
    passing_count: base.ids.length - notPassing.size + extraPassing.length,
  };
}

/** An id's outcome in a standing: passed, failed, or neither (skipped or not collected). */
type Outcome = "passed" | "failed" | "absent";

/** A standing's outcome of any id, from hash sets of its lists (built once per comparison, linear in them). */
function outcomeReader(standing: TestStanding, base: TestBase): (id: string) => Outcome {
  const failing = new Set(standing.failing);
  const notPassing = new Set(standing.base_not_passing);
  const extra = new Set(standing.extra_passing);
  return (id) => {
    if (failing.has(id)) return "failed";
    const passed = inBase(base, id) ? !notPassing.has(id) : extra.has(id);
    return passed ? "passed" : "absent";
  };
}

/** The ids a standing says anything particular about: outside them, an id of the base passed and any other id was absent. */
const particularIds = (standing: TestStanding) => [...standing.failing, ...standing.base_not_passing, ...standing.extra_passing];

/** Ids that passed in `before` and do not pass in `after`, sorted. Linear in what either differs from the base. */
export function regressedTests(before: TestStanding, after: TestStanding, base: TestBase): string[] {
  const was = outcomeReader(before, base);
  const now = outcomeReader(after, base);
  return sortedUnique([...particularIds(before), ...particularIds(after)].filter((id) => was(id) === "passed" && now(id) !== "passed"));
}

/** Ids whose outcome (passed, failed, or neither) differs between two standings, sorted. Linear as `regressedTests`. */
export function changedOutcomes(a: TestStanding, b: TestStanding, base: TestBase): string[] {
  const first = outcomeReader(a, base);
  const second = outcomeReader(b, base);
  return sortedUnique([...particularIds(a), ...particularIds(b)].filter((id) => first(id) !== second(id)));
}

/**
 * How the collected set of an observation shrank against the base, for the guard (DESIGN §6.4): tests
 * of the base run by t0 that are skipped now, tests of the base no longer collected, and the count.
 * Linear in the difference.
 */
export function shrinkageOf(
  observation: Observation,
  base: TestBase,
  t0Skipped: ReadonlySet<string>,
): { nowSkipped: string[]; missing: string[]; collected: number } {
  const difference = differenceOf(observation.tests, base);
  const nowSkipped = [...difference.skipped].filter((id) => inBase(base, id) && !t0Skipped.has(id) && !difference.removed.has(id)).sort();
  return {
    nowSkipped,
    missing: [...difference.removed].sort(),
    collected: base.ids.length - difference.removed.size + difference.added.size,
  };
}

/** How many reported tests (gates and tasks left out) passed and failed in a standing: what the gates' own reports counted. */
export function reportedCounts(standing: TestStanding): { passing: number; failing: number } {
  const derivedPassing = standing.extra_passing.filter(isDerivedTestId).length;
  return {
    passing: standing.passing_count - derivedPassing,
    failing: standing.failing.filter((id) => !isDerivedTestId(id)).length,
  };
}

/**
 * What identifies an observation's reported test outcomes, for comparing a re-run of the same commit
 * (`replay`): the digests (`testSetDigest`) of its collected set and of its failing set, with their sizes.
 */
export function testFingerprint(
  observation: Observation,
  base: TestBase,
): { collected: string; failing: string; collected_count: number; failing_count: number } {
  const difference = differenceOf(observation.tests, base);
  const collected = sortedUnique([...base.ids.filter((id) => !difference.removed.has(id)), ...difference.added]);
  const failing = [...difference.failing].sort();
  return { collected: testSetDigest(collected), failing: testSetDigest(failing), collected_count: collected.length, failing_count: failing.length };
}
