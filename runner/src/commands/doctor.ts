import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { changedTests, outcomeReader, type FlippingTest, type TestOutcome } from "#shared/determinism/flips.js";
import { exitCodeFor, type HaltReason } from "#shared/wire/halt-reasons.js";
import { gateTestId, testSetsOf, type TestSets } from "#shared/engine/test-sets.js";
import type { Contract } from "#shared/wire/contract.js";
import { Client } from "../coordinator/client.js";
import { withClone } from "../evaluation/clone.js";
import { runGates } from "../evaluation/evaluate.js";
import { networkIsolation, runCommand } from "../process/exec.js";
import { execZone, isConfined } from "../zones/isolation.js";
import { zoneChecks } from "./doctor-zones.js";
import { UserError } from "../errors.js";
import { dirtyPaths, excludeStateDir, headCommit, repoRoot } from "../process/git.js";
import type { LoadedContract } from "../contract/contract-file.js";
import { emitResult, liveStatus, paint, progress, type OutputMode } from "../output.js";
import { resolveContract } from "../contract/contract-resolution.js";
import { formatRate, probeCommit, probeRuns } from "./probe.js";
import { preconditionRuns } from "../loop/precondition.js";
import { formatList } from "#shared/format-list.js";
import { trackedFiles } from "../evaluation/protected-files.js";
import { scopeCoverage, scopeLine } from "../contract/scope.js";

// `loopwarden doctor` (DESIGN §13, §6.5): is this repository ready for a loop? Each check prints one
// line `ok|warn|fail|skip <check>: <detail>`; the exit code is the worst finding.

/** What `doctor` is given: the CLI's global options plus its own. */
export interface DoctorOptions extends OutputMode {
  cwd: string;
  contract?: string | undefined;
  server?: string | undefined;
  token?: string | undefined;
  state?: string | undefined;
  /** A command that breaks the code, run in a fresh clone before the gates (the mutation canary). */
  mutate?: string | undefined;
  /** Runs of the determinism probe (default: as many as the contract's doctor key gives a new loop's precondition, 3 unless it says). */
  runs?: number | undefined;
}

/** A check's verdict: `warn` is worth knowing and changes no exit code; `skip` says why it did not run. */
export type CheckStatus = "ok" | "warn" | "fail" | "skip";

/** One doctor check as printed, and in `--json`'s `checks` array. */
export interface DoctorCheck {
  check: string;
  status: CheckStatus;
  detail: string;
  /** For a failed gate check, the halt reason a loop would stop with. */
  halt_reason?: HaltReason;
}

/** Time limit of the --mutate command. */
const MUTATE_TIMEOUT_MS = 10 * 60_000;
const execFileAsync = promisify(execFile);

// Exit codes by severity: a check_inadequate finding over check_flaky/side effects over a usage error
// (an invalid contract) over a runtime error (no git, unreachable server) over nothing wrong.
const SEVERITY = [15, 14, 2, 1, 0];

function worse(a: number, b: number): number {
  return SEVERITY.indexOf(a) <= SEVERITY.indexOf(b) ? a : b;
}

const short = (commit: string) => commit.slice(0, 10);
const outcomeWord = (outcome: TestOutcome) => (outcome === "missing" ? "not reported" : outcome);

/** A flipping test in a few words: its runs that went against the consensus, e.g. `gate:unit (failed in runs 2, 5)`. */
function deviationsOf(flip: FlippingTest): string {
  const against = (["passed", "failed", "missing"] as const).filter((outcome) => outcome !== flip.consensus && flip[outcome].length > 0);
  return `${flip.id} (${against.map((outcome) => `${outcomeWord(outcome)} in run${flip[outcome].length === 1 ? "" : "s"} ${flip[outcome].join(", ")}`).join("; ")})`;
}

/** The ids passing in every run given, in order (what "green at HEAD" means for the canary). */
function passingIn(sets: TestSets[]): string[] {
  const [first, ...rest] = sets;
  if (!first) return [];
  const others = rest.map(outcomeReader);
  return first.passing.filter((id) => others.every((outcomeOf) => outcomeOf(id) === "passed"));
}

