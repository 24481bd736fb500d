import type { Contract } from "../wire/contract.js";
import type { FullObservation, GuardReadings, Observation } from "../wire/observation.js";
import type { HaltReason } from "../wire/halt-reasons.js";
import { formatList } from "../format-list.js";
import { outOfScope } from "./scope.js";
import { isDerivedTestId, ranAmong, shrinkageOf, type TestBase } from "./test-sets.js";

// Guards (DESIGN §6.4), checked against t0 before any success or promotion can fire (invariant 2).
// The runner measures (file hashes, collected tests, coverage, the contract file); the engine compares.

/**
 * The default protected set (DESIGN §6.4), by what it protects: an agent optimises whatever the oracle
 * rewards, so the tests, everything that decides which tests run and how (the harness, the manifests
 * that define test scripts and dependencies, the lockfiles) and CI are off limits unless the contract
 * names its own set. The runner adds the contract file and every tracked file a gate, metric or task
 * command names.
 */
export const DEFAULT_PROTECTED = {
  tests: ["test/**", "tests/**", "spec/**", "__tests__/**", "**/*.test.*", "**/*.spec.*", "**/*_test.*", "**/test_*.py", "**/conftest.py"],
  harness: [
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/tox.ini",
    "**/noxfile.py",
    "**/setup.cfg",
    "**/pyproject.toml",
    "**/{vitest,vite,jest,karma,playwright,cypress,ava,babel}.config.*",
    "**/vitest.workspace.*",
    "**/.mocharc*",
    "**/.nycrc*",
    "**/tsconfig*.json",
    "**/.config/nextest.toml",
  ],
  manifests: ["**/package.json", "**/Cargo.toml", "**/go.mod", "**/Makefile", "**/justfile", "**/build.gradle*", "**/pom.xml"],
  lockfiles: [
    "**/package-lock.json",
    "**/npm-shrinkwrap.json",
    "**/yarn.lock",
    "**/pnpm-lock.yaml",
    "**/bun.lockb",
    "**/bun.lock",
    "**/Cargo.lock",
    "**/go.sum",
    "**/poetry.lock",
    "**/Pipfile.lock",
    "**/uv.lock",
    "**/Gemfile.lock",
    "**/composer.lock",
  ],
  ci: [".github/**", ".ci/**"],
} as const satisfies Record<string, readonly string[]>;

/** Every glob of the default protected set, in one list. */
export const DEFAULT_PROTECTED_GLOBS: readonly string[] = Object.values(DEFAULT_PROTECTED).flat();

/** The globs whose files are protected, for a contract read from `contractFile` (null in flag-only mode). */
export function protectedGlobs(contract: Contract, contractFile: string | null): string[] {
  if (contract.guards?.protected !== undefined) return [...contract.guards.protected];
  return contractFile === null ? [...DEFAULT_PROTECTED_GLOBS] : [contractFile, ...DEFAULT_PROTECTED_GLOBS];
}

/** What the guards keep of t0 besides its collected set (the loop's test base): its commit, its readings, and which tests it only skipped. */
export interface BaselineGuards {
  /** t0's commit: what a candidate's changed paths are read against. */
  commit: string;
  guards: GuardReadings | null;
  /** t0's skipped tests (collected, not run), sorted. */
  skipped: string[];
}

/** The guard baseline of t0: its commit and observation. */
export function baselineGuards(commit: string, observation: FullObservation): BaselineGuards {
  const listed = (observation.tests.skipped ?? []).filter((id) => !isDerivedTestId(id));
  const ran = ranAmong(observation.tests, listed);
  const skipped = listed.filter((id) => !ran.has(id));
  return { commit, guards: observation.guards ?? null, skipped: [...new Set(skipped)].sort() };
}

/** A guard that an observation violates: the halt reason it maps to and what exactly was seen. */
export interface GuardViolation {
  halt_reason: Extract<HaltReason, "blocked_path_modified" | "metric_integrity_violation" | "workspace_invalid">;
  detail: string;
}

