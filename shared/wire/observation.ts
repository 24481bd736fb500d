import * as z from "zod";
import { containsSorted, isStrictlyAscending } from "../sorted-ids.js";
import { ExecConfinement } from "./confinement.js";

/** A lower-case hex SHA-256 digest. */
export const Sha256 = z.string().regex(/^[0-9a-f]{64}$/, "must be a lower-case hex sha256");

/** A full git commit id (SHA-1 or SHA-256 object format). */
export const GitCommit = z.string().regex(/^([0-9a-f]{40}|[0-9a-f]{64})$/, "must be a full git commit id");

/** A content-addressed artifact in R2 (DESIGN §10), as referenced from observations. */
export const ArtifactRef = z.strictObject({
  sha256: Sha256,
  size: z.number().int().min(0),
  name: z.string().min(1).max(200),
  content_type: z.string().min(1).max(100),
});
export type ArtifactRef = z.infer<typeof ArtifactRef>;

/**
 * Something an evaluation did not store as it was, and why (DESIGN §10): a file the coordinator refused
 * (`artifact_too_large`, `quota_exceeded`), one that could not be read or named, globs that matched too
 * many files, or a log stored only as its tail. The agent controls what the globs match: a refusal is
 * evidence recorded with the observation, never a reason for the evaluation to fail.
 */
export const ArtifactError = z.strictObject({
  /** The file's path in the clone, or the log's name (`gate-unit.log`); `*` for the globs as a whole. */
  name: z.string().min(1).max(200),
  /** Its size in bytes, when known. */
  size: z.number().int().min(0).optional(),
  /** Why, as a code: the coordinator's error code, `too_many_files`, `unreadable`, `name_too_long`, `more`. */
  code: z.string().min(1).max(64),
  /** Why, in words, and what was kept instead (a log's last bytes), if anything. */
  detail: z.string().max(1_000),
});
export type ArtifactError = z.infer<typeof ArtifactError>;

/** The most entries `artifact_errors` holds; past it, the last one counts the rest. */
export const MAX_ARTIFACT_ERRORS = 50;

/** What one gate did: exit code (null when killed by a signal), timing, its captured log, the metrics it printed. */
export const GateResult = z.strictObject({
  name: z.string().min(1).max(64),
  exit_code: z.number().int().nullable(),
  signal: z.string().max(16).nullable(),
  timed_out: z.boolean(),
  duration_ms: z.number().min(0),
  log: ArtifactRef.nullable(),
  /** `METRIC name=value` lines the gate printed (a soft gate is judged on these). */
  metrics: z.record(z.string().max(64), z.number().finite()).optional(),
  /** Why the gate's test report (JUnit/TAP) could not be read, when it could not: the gate then counts as failed. */
  report_error: z.string().max(2_000).optional(),
});
export type GateResult = z.infer<typeof GateResult>;

/** The longest test identifier accepted. */
const MAX_TEST_ID_CHARS = 1_000;

/** A test identifier (JUnit classname + name, or `gate:<name>` when a gate is its own one test). */
export const TestId = z.string().min(1).max(MAX_TEST_ID_CHARS);

/** How many bad ids one list's refusal names: a list of 100,000 bad ids is refused with a bounded answer. */
const MAX_ID_ISSUES = 10;

/**
 * A list of at most `max` test ids, checked in one loop: `z.array(TestId)` ran zod's string schema and
 * its two checks per element, 40-60 ms for a 100,000-id list, most of a large suite's creation (issue
 * 30); this loop takes a few. The JSON Schema (openapi.ts) is given as metadata, what the array of
 * `TestId` would have generated.
 */
export function testIdList(max: number) {
  return z
    .custom<string[]>()
    .superRefine((value, ctx) => {
      if (!Array.isArray(value)) {
        ctx.addIssue({ code: "custom", message: "expected an array of test ids" });
        return;
      }
      if (value.length > max) {
        ctx.addIssue({ code: "custom", message: `at most ${max} test ids, not ${value.length}` });
        return;
      }
      let issues = 0;
      for (let index = 0; index < value.length && issues < MAX_ID_ISSUES; index++) {
        const id: unknown = value[index];
        if (typeof id === "string" && id.length >= 1 && id.length <= MAX_TEST_ID_CHARS) continue;
        ctx.addIssue({ code: "custom", message: `a test id is a string of 1 to ${MAX_TEST_ID_CHARS} characters`, path: [index] });
        issues++;
      }
    })
    .meta({ type: "array", items: { type: "string", minLength: 1, maxLength: MAX_TEST_ID_CHARS }, maxItems: max });
}