function gateSummary(contract: Contract, sets: TestSets): string {
  const outcomeOf = outcomeReader(sets);
  const failing = contract.gates.filter((gate) => outcomeOf(gateTestId(gate.name)) !== "passed").map((gate) => gate.name);
  return failing.length === 0 ? "every gate passes" : `gate(s) ${failing.join(", ")} fail at HEAD`;
}

/** The scope check: what the scope admits of the tracked files, a glob that admits none, or that there is no scope. */
function scopeCheck(contract: Contract, tracked: readonly string[]): DoctorCheck {
  if (!contract.scope) return { check: "scope", status: "warn", detail: scopeLine(contract) };
  const { admitted, unmatched } = scopeCoverage(contract.scope, tracked);
  const shown = `${formatList(contract.scope)}: ${admitted} tracked file${admitted === 1 ? "" : "s"} the agent may change`;
  if (unmatched.length > 0) {
    return {
      check: "scope",
      status: "warn",
      detail: `${shown}; ${formatList(unmatched)} match${unmatched.length === 1 ? "es" : ""} no tracked file (a typo?)`,
    };
  }
  return { check: "scope", status: "ok", detail: `${shown}; any other path is blocked_path_modified` };
}

/**
 * `loopwarden doctor [--mutate CMD] [--runs N]`: git usable, contract valid (and enforceable here),
 * working tree clean (a warning), coordinator reachable (with --server only), gates deterministic (a
 * short probe), gates free of side effects (two runs in one clone agree) and, with --mutate, gates
 * adequate (they turn red on a broken tree). Exits 15 `check_inadequate`, 14 `check_flaky` or
 * `check_has_side_effects`, 2 for an invalid contract, 1 for a runtime problem, else 0.
 */