/**
 * How the candidate strays from the contract's scope, or null: the paths it changed since t0 that the
 * scope does not admit. A reading that is missing, taken against another commit than t0's, or cut short
 * (more paths changed than a reading holds) cannot show the change stays inside: it is refused as well,
 * so no candidate succeeds on a scope nobody checked.
 */
function scopeBreach(scope: readonly string[], t0Commit: string, after: GuardReadings | undefined, approved: readonly string[]): string | null {
  const changed = after?.changed_paths;
  if (!changed) return "the observation does not say which paths the candidate changed, though the contract has a scope";
  if (changed.against !== t0Commit) return `the changed paths were read against ${changed.against.slice(0, 12)}, not t0's commit ${t0Commit.slice(0, 12)}`;
  // A path a person approved the change of is admitted as it is named, outside the scope's globs too.
  const admitted = new Set(approved);
  const outside = outOfScope(scope, admitted.size === 0 ? changed.paths : changed.paths.filter((path) => !admitted.has(path)));
  if (outside.length > 0) return `changed ${outside.length} path(s) outside the scope (${formatList([...scope])}): ${formatList(outside)}`;
  if (changed.total > changed.paths.length) {
    return `changed ${changed.total} paths since t0, more than the ${changed.paths.length} a scope check reads; split the change`;
  }
  return null;
}

/**
 * What a person approved (docs/design.md §6.8): `changes`, the protected files promoted candidates changed
 * with an approval, as they left them (null: deleted); `files`, those the candidate judged now may change
 * because its own request was acknowledged.
 */
export interface Approvals {
  changes: Readonly<Record<string, string | null>>;
  files: readonly string[];
}

/** No approval: the guards hold a candidate to t0's readings. */
export const NO_APPROVALS: Approvals = { changes: {}, files: [] };

function approvedPaths(approved: Approvals): string[] {
  return [...Object.keys(approved.changes), ...approved.files];
}

/** t0's readings with the approved changes of promoted candidates in place of the files they changed. */
function approvedBaseline(before: GuardReadings, approved: Approvals): GuardReadings {
  if (Object.keys(approved.changes).length === 0 && approved.files.length === 0) return before;
  const files = { ...before.protected_files };
  for (const [file, hash] of Object.entries(approved.changes)) {
    if (hash === null) delete files[file];
    else files[file] = hash;
  }
  for (const file of approved.files) delete files[file];
  return { ...before, protected_files: files };
}

/** Readings without the files a candidate's acknowledged request lets change. */
function withoutFiles(after: GuardReadings, files: readonly string[]): GuardReadings {
  if (files.length === 0) return after;
  const kept = { ...after.protected_files };
  for (const file of files) delete kept[file];
  return { ...after, protected_files: kept };
}

function protectedChanges(before: GuardReadings, after: GuardReadings): string | null {
  const modified: string[] = [];
  const deleted: string[] = [];
  for (const [file, hash] of Object.entries(before.protected_files)) {
    const now = after.protected_files[file];
    if (now === undefined) deleted.push(file);
    else if (now !== hash) modified.push(file);
  }
  const added = Object.keys(after.protected_files).filter((file) => before.protected_files[file] === undefined);
  const parts = [
    modified.length ? `modified ${formatList(modified.sort())}` : "",
    deleted.length ? `deleted ${formatList(deleted.sort())}` : "",
    added.length ? `added ${formatList(added.sort())}` : "",
  ].filter(Boolean);
  return parts.length ? `protected files changed: ${parts.join("; ")}` : null;
}

/** Whether every gate that reports tests ran and left a readable report (else the collected set cannot be judged). */
function reportsComplete(contract: Contract, observation: Observation): boolean {
  return contract.gates
    .filter((gate) => gate.tests)
    .every((gate) => {
      const result = observation.gates.find((candidate) => candidate.name === gate.name);
      return result !== undefined && result.report_error === undefined;
    });
}

