/** The test ids of one report by outcome: each list sorted, without duplicates, and no id in two lists. */
export interface TestReport {
  passing: string[];
  failing: string[];
  skipped: string[];
}

/** The outcome of one test as a report states it. */
export type TestOutcome = "passing" | "failing" | "skipped";

// When a report names the same id twice (retries, two files declaring the same test, tools that
// flatten nested suites), the worst outcome stands: a failure is never hidden by a pass elsewhere,
// and a test that ran beats one that was skipped.
const RANK: Record<TestOutcome, number> = { skipped: 0, passing: 1, failing: 2 };

/** Folds `[id, outcome]` pairs, ids possibly repeated, into a TestReport where failing > passing > skipped. */
export function buildTestReport(outcomes: Iterable<readonly [string, TestOutcome]>): TestReport {
  const byId = new Map<string, TestOutcome>();
  for (const [id, outcome] of outcomes) {
    const seen = byId.get(id);
    if (seen === undefined || RANK[outcome] > RANK[seen]) byId.set(id, outcome);
  }
  const report: TestReport = { passing: [], failing: [], skipped: [] };
  for (const [id, outcome] of byId) report[outcome].push(id);
  // Code-unit order, not localeCompare: the order must not depend on the ICU data of the machine,
  // because these lists are hashed into observations that two runners must agree on.
  report.passing.sort();
  report.failing.sort();
  report.skipped.sort();
  return report;
}