export async function doctorCommand(options: DoctorOptions): Promise<number> {
  // Checked before anything runs (a usage error); without --runs, the contract's doctor key decides below.
  const runsFlag = options.runs === undefined ? undefined : probeRuns({ runs: options.runs });
  const checks: DoctorCheck[] = [];
  const errors: string[] = [];
  let exitCode = 0;
  const report = (check: DoctorCheck, code = 0) => {
    checks.push(check);
    exitCode = worse(exitCode, code);
    if (check.status === "fail" && !check.halt_reason) errors.push(`${check.check}: ${check.detail}`);
    if (!options.json) {
      const colour = { ok: "green", warn: "yellow", fail: "red", skip: "dim" } as const;
      process.stdout.write(`${paint(check.status, colour[check.status])} ${check.check}: ${check.detail}\n`);
    }
  };
  const skipRest = (names: string[], why: string) => names.forEach((check) => report({ check, status: "skip", detail: why }));
  const GATE_CHECKS = ["determinism", "side effects", "adequacy"];

  // git, and a repository with a commit.
  let repo: string | null = null;
  let head: string | null = null;
  try {
    const version = (await execFileAsync("git", ["--version"])).stdout.trim();
    repo = await repoRoot(options.cwd);
    head = await headCommit(repo);
    report({ check: "git", status: "ok", detail: `${version}; repository ${repo} at ${short(head)}` });
  } catch (error) {
    const missing = (error as { code?: string }).code === "ENOENT";
    report({ check: "git", status: "fail", detail: missing ? "git is not installed or not on PATH" : (error as Error).message }, 1);
  }

  // The contract: resolveContract is exactly what run and step load.
  let loaded: LoadedContract | null = null;
  if (repo) {
    try {
      loaded = await resolveContract(repo, { contract: options.contract });
      const gates = loaded.contract.gates.map((gate) => gate.name);
      report({
        check: "contract",
        status: "ok",
        detail: `${loaded.source}: ${loaded.contract.mode}, ${gates.length} gate(s) (${formatList(gates)}), hash ${loaded.hash.slice(0, 12)}`,
      });
    } catch (error) {
      if (!(error instanceof UserError)) throw error;
      report({ check: "contract", status: "fail", detail: error.message }, error.exitCode);
    }
    if (loaded) report(scopeCheck(loaded.contract, await trackedFiles(repo)));
  } else {
    report({ check: "contract", status: "skip", detail: "needs a git repository" });
  }

  // The zones (DESIGN §6.7): a confined contract where no zone can be built runs nothing.
  let gatesRunnable = loaded !== null && head !== null;
  for (const check of loaded ? await zoneChecks(loaded.contract) : []) {
    report(check, check.status === "fail" ? 2 : 0);
    if (check.check === "zones" && check.status === "fail") gatesRunnable = false;
  }
  // Network isolation of unconfined gates, when the contract asks for it: the gates cannot run without it.
  if (loaded && !isConfined(loaded.contract) && loaded.contract.exec?.network === "none") {
    const isolation = await networkIsolation();
    if (isolation.available) {
      report({ check: "network isolation", status: "ok", detail: `gates run in a network namespace of their own (${isolation.how}; loopback only)` });
    } else {
      report(
        {
          check: "network isolation",
          status: "fail",
          detail: `exec.network: none cannot be enforced here: ${isolation.reason}; remove exec from the contract or run where network namespaces are available`,
        },
        2,
      );
      gatesRunnable = false;
    }
  }

  if (repo && head) {
    const dirty = await dirtyPaths(repo);
    report(
      dirty.length === 0
        ? { check: "working tree", status: "ok", detail: "clean" }
        : {
            check: "working tree",
            status: "warn",
            detail: `${dirty.length} uncommitted path(s) (${formatList(dirty)}); doctor checks HEAD (${short(head)}) as committed, and \`run\` refuses a dirty tree`,
          },
    );
  } else {
    report({ check: "working tree", status: "skip", detail: "needs a repository with a commit" });
  }

  // The coordinator, only when one is named: a local one is started on demand by the commands that need it.
  const server = options.server ?? process.env.LOOPWARDEN_SERVER;
  if (!server) {
    report({ check: "coordinator", status: "skip", detail: "no --server or LOOPWARDEN_SERVER: run and step start the local coordinator on demand" });
  } else if (await new Client(server).isHealthy()) {
    report({ check: "coordinator", status: "ok", detail: `${server} answers` });
  } else {
    report(
      {
        check: "coordinator",
        status: "fail",
        detail: `${server} does not answer /healthz; check --server (or LOOPWARDEN_SERVER), or start one with loopwarden serve`,
      },
      1,
    );
  }

  if (!gatesRunnable || !repo || !head || !loaded) {
    skipRest(GATE_CHECKS, loaded ? "the gates cannot run here (see above)" : "needs a valid contract");
  } else {
    const contract = loaded.contract;
    await excludeStateDir(repo);
    const logsRoot = path.join(repo, ".loopwarden", "doctor");

    // Determinism: a short probe in fresh clones, as evaluations run.
    // As many runs as a new loop's precondition makes (doctor.runs or doctor.max_flake_rate), unless --runs says.
    const runs = runsFlag ?? preconditionRuns(loaded);
    progress(options, `determinism: ${runs} run(s) of the gates at ${short(head)}, each in a fresh clone…`);
    const probe = await probeCommit({ repo, commit: head, contract, runs, mode: options, logsDir: path.join(logsRoot, "determinism"), label: "determinism" });
    const flipped = new Set(probe.flipping.map((flip) => flip.id));
    const [firstRun] = probe.sets;
    if (probe.flipping.length > 0) {
      report(
        {
          check: "determinism",
          status: "fail",
          halt_reason: "check_flaky",
          detail: `${probe.failures} of ${runs} run(s) in fresh clones disagree; flipping: ${formatList(probe.flipping.map(deviationsOf))} (logs in ${path.relative(options.cwd, path.join(logsRoot, "determinism"))})`,
        },
        exitCodeFor("check_flaky"),
      );
    } else {
      report({
        check: "determinism",
        status: "ok",
        detail: `${runs} run(s) in fresh clones agree (${firstRun ? gateSummary(contract, firstRun) : ""}); flake rate at most ${formatRate(probe.flake_rate_upper_bound)} at 95%, probe --runs N for a tighter bound`,
      });
    }

    // Side effects: the same gates twice in one clone must agree; a gate that passes once and then
    // fails on what it left behind would make every re-run (confirmations, replays) lie.
    progress(options, "side effects: the gates twice in one clone…");
    const rerun = await withClone(repo, head, "doctor-rerun", async (clone) => {
      const hooks = { onGateStart: (gate: { name: string }) => liveStatus(options, `side effects: gate ${gate.name}`) };
      const first = testSetsOf(contract, (await runGates(clone, contract, hooks)).observation);
      const second = testSetsOf(contract, (await runGates(clone, contract, hooks)).observation);
      return changedTests(first, second);
    });
    if (rerun.length > 0) {
      const alsoFlaky = rerun.filter((change) => flipped.has(change.id)).map((change) => change.id);
      report(
        {
          check: "side effects",
          status: "fail",
          halt_reason: "check_has_side_effects",
          detail:
            `a rerun in the same clone changes ${formatList(rerun.map((change) => `${change.id} (${outcomeWord(change.before)} → ${outcomeWord(change.after)})`))}: ` +
            "the gates leave state behind (files in the tree, caches) that changes their next run; make each run start from scratch" +
            (alsoFlaky.length > 0 ? ` (${formatList(alsoFlaky)} also flipped across fresh clones, so this may be flakiness)` : ""),
        },
        exitCodeFor("check_has_side_effects"),
      );
    } else {
      report({ check: "side effects", status: "ok", detail: "a rerun in the same clone gives the same outcome" });
    }

    // Adequacy: the gates must catch a change that breaks the code (--mutate, else the contract's doctor.mutate).
    const mutate = options.mutate ?? contract.doctor?.mutate;
    if (!mutate) {
      report({ check: "adequacy", status: "skip", detail: 'pass --mutate "<command that breaks the code>" to check that the gates catch a broken change' });
    } else if (passingIn(probe.sets).length === 0) {
      report({ check: "adequacy", status: "warn", detail: "nothing passes at HEAD, so no broken change could turn anything red; make the gates pass first" });
    } else {
      progress(options, `adequacy: \`${mutate}\` in a fresh clone, then the gates…`);
      const green = passingIn(probe.sets);
      const outcome = await withClone(repo, head, "doctor-mutant", async (clone) => {
        const result = await runCommand(mutate, {
          cwd: clone.dir,
          timeoutMs: MUTATE_TIMEOUT_MS,
          env: clone.env,
          network: contract.exec?.network ?? "host",
          zone: execZone(clone, contract),
        });
        if (result.exit_code !== 0) {
          const tail = result.output.toString("utf8").trim().split("\n").slice(-3).join(" | ");
          const ended = result.timed_out ? "timed out" : result.exit_code === null ? `was killed by ${result.signal}` : `exited ${result.exit_code}`;
          return { error: `the --mutate command ${ended}${tail ? `: ${tail}` : ""}` } as const;
        }
        const changed = await dirtyPaths(clone.dir);
        if (changed.length === 0) return { error: "the --mutate command changed nothing in the clone, so there is nothing for the gates to catch" } as const;
        const sets = testSetsOf(
          contract,
          (await runGates(clone, contract, { onGateStart: (gate) => liveStatus(options, `adequacy: gate ${gate.name}`) })).observation,
        );
        const outcomeOf = outcomeReader(sets);
        const caught = green.filter((id) => outcomeOf(id) !== "passed").map((id) => `${id} ${outcomeWord(outcomeOf(id))}`);
        return { changed, caught } as const;
      });
      if ("error" in outcome) {
        report({ check: "adequacy", status: "fail", detail: outcome.error }, 2);
      } else if (outcome.caught.length === 0) {
        report(
          {
            check: "adequacy",
            status: "fail",
            halt_reason: "check_inadequate",
            detail: `after \`${mutate}\` (changed ${formatList(outcome.changed)}) nothing that passes at HEAD fails: the gates would accept this broken change`,
          },
          exitCodeFor("check_inadequate"),
        );
      } else {
        report({
          check: "adequacy",
          status: "ok",
          detail: `after \`${mutate}\` (changed ${formatList(outcome.changed)}) the gates catch it: ${formatList(outcome.caught)}`,
        });
      }
    }
  }

  const finding = checks.find((check) => check.halt_reason && exitCodeFor(check.halt_reason) === exitCode)?.halt_reason;
  emitResult(
    options,
    {
      status: finding ? "halted" : exitCode === 0 ? "ok" : "error",
      ...(finding ? { halt_reason: finding, exit_class: exitCode } : {}),
      checks,
      errors,
    },
    [exitCode === 0 ? "doctor: ready for a loop" : `doctor: ${finding ?? "problems found"} (exit ${exitCode})`],
  );
  return exitCode;
}
