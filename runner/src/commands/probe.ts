import { mkdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { clopperPearsonUpper, FLAKE_CONFIDENCE, runsForFlakeRate } from "#shared/determinism/flake-rate.js";
import { compareRuns, type FlippingTest, type RunComparison } from "#shared/determinism/flips.js";
import { formatDuration } from "#shared/duration.js";
import { exitCodeFor } from "#shared/wire/halt-reasons.js";
import { gateTestId, testSetsOf, type TestSets } from "#shared/engine/test-sets.js";
import type { Contract } from "#shared/wire/contract.js";
import { UserError } from "../errors.js";
import { evaluateCommit } from "../evaluation/evaluate.js";
import { requireNetworkIsolation } from "../process/exec.js";
import { isConfined } from "../zones/isolation.js";
import { requireSandbox } from "../zones/sandbox.js";
import { dirtyPaths, excludeStateDir, headCommit, repoRoot } from "../process/git.js";
import { emitResult, liveStatus, progress, type OutputMode } from "../output.js";
import { resolveContract } from "../contract/contract-resolution.js";
import { formatList } from "#shared/format-list.js";

// `loopwarden probe` (DESIGN §6.5): run the gates N times on HEAD, each run in a fresh clone exactly as
// an evaluation runs them, and bound how often they disagree with themselves.

/** Most runs one probe makes: a flake rate below 3/1000 is not worth a thousand runs of the gates. */
export const MAX_PROBE_RUNS = 1_000;
const DEFAULT_PROBE_RUNS = 10;

/** What `probe` is given: the CLI's global options plus its own. */
export interface ProbeOptions extends OutputMode {
  cwd: string;
  contract?: string | undefined;
  runs?: number | undefined;
  maxFlakeRate?: number | undefined;
  // Global options every command receives; probe talks to no coordinator.
  server?: string | undefined;
  token?: string | undefined;
  state?: string | undefined;
}

/** The number of runs `--runs N` or `--max-flake-rate R` asks for (⌈3/R⌉, the rule of three); usage errors exit 2. */
export function probeRuns(options: { runs?: number | undefined; maxFlakeRate?: number | undefined }, fallback = DEFAULT_PROBE_RUNS): number {
  if (options.runs !== undefined && options.maxFlakeRate !== undefined) {
    throw new UserError("give either --runs N or --max-flake-rate R, not both", 2);
  }
  if (options.maxFlakeRate !== undefined) {
    const rate = options.maxFlakeRate;
    if (!Number.isFinite(rate) || rate <= 0 || rate >= 1) {
      throw new UserError(`--max-flake-rate must be a fraction between 0 and 1 (e.g. 0.05 for 5%), got ${rate}`, 2);
    }
    const runs = runsForFlakeRate(rate);
    if (runs > MAX_PROBE_RUNS) {
      throw new UserError(
        `--max-flake-rate ${rate} needs ${runs} runs (⌈3/R⌉); the most a probe makes is ${MAX_PROBE_RUNS}, so R must be at least ${3 / MAX_PROBE_RUNS}`,
        2,
      );
    }
    return runs;
  }
  const runs = options.runs ?? fallback;
  if (!Number.isInteger(runs) || runs < 1 || runs > MAX_PROBE_RUNS) {
    throw new UserError(`--runs must be a whole number from 1 to ${MAX_PROBE_RUNS}, got ${runs}`, 2);
  }
  return runs;
}

/** What a probe found: how the runs compare, the flake-rate bound, and each run's test sets. */
export interface ProbeReport extends RunComparison {
  flake_rate_upper_bound: number;
  sets: TestSets[];
}

const short = (commit: string) => commit.slice(0, 10);

function runSummary(contract: Contract, sets: TestSets): string {
  const gateIds = new Set(contract.gates.map((gate) => gateTestId(gate.name)));
  const passing = new Set(sets.passing);
  const gatesPassed = contract.gates.filter((gate) => passing.has(gateTestId(gate.name))).length;
  const tests = (ids: string[]) => ids.filter((id) => !gateIds.has(id)).length;
  const testCounts = sets.passing.length + sets.failing.length > gateIds.size ? `, tests ${tests(sets.passing)} passing / ${tests(sets.failing)} failing` : "";
  return `gates ${gatesPassed}/${contract.gates.length} passed${testCounts}`;
}

function runList(runs: number[]): string {
  return runs.length <= 12 ? `run${runs.length === 1 ? "" : "s"} ${runs.join(", ")}` : `${runs.length} runs`;
}

/** One line per flipping test: which runs saw which outcome. */
export function describeFlip(flip: FlippingTest): string {
  const parts = (["passed", "failed", "missing"] as const)
    .filter((outcome) => flip[outcome].length > 0)
    .map((outcome) => `${outcome === "missing" ? "not reported" : outcome} in ${runList(flip[outcome])}`);
  return `${flip.id}: ${parts.join("; ")}`;
}

/** The flake-rate bound as a percentage for people. */
export function formatRate(rate: number): string {
  return `${Number((rate * 100).toPrecision(3))}%`;
}

/**
 * Runs the gates `runs` times on `commit`, each time in a fresh clone through `evaluateCommit` (the very
 * code evaluations use), and compares the runs (`compareRuns`). Each run's gate logs are kept under
 * `logsDir/run-<i>/` for whoever has to find out why a test flipped.
 */
export async function probeCommit(params: {
  repo: string;
  commit: string;
  contract: Contract;
  runs: number;
  mode: OutputMode;
  logsDir: string;
  /** Prefix of progress lines, e.g. `probe` → `[probe 2/10]`. */
  label: string;
}): Promise<ProbeReport> {
  const { contract, mode, runs } = params;
  await rm(params.logsDir, { recursive: true, force: true });
  const sets: TestSets[] = [];
  for (let run = 1; run <= runs; run++) {
    const tag = `[${params.label} ${run}/${runs}]`;
    const started = performance.now();
    const evaluation = await evaluateCommit({
      repo: params.repo,
      commit: params.commit,
      contract,
      label: `${params.label}-${run}`,
      onGateStart: (gate) => liveStatus(mode, `${tag} gate ${gate.name}: ${gate.run}`),
    });
    const runDir = path.join(params.logsDir, `run-${run}`);
    await mkdir(runDir, { recursive: true });
    for (const log of evaluation.logs) await writeFile(path.join(runDir, log.ref.name), log.bytes);
    const runSets = testSetsOf(contract, evaluation.observation);
    sets.push(runSets);
    const first = sets[0];
    const differs = run > 1 && first ? compareRuns([first, runSets]).flipping.map((flip) => flip.id) : [];
    const difference = differs.length > 0 ? `; differs from run 1 in ${formatList(differs)}` : "";
    progress(mode, `${tag} ${runSummary(contract, runSets)} (${formatDuration(Math.round(performance.now() - started))})${difference}`);
  }
  const comparison = compareRuns(sets);
  return { ...comparison, flake_rate_upper_bound: clopperPearsonUpper(comparison.failures, runs, FLAKE_CONFIDENCE), sets };
}

/**
 * `loopwarden probe [--runs N | --max-flake-rate R]`: runs the contract's gates N times on HEAD, each in
 * a fresh clone, and reports how many runs deviated, a 95% upper bound on the flake rate and the tests
 * that flipped. Exits 14 (`check_flaky`) when anything flipped, else 0.
 */
export async function probeCommand(options: ProbeOptions): Promise<number> {
  const runs = probeRuns(options);
  const repo = await repoRoot(options.cwd);
  const commit = await headCommit(repo);
  const loaded = await resolveContract(repo, { contract: options.contract });
  // Refused before the first run where the gates' zone (or, unconfined, their network namespace) cannot be built.
  if (isConfined(loaded.contract)) await requireSandbox();
  else if (loaded.contract.exec?.network === "none") await requireNetworkIsolation();
  await excludeStateDir(repo);
  const dirty = await dirtyPaths(repo);
  if (dirty.length > 0) {
    progress(options, `note: ${dirty.length} uncommitted path(s) are not probed; probe runs HEAD (${short(commit)}) as committed`);
  }
  progress(options, `probing ${loaded.source} at ${short(commit)}: ${runs} run(s) of ${loaded.contract.gates.length} gate(s), each in a fresh clone…`);
  const logsDir = path.join(repo, ".loopwarden", "probe");
  const report = await probeCommit({ repo, commit, contract: loaded.contract, runs, mode: options, logsDir, label: "probe" });
  const flaky = report.flipping.length > 0;
  const bound = Number(report.flake_rate_upper_bound.toPrecision(4));
  emitResult(
    options,
    {
      status: flaky ? "halted" : "ok",
      ...(flaky ? { halt_reason: "check_flaky", exit_class: exitCodeFor("check_flaky") } : {}),
      runs,
      failures: report.failures,
      flake_rate_upper_bound: bound,
      flipping_tests: report.flipping.map((flip) => flip.id),
    },
    [
      `${report.failures} of ${runs} run(s) at ${short(commit)} deviated from the consensus outcome`,
      `flake rate: at most ${formatRate(bound)} (one-sided ${FLAKE_CONFIDENCE * 100}% upper bound)`,
      ...(flaky
        ? [
            `flipping tests (${report.flipping.length}):`,
            ...report.flipping.map((flip) => `  ${describeFlip(flip)}`),
            `gate logs of every run: ${path.relative(options.cwd, logsDir) || logsDir}`,
            "check_flaky (exit 14)",
          ]
        : ["flipping tests: none"]),
    ],
  );
  return flaky ? exitCodeFor("check_flaky") : 0;
}