function allGatesPassed(contract: Contract, observation: Observation): boolean {
  return contract.gates.every((gate) => {
    const result = observation.gates.find((candidate) => candidate.name === gate.name);
    return result !== undefined && result.exit_code === 0 && !result.timed_out && result.report_error === undefined;
  });
}

/**
 * How the candidate's test set shrank against t0's collected set, or null (DESIGN §6.4): a test t0 ran
 * (passed or failed) that is now skipped — a skipped or deselected failure is never a fix — or one t0
 * collected that is gone, or fewer tests collected. t0's own skipped tests may stay skipped. Linear in
 * what differs from t0.
 */
function shrunkTestSet(t0: BaselineGuards, base: TestBase, observation: Observation): string | null {
  const { nowSkipped, missing, collected } = shrinkageOf(observation, base, new Set(t0.skipped));
  if (nowSkipped.length > 0) {
    return `${nowSkipped.length} test(s) that t0 ran are skipped now (a skipped test is never a fix): ${formatList(nowSkipped)}`;
  }
  if (missing.length > 0) return `${missing.length} collected test(s) disappeared: ${formatList(missing)}`;
  if (collected < base.ids.length) return `the collected test count dropped from ${base.ids.length} to ${collected}`;
  return null;
}

/**
 * The first guard an observation violates against t0, or null. In order: the scope, protected files,
 * the collected test set, coverage, the contract file. A guard that cannot be judged (its readings were not
 * taken because an earlier gate failed) is skipped: such a candidate cannot succeed anyway, because a
 * gate that did not run is a failing test.
 */
export function checkGuards(
  contract: Contract,
  t0: BaselineGuards,
  base: TestBase,
  observation: Observation,
  approved: Approvals = NO_APPROVALS,
): GuardViolation | null {
  const before = t0.guards;
  const after = observation.guards;
  if (contract.scope) {
    const breach = scopeBreach(contract.scope, t0.commit, after, approvedPaths(approved));
    if (breach) return { halt_reason: "blocked_path_modified", detail: breach };
  }
  if (before && !after) {
    return { halt_reason: "metric_integrity_violation", detail: "the observation carries no guard readings, though t0's did" };
  }
  if (before && after) {
    const changes = protectedChanges(approvedBaseline(before, approved), withoutFiles(after, approved.files));
    if (changes) return { halt_reason: "blocked_path_modified", detail: changes };
  }

  const shrinkGuard = contract.guards?.tests_never_shrink ?? true;
  if (shrinkGuard && reportsComplete(contract, observation)) {
    const shrunk = shrunkTestSet(t0, base, observation);
    if (shrunk) return { halt_reason: "metric_integrity_violation", detail: shrunk };
  }

  const coverage = contract.guards?.coverage;
  if (coverage && after) {
    const floor = coverage.floor === "t0" ? (before?.coverage_percent ?? null) : Number(coverage.floor.slice(0, -1));
    if (after.coverage_percent === null) {
      if (allGatesPassed(contract, observation)) {
        return { halt_reason: "metric_integrity_violation", detail: `every gate passed but no coverage was read from ${coverage.lcov}` };
      }
    } else if (floor !== null && after.coverage_percent < floor - 1e-9) {
      return {
        halt_reason: "metric_integrity_violation",
        detail: `line coverage ${after.coverage_percent.toFixed(2)}% is below the floor of ${floor.toFixed(2)}%${coverage.floor === "t0" ? " (t0)" : ""}`,
      };
    }
  }

  if (before?.contract && after && JSON.stringify(after.contract) !== JSON.stringify(before.contract)) {
    const how = after.contract && "error" in after.contract ? `is ${after.contract.error}` : "differs from the pinned one";
    return { halt_reason: "workspace_invalid", detail: `the contract file in the candidate ${how}` };
  }
  return null;
}