/** The contract file as found in the evaluated commit: its hash, or why there is none. */
export const ContractReading = z.union([z.strictObject({ hash: Sha256 }), z.strictObject({ error: z.enum(["missing", "invalid"]) })]);

/**
 * What the guards need (DESIGN §6.4), measured in the evaluated commit's clean clone. The runner
 * measures; the engine compares with t0 and decides.
 */
/** The most changed paths a guard reading carries; a candidate that changes more cannot have its scope checked. */
export const MAX_CHANGED_PATHS = 5_000;

/**
 * The paths where the evaluated commit differs from t0's commit (`against`), for the scope guard:
 * sorted, at most MAX_CHANGED_PATHS of them, and how many there are in all (more than the list holds
 * when the change is too large to check).
 */
export const ChangedPaths = z.strictObject({
  against: GitCommit,
  paths: z.array(z.string().min(1).max(1_000)).max(MAX_CHANGED_PATHS),
  total: z.number().int().min(0),
});
export type ChangedPaths = z.infer<typeof ChangedPaths>;

/** The most files, and lines per file, a changed-lines reading lists; `uncovered_count` counts them all. */
export const MAX_UNCOVERED_FILES = 100;
export const MAX_UNCOVERED_LINES_PER_FILE = 200;

/**
 * Which of the lines a candidate changed since `against` (its parent) no gate executed, read from the
 * contract's lcov report after the gates ran (`guards.coverage.changed_lines`). A changed line counts as
 * executed when the report gives it a hit; a line the report does not instrument (a comment, a blank)
 * is not counted; a changed file of a kind the report measures that it does not list at all was never
 * loaded, so its changed lines are uncovered. `error` says why there is no reading (no report written).
 */
export const ChangedLines = z.strictObject({
  against: GitCommit,
  /** Changed lines the report instruments (or would, for a file it never loaded). */
  measured: z.number().int().min(0),
  uncovered: z
    .array(z.strictObject({ path: z.string().min(1).max(1_000), lines: z.array(z.number().int().min(1)).max(MAX_UNCOVERED_LINES_PER_FILE) }))
    .max(MAX_UNCOVERED_FILES),
  uncovered_count: z.number().int().min(0),
  error: z.string().max(1_000).optional(),
});
export type ChangedLines = z.infer<typeof ChangedLines>;

export const GuardReadings = z.strictObject({
  /** sha256 of every tracked file matching the protected globs, by path. */
  protected_files: z.record(z.string().min(1).max(1_000), Sha256),
  /** Line coverage (0-100) from the contract's lcov file; null when none was produced or it was unreadable. */
  coverage_percent: z.number().min(0).max(100).nullable(),
  /** The contract file in the commit; null in flag-only mode (there is no file). */
  contract: ContractReading.nullable(),
  /** What the commit changed since t0, read when the contract has a scope (absent otherwise, and from older runners). */
  changed_paths: ChangedPaths.optional(),
  /** Changed lines no gate executed, read when the contract asks (`guards.coverage.changed_lines`). */
  changed_lines: ChangedLines.optional(),
});
export type GuardReadings = z.infer<typeof GuardReadings>;

/** The most ids one list of a test report may hold: suites of 100,000 tests with room to grow (DESIGN §4 invariant 9). */
export const MAX_TESTS = 250_000;
const TestList = testIdList(MAX_TESTS);

/**
 * Test outcomes in full: every reported id in the list of its outcome. t0's observation is sent and
 * stored this way (its collected set is what later reports differ from); so were every observation's
 * before compact test sets existed, and old logs must still fold.
 */
export const FullTests = z.strictObject({
  passing: TestList,
  failing: TestList,
  /** Collected but not run (skipped, todo): they count for the collected set, not for the ratchet. */
  skipped: TestList.optional(),
});
export type FullTests = z.infer<typeof FullTests>;

/**
 * Test outcomes as a difference from t0's collected set (DESIGN §8, compact test sets): what changed
 * in the collected set, and the ids that did not pass. Every collected id in neither `failing` nor
 * `skipped` passed. A report of a 100,000-test suite is as large as what differs from t0, not the suite.
 */
