import { mkdir, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { parseDocument } from "yaml";
import { sha256Hex } from "#shared/hash.js";
import { Contract } from "#shared/wire/contract.js";
import { MAX_CHANGED_PATHS, type ChangedLines, type ChangedPaths, type GuardReadings } from "#shared/wire/observation.js";
import { JobRefused } from "../errors.js";
import { changedPaths } from "../process/git-commits.js";
import { git } from "../process/git.js";
import { contractHash } from "../contract/contract-file.js";
import { readChangedLines } from "./changed-lines.js";
import { parseLcov } from "./parsers/index.js";
import { protectedFiles } from "./protected-files.js";

// The runner's half of the guards (DESIGN §6.4): it measures, in the evaluated commit's clean clone,
// what the engine compares with t0. Files are read as committed, before any gate runs, so neither an
// agent's working tree nor a gate's side effects can hide a change.

/** sha256 of every protected tracked file (see `protectedFiles`), by path. */
async function hashProtectedFiles(
  clone: string,
  contract: Contract,
  contractFile: string | null,
  tracked?: Promise<string[]>,
): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  for (const file of await protectedFiles(clone, contract, contractFile, tracked)) {
    // A tracked symlink or submodule has no readable content here; its path still counts, as empty.
    const bytes = await readFile(path.join(clone, file)).catch(() => Buffer.alloc(0));
    files[file] = sha256Hex(bytes);
  }
  return files;
}

/** The contract file as the candidate has it: its hash, or why there is none (null in flag-only mode). */
async function readContractFile(clone: string, contractFile: string | null): Promise<GuardReadings["contract"]> {
  if (contractFile === null) return null;
  const text = await readFile(path.join(clone, contractFile), "utf8").catch(() => null);
  if (text === null) return { error: "missing" };
  const doc = parseDocument(text, { uniqueKeys: true });
  const parsed = doc.errors.length > 0 ? null : Contract.safeParse(doc.toJSON());
  return parsed?.success ? { hash: contractHash(parsed.data) } : { error: "invalid" };
}

/**
 * What the checked-out commit changed since t0 (`baseline`), for the scope guard: at most
 * MAX_CHANGED_PATHS paths, and how many there are. t0's commit must be in the clone's objects (the
 * repository's, which the clone shares): a runner in a checkout without it cannot check the scope.
 */
async function readChangedPaths(clone: string, baseline: string): Promise<ChangedPaths> {
  const paths = await changedPaths(clone, baseline, "HEAD").catch((error: unknown) => {
    throw new JobRefused(
      `cannot read what the candidate changed since t0 (${baseline.slice(0, 12)}), which the contract's scope needs: ${(error as Error).message.trim()} (fetch that commit into this checkout)`,
    );
  });
  return { against: baseline, paths: paths.slice(0, MAX_CHANGED_PATHS), total: paths.length };
}

/** The guard readings taken before any gate runs: all but the coverage the gates leave. */
export type GuardReadingsBeforeGates = Omit<GuardReadings, "coverage_percent">;

/** Where a loop's guard readings are taken from: its contract file (null: flag-only) and t0's commit. */
export interface GuardSources {
  contractFile: string | null;
  baseline: string;
  /** The checked-out commit's files when listed already (`committedFiles`), else listed in the clone. */
  tracked?: Promise<string[]> | undefined;
}

/** Readings taken right after checkout, before any gate runs; what changed since t0 only when the contract has a scope. */
export async function readGuardsBeforeGates(clone: string, contract: Contract, sources: GuardSources): Promise<GuardReadingsBeforeGates> {
  // Apart from one another, so taken at once: the checkout they read stays untouched until they are done.
  const [protectedFiles, contractFile, changedPaths] = await Promise.all([
    hashProtectedFiles(clone, contract, sources.contractFile, sources.tracked),
    readContractFile(clone, sources.contractFile),
    contract.scope ? readChangedPaths(clone, sources.baseline) : null,
  ]);
  return { protected_files: protectedFiles, contract: contractFile, ...(changedPaths ? { changed_paths: changedPaths } : {}) };
}

/**
 * Before the gates run, when the contract reads changed lines: removes any lcov report the checkout
 * holds (a copy committed to the repository must not stand in for this run's, which would say lines
 * ran that no gate ran) and makes its directory, as for test reports.
 */
export async function clearCoverageReport(clone: string, contract: Contract): Promise<void> {
  const coverage = contract.guards?.coverage;
  if (!coverage?.changed_lines) return;
  const report = path.join(clone, coverage.lcov);
  await rm(report, { force: true });
  await mkdir(path.dirname(report), { recursive: true });
}

/** Line coverage from lcov text; null, with a note, when it cannot be read. */
function coverageOf(text: string | null, lcov: string): { percent: number | null; note?: string } {
  if (text === null) return { percent: null, note: `${lcov}: no coverage report was written` };
  try {
    return { percent: parseLcov(text, lcov).percent };
  } catch (error) {
    return { percent: null, note: (error as Error).message };
  }
}

/**
 * The changed-lines reading (`guards.coverage.changed_lines`) of a candidate: the lines its commit
 * changed since its parent, judged on the report `text`. The parent is the commit's first: the best the
 * runner committed it onto, which the coordinator records as its parent (when the best moved while the
 * agent ran, the two differ and the engine refuses the reading). Known from the clone alone, it serves an
 * evaluation begun before its lease as well. None for t0 (`baseline`), which is judged against nothing.
 */
async function candidateChangedLines(clone: string, lcov: string, text: string | null, baseline: string): Promise<ChangedLines | null> {
  const [commit, parent] = (await git(clone, ["rev-list", "--parents", "-n", "1", "HEAD"])).trim().split(" ");
  if (commit === undefined || parent === undefined || commit === baseline) return null;
  return readChangedLines(clone, parent, commit, { path: lcov, text });
}

/** The guard readings taken after the gates ran, from the report they wrote, and notes on what could not be read. */
export interface GuardReadingsAfterGates {
  readings: Pick<GuardReadings, "coverage_percent" | "changed_lines">;
  notes: string[];
}

/**
 * The readings the gates leave in `clone`: line coverage from the contract's lcov file (null when there
 * is none to read) and, when the contract asks (`changed_lines`) and the commit is a candidate, which of
 * the lines it changed no gate executed.
 */
export async function readGuardsAfterGates(clone: string, contract: Contract, sources: GuardSources): Promise<GuardReadingsAfterGates> {
  const coverage = contract.guards?.coverage;
  if (!coverage) return { readings: { coverage_percent: null }, notes: [] };
  const text = await readFile(path.join(clone, coverage.lcov), "utf8").catch(() => null);
  const { percent, note } = coverageOf(text, coverage.lcov);
  const changedLines = coverage.changed_lines ? await candidateChangedLines(clone, coverage.lcov, text, sources.baseline) : null;
  return {
    readings: { coverage_percent: percent, ...(changedLines ? { changed_lines: changedLines } : {}) },
    notes: note === undefined ? [] : [note],
  };
}