export const DeltaTests = z.strictObject({
  /** The digest of the test set this is a difference from: t0's collected set (`testSetDigest`). */
  base: Sha256,
  /** Collected now, not in the base. */
  added: TestList,
  /** In the base, not collected now. */
  removed: TestList,
  /** Collected ids that failed (errors included). */
  failing: TestList,
  /** Collected ids that were not run (skipped, todo). */
  skipped: TestList,
});
export type DeltaTests = z.infer<typeof DeltaTests>;

/** Whether test outcomes are a difference from a base set rather than in full. */
export function isDeltaTests(tests: FullTests | DeltaTests): tests is DeltaTests {
  return "base" in tests;
}

const observationFields = {
  gates: z.array(GateResult).min(1).max(32),
  /**
   * Files stored with the loop's artifacts by digest (DESIGN §10): what the contract's `artifacts` globs
   * matched in the clone after the evaluation, and the metric command's output (`metric.log`).
   */
  artifacts: z.array(ArtifactRef).max(1_000).optional(),
  /** What the evaluation could not store as it was, and why (absent when everything was stored; runners before it never send it). */
  artifact_errors: z.array(ArtifactError).min(1).max(MAX_ARTIFACT_ERRORS).optional(),
  guards: GuardReadings.optional(),
  /** How the evaluation's commands were confined (DESIGN §6.7); absent from runners that predate the exec zone. */
  exec_zone: ExecConfinement.optional(),
  /** task_list mode: each task's own check, run after the gates (`name` is the task id). */
  tasks: z.array(GateResult).max(1_000).optional(),
  /**
   * Optimize mode: readings of the contract's metric, interleaved on this runner. Pair i is
   * (best[i], candidate[i]), best measured first. For t0, `best` is empty. Cumulative over the
   * reports of one lease.
   */
  samples: z
    .strictObject({
      best: z.array(z.number().positive().finite()).max(10_000),
      candidate: z.array(z.number().positive().finite()).max(10_000),
      /** Why a reading is missing (the metric command failed or printed no value), when one is. */
      error: z.string().max(2_000).optional(),
      /** The contract's secondary metrics, read from the same runs, paired the same way. */
      secondary: z
        .record(z.string().max(64), z.strictObject({ best: z.array(z.number().finite()).max(10_000), candidate: z.array(z.number().finite()).max(10_000) }))
        .optional(),
    })
    .optional(),
};

function noTestBothPassingAndFailing(observation: { tests: FullTests | DeltaTests }, ctx: z.RefinementCtx): void {
  if (isDeltaTests(observation.tests)) return;
  const { passing, failing } = observation.tests;
  if (failing.length === 0) return;
  // Passing ids sorted, as runners send them: each failing id (the short list) searched among them.
  // Otherwise a set of the failing ids and one pass over the passing ones, each of them hashed.
  const both = isStrictlyAscending(passing)
    ? failing.find((id) => containsSorted(passing, id))
    : ((failingSet) => passing.find((id) => failingSet.has(id)))(new Set(failing));
  if (both !== undefined) ctx.addIssue({ code: "custom", path: ["tests", "failing"], message: `test "${both}" is both passing and failing` });
}

/**
 * An observation: what a runner measured on one commit (DESIGN §2). Never a decision (invariant 1).
 * Its tests are in full (t0, and logs of the first format) or a difference from t0's collected set.
 */
export const Observation = z
  .strictObject({
    ...observationFields,
    tests: z.union([FullTests, DeltaTests]),
    /**
     * The best-so-far commit the runner compared the candidate with, echoed from its lease's `compare_to`.
     * A report that names another commit than its lease is not judged (the candidate is re-queued).
     * Optional here because only the lease says whether it is required: in an optimize loop, a report
     * under a lease that names `compare_to` without it is refused (`invalid_observation`,
     * `unnamedComparison`), since only it says which commit `samples.best` measured. Elsewhere it may be
     * absent: reports of runners that predate it, under leases that predate `compare_to`, and t0's.
     */
    compared_to: GitCommit.optional(),
  })
  .superRefine(noTestBothPassingAndFailing);
export type Observation = z.infer<typeof Observation>;

/** An observation with its tests in full: what a runner measures, and how t0 is sent and recorded. */
export const FullObservation = z.strictObject({ ...observationFields, tests: FullTests }).superRefine(noTestBothPassingAndFailing);
export type FullObservation = z.infer<typeof FullObservation>;
