import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, realpath, rm, rmdir } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { foldEvents, HALT_EXIT_CODES, LoopEvent, type LoopState } from "#shared/engine/index.js";
import { verifyReceipt, type ReceiptPredicate } from "#shared/receipts/index.js";
import { formatInterval, formatPercent } from "#shared/format-percent.js";
import { formatList } from "#shared/format-list.js";
import { clonesRoot } from "../evaluation/clone.js";
import { cloneEnv, isWithin } from "../evaluation/environment.js";
import { connect, type ServerOptions } from "../coordinator/connect.js";
import { resolveContract, type ContractOptions } from "../contract/contract-resolution.js";
import type { LoadedContract } from "../contract/contract-file.js";
import { UserError } from "../errors.js";
import { loadWorkspace } from "../loop/workspace.js";
import { PACKAGE_ROOT, defaultStateDir } from "../paths.js";
import { git, repoRoot, repositoryName, shortCommit } from "../process/git.js";
import { checkoutDetached } from "../process/git-clone.js";
import { onShutdown } from "../process/shutdown.js";
import { emitResult, paint, progress, type OutputMode } from "../output.js";
import { verifyEd25519 } from "../receipts/receipt-crypto.js";
import { isReceiptUrl, keyFingerprint, keyLine, receiptBase, receiptDocumentsFor } from "../receipts/receipt-documents.js";

// `replay` VERIFIES: it re-runs the deterministic check on the recorded best, with no agent. `reexecute`
// RE-RUNS: the live agent loop again from the receipt's t0, as a new loop with its own receipt. An agent
// is not deterministic, so what it reports is a comparison of outcomes (the halt, the final failing set,
// the metric within the original's interval), never byte identity; and it spends the agent's budget
// again, so nothing runs without --confirm.

/** Exit code of a re-execution whose outcome differs from the original's: the `objective_unverified` class, as `replay`'s (DESIGN §7, §13). */
const MISMATCH = 13;

/** Options of `loopwarden reexecute`. */
export interface ReexecuteOptions extends OutputMode, ContractOptions, ServerOptions {
  cwd: string;
  events?: string | undefined;
  key?: string | undefined;
  keyFingerprint?: string | undefined;
  /** Run it: without it, only what would run is printed (exit 2). */
  confirm?: boolean | undefined;
  /** `--labels`, passed to the re-run's `run`. */
  labels?: string | undefined;
  /** `--unconfined`, passed to the re-run's `run` (never taken from the original). */
  unconfined?: boolean | undefined;
}

/** One compared part of the outcome; `counts` says whether it decides the match. */
interface Comparison {
  part: "halt" | "failing" | "metric";
  match: boolean;
  counts: boolean;
  detail: string;
}

/** A loop's outcome as the comparison reads it, from its folded log. */
function outcomeOf(state: LoopState, receipt: string | null) {
  return {
    loop_id: state.loop_id,
    receipt,
    halt_reason: state.halt?.halt_reason ?? null,
    iterations: state.iterations,
    best: state.best.candidate_id,
    failing: state.best.failing,
    metric: state.best.metric,
    cost_usd: state.cost_usd,
  };
}

/**
 * The contract a re-execution runs: the contract of this checkout at t0 (its contract file, or the flags
 * given, named after the loop by default), which must hash to the receipt's pinned contract (DESIGN §4
 * invariant 4) — a receipt never makes this machine run a command it names.
 */
async function checkoutContract(dir: string, options: ReexecuteOptions, predicate: ReceiptPredicate, t0: string): Promise<LoadedContract> {
  const loaded = await resolveContract(dir, { ...options, name: options.name ?? predicate.name });
  if (loaded.hash !== predicate.contract_hash) {
    const what = loaded.source === "flags" ? "the flags given" : `${loaded.source} at t0 (${shortCommit(t0)})`;
    throw new UserError(
      `${what} hash to contract ${loaded.hash.slice(0, 12)}, but the loop ran ${predicate.contract_hash.slice(0, 12)}: reexecute runs only a contract of this checkout, and it must be the loop's (for a flag-only loop, give its --check/--exec/--junit/--max-iterations flags)`,
      2,
    );
  }
  return loaded;
}

/**
 * A fresh clone of `repo` at `commit` for a whole loop to run in, in this process's clone directory
 * (removed by the next runner if this one is killed): its own object store (hard links where git can),
 * so the re-run's clones and zones need nothing of the user's repository; hooks off; no remote but the
 * repository's name (credentials stripped), so the new loop names the repository as the original did.
 */
async function cloneForRun(repo: string, commit: string): Promise<string> {
  const root = await realpath(os.tmpdir()).catch(() => os.tmpdir());
  for (const tree of new Set([path.resolve(repo), await realpath(repo).catch(() => repo)])) {
    if (isWithin(root, tree)) {
      throw new UserError(`the temporary directory ${os.tmpdir()} is inside the repository ${repo}; set TMPDIR to a directory outside it`);
    }
  }
  const dir = path.join(clonesRoot(), String(process.pid), `reexecute-${randomBytes(4).toString("hex")}`);
  await mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
  try {
    await git(repo, ["clone", "-q", "--no-checkout", "--config", "core.hooksPath=/dev/null", repo, dir]);
    await git(dir, ["remote", "remove", "origin"]);
    const name = await repositoryName(repo);
    if (name) await git(dir, ["remote", "add", "origin", name]);
    await checkoutDetached(dir, commit);
  } catch (error) {
    await removeRunClone(dir);
    throw error;
  }
  return dir;
}

async function removeRunClone(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  // This process's clone directory goes too once empty.
  await rmdir(path.dirname(dir)).catch(() => undefined);
}

/** What the re-run's `run` is given besides `run --new`: the contract flags as given (the flag-only loop named after the original), the precondition as the original had it. */
function runArguments(options: ReexecuteOptions, loaded: LoadedContract, predicate: ReceiptPredicate, skipDoctor: boolean): string[] {
  const flagOnly = loaded.source === "flags";
  const flags: [string, string | number | string[] | undefined][] = [
    ["--check", options.check],
    ["--exec", options.exec],
    ["--max-iterations", options.maxIterations],
    ["--name", flagOnly ? (options.name ?? predicate.name) : undefined],
    ["--check-timeout", options.checkTimeout],
    ["--agent-timeout", options.agentTimeout],
    ["--junit", options.junit],
    ["--tap", options.tap],
    ["--labels", options.labels],
    ["--scope", options.scope],
  ];
  return [
    ...(options.quiet || options.json ? ["--quiet"] : []),
    ...(options.contract !== undefined ? ["--contract", options.contract] : []),
    "run",
    "--new",
    ...(skipDoctor ? ["--skip-doctor"] : []),
    ...(options.unconfined ? ["--unconfined"] : []),
    ...flags.flatMap(([flag, value]) => (value === undefined ? [] : [flag, ...(Array.isArray(value) ? value : [String(value)])])),
  ];
}

/**
 * The re-run's environment: this runner's, less every mention of the user's working tree (as a clone's
 * gates get it, DESIGN §6.4), with the runner's own coordinator settings put back — the re-run is this
 * runner, and reaches the coordinator this command reaches.
 */
function runEnv(trees: readonly string[], options: ReexecuteOptions, dir: string): NodeJS.ProcessEnv {
  const env = cloneEnv(trees);
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && /^LOOPWARDEN_(TOKEN|OWNER_TOKEN|SERVER|S3_.*)$/.test(name)) env[name] = value;
  }
  if (options.server !== undefined) env.LOOPWARDEN_SERVER = options.server;
  if (options.token !== undefined) env.LOOPWARDEN_TOKEN = options.token;
  if (options.state !== undefined) env.LOOPWARDEN_STATE = path.resolve(options.state);
  env.PWD = dir;
  return env;
}

/** Runs this CLI's own `run` in `dir` and waits for it; its output goes to stderr as progress (none with --json). */
async function runIn(dir: string, args: string[], env: NodeJS.ProcessEnv, mode: OutputMode): Promise<{ code: number; lastError: string }> {
  const entry = process.argv[1] ?? path.join(PACKAGE_ROOT, "runner", "bin", "loopwarden.js");
  const child = spawn(process.execPath, [...process.execArgv, entry, ...args], { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] });
  // Interrupted, this command stops the run it started (by its pid) and waits for it to stop its own.
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal }));
  });
  const unregister = onShutdown(async () => {
    if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) process.kill(child.pid, "SIGTERM");
    await exited.catch(() => undefined);
  });
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    if (!mode.json && !mode.quiet) process.stderr.write(chunk);
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4_000);
    if (!mode.json) process.stderr.write(chunk);
  });
  try {
    const { code, signal } = await exited;
    const lastError = stderr.trim().split("\n").filter(Boolean).pop() ?? "";
    return { code: code ?? (signal === "SIGINT" ? 130 : 143), lastError };
  } finally {
    unregister();
  }
}

/** The improvement of a loop's best over its t0 (0.08: 8% better): its confirm measurement's estimate, else from the medians. */
function improvementOverT0(state: LoopState): { value: number; from: string } | null {
  const metric = state.contract.metric;
  if (!metric) return null;
  if (state.best.candidate_id === "t0") return { value: 0, from: "t0 kept" };
  if (state.confirm && state.confirm.candidate_id === state.best.candidate_id) return { value: state.confirm.estimate, from: "confirm measurement" };
  const [best, t0] = [state.best.metric, state.t0.metric];
  if (best === null || t0 === null || best <= 0 || t0 <= 0) return null;
  return { value: metric.direction === "higher" ? best / t0 - 1 : t0 / best - 1, from: "medians" };
}

/**
 * The metric part (optimize mode): the re-run's figure within the original's interval — its confirm
 * interval (the best against t0) when recorded, compared with the re-run's improvement over its t0; else
 * the interval of the verdict that promoted the original's best, compared with the re-run's best's own
 * promoting estimate. Without either interval the part is shown but does not decide the match.
 */
function compareMetric(original: LoopState, rerun: LoopState): Comparison {
  const metric = original.contract.metric;
  if (!metric) return { part: "metric", match: true, counts: false, detail: "no metric" };
  const confirm = original.confirm && original.confirm.candidate_id === original.best.candidate_id ? original.confirm : null;
  if (confirm?.interval) {
    const figure = improvementOverT0(rerun);
    const [low, high] = [confirm.interval[0] ?? 0, confirm.interval[1] ?? 0];
    if (!figure) {
      return { part: "metric", match: false, counts: true, detail: `${metric.name}: the re-run has no reading of its best against t0 to compare` };
    }
    const inside = figure.value >= low && figure.value <= high;
    return {
      part: "metric",
      match: inside,
      counts: true,
      detail: `${metric.name}: the re-run's best is ${formatPercent(figure.value)} better than t0 (${figure.from}), ${inside ? "within" : "outside"} the original's confirm interval${formatInterval(confirm.interval)}`,
    };
  }
  const verdict = original.candidates[original.best.candidate_id]?.verdict?.metric;
  if (verdict?.interval) {
    const rerunVerdict = rerun.candidates[rerun.best.candidate_id]?.verdict?.metric;
    const [low, high] = [verdict.interval[0] ?? 0, verdict.interval[1] ?? 0];
    if (!rerunVerdict) {
      return {
        part: "metric",
        match: false,
        counts: true,
        detail: `${metric.name}: the re-run promoted nothing (its best is t0), the original's best was promoted by${formatInterval(verdict.interval)}`,
      };
    }
    const inside = rerunVerdict.estimate >= low && rerunVerdict.estimate <= high;
    return {
      part: "metric",
      match: inside,
      counts: true,
      detail: `${metric.name}: the re-run's best was promoted by ${formatPercent(rerunVerdict.estimate)}, ${inside ? "within" : "outside"} the interval of the verdict that promoted the original's${formatInterval(verdict.interval)}`,
    };
  }
  const figure = improvementOverT0(rerun);
  return {
    part: "metric",
    match: true,
    counts: false,
    detail: `${metric.name}: the original records no interval to compare with${figure ? `; the re-run's best is ${formatPercent(figure.value)} better than t0 (${figure.from})` : ""}`,
  };
}

/** The outcome comparison: the halt, the final failing set and the metric decide; the iterations are shown. */
function compareOutcomes(original: LoopState, rerun: LoopState): Comparison[] {
  const halt = { was: original.halt?.halt_reason ?? "none", is: rerun.halt?.halt_reason ?? "none" };
  const before = new Set(original.best.failing);
  const after = new Set(rerun.best.failing);
  const onlyOriginal = original.best.failing.filter((id) => !after.has(id));
  const onlyRerun = rerun.best.failing.filter((id) => !before.has(id));
  const sameFailing = onlyOriginal.length === 0 && onlyRerun.length === 0;
  return [
    { part: "halt", match: halt.was === halt.is, counts: true, detail: halt.was === halt.is ? `${halt.is}, as the original` : `${halt.was} → ${halt.is}` },
    {
      part: "failing",
      match: sameFailing,
      counts: true,
      detail: sameFailing
        ? `${after.size} failing at the best, the same set`
        : `${before.size} → ${after.size} failing at the best${onlyOriginal.length > 0 ? `; only the original's: ${formatList(onlyOriginal)}` : ""}${onlyRerun.length > 0 ? `; only the re-run's: ${formatList(onlyRerun)}` : ""}`,
    },
    compareMetric(original, rerun),
  ];
}

/** What a re-execution would run, said before it runs, and all that is said without --confirm. */
function planOf(state: LoopState, loaded: LoadedContract, coordinator: string) {
  const { contract } = loaded;
  const budget = contract.stop.budget;
  return {
    t0_commit: state.t0.commit,
    contract: loaded.source,
    agent: contract.agent.run,
    agent_timeout: contract.agent.timeout,
    max_iterations: contract.stop.max_iterations,
    budget: { cost_usd: budget?.cost_usd ?? null, wall: budget?.wall ?? null },
    original_iterations: state.iterations,
    original_cost_usd: state.cost_usd,
    coordinator,
  };
}

function planLines(plan: ReturnType<typeof planOf>, loopId: string): string[] {
  const limits = [
    plan.budget.cost_usd === null ? "no cost limit" : `$${plan.budget.cost_usd} of reported agent cost`,
    plan.budget.wall === null ? "no wall-time limit" : `${plan.budget.wall} of wall time`,
  ];
  return [
    `reexecute would run loop ${loopId} again from t0 (${shortCommit(plan.t0_commit)}), as a new loop on ${plan.coordinator}, in a fresh clone:`,
    `  agent:          ${plan.agent} (each run at most ${plan.agent_timeout})`,
    `  max_iterations: ${plan.max_iterations} (the original ran ${plan.original_iterations})`,
    `  budget:         ${limits.join(", ")} (the original's agents reported $${plan.original_cost_usd})`,
  ];
}

/**
 * `loopwarden reexecute <url | FILE --events F --key K> [--confirm]`: verifies the receipt, then runs
 * its loop again — the agent loop, not a check — from its t0 in a fresh clone of this repository, with
 * the checkout's contract (which must hash to the receipt's), as a new loop on the coordinator this
 * command reaches, and compares the two outcomes. Exit 0 when the halt and the final failing set are the
 * same and the metric is within the original's interval, 13 when not; 2 without --confirm (nothing run).
 */
export async function reexecuteCommand(receipt: string, options: ReexecuteOptions): Promise<number> {
  const pin = keyFingerprint(options.keyFingerprint);
  if (!isReceiptUrl(receipt) && (options.events === undefined || options.key === undefined)) {
    throw new UserError("a receipt file is re-executed with its log and a key: loopwarden reexecute FILE --events EVENTS.jsonl --key KEYS.json", 2);
  }
  const documents = await receiptDocumentsFor(receipt, options, "reexecute");
  const repo = await repoRoot(options.cwd);
  const verified = await verifyReceipt({ envelope: documents.envelope, events: documents.events, keys: documents.keys, verify: verifyEd25519, pin });
  if (!verified.ok || !verified.statement) {
    emitResult(options, { status: "error", match: false, errors: [`the receipt does not verify: ${verified.first_failure}`] }, [
      `INVALID receipt, nothing re-executed: ${verified.first_failure}`,
    ]);
    return MISMATCH;
  }
  progress(options, keyLine(documents.keySource, verified.key, pin));
  const { predicate } = verified.statement;
  const events = documents.events.map((event) => LoopEvent.parse(event));
  const original = foldEvents(events);
  if (!original) throw new UserError("the receipt's log is empty");
  if (!original.halt) {
    throw new UserError(`the receipt covers loop ${predicate.loop_id} before its halt: reexecute compares halts, so give its final receipt`, 2);
  }
  const created = events.find((event) => event.type === "loop_created");
  const t0 = original.t0.commit;
  await git(repo, ["cat-file", "-e", `${t0}^{commit}`]).catch(() => {
    throw new UserError(`the receipt's t0 commit ${t0} is not in this repository: reexecute runs in a clone of the loop's repository that has it`);
  });
  const coordinator =
    (options.server ?? process.env.LOOPWARDEN_SERVER) || `the local coordinator (state: ${options.state ? path.resolve(options.state) : defaultStateDir()})`;
  const originalReceipt = isReceiptUrl(receipt) ? receiptBase(receipt).href : path.resolve(options.cwd, receipt);
  // A contract file named by an absolute path in this repository is the clone's same file.
  const contractFile =
    options.contract !== undefined && path.isAbsolute(options.contract) && isWithin(path.resolve(options.contract), repo)
      ? path.relative(repo, options.contract)
      : options.contract;
  const run = { ...options, contract: contractFile };

  const dir = await cloneForRun(repo, t0);
  const unregister = onShutdown(() => removeRunClone(dir));
  try {
    const loaded = await checkoutContract(dir, run, predicate, t0);
    const plan = planOf(original, loaded, coordinator);
    if (!options.confirm) {
      emitResult(
        options,
        {
          status: "error",
          loop_id: predicate.loop_id,
          plan,
          errors: ["reexecute runs the agent again and spends its budget: add --confirm to run it; nothing was run"],
        },
        [...planLines(plan, predicate.loop_id), "nothing was run: reexecute runs the agent again and spends its budget; add --confirm to run it"],
      );
      return 2;
    }

    const connection = await connect(options, options);
    try {
      const before = Object.values(await loadWorkspace(dir)).map((loop) => loop.loop_id);
      for (const line of planLines(plan, predicate.loop_id)) progress(options, line.replace("reexecute would run", "re-executing"));
      const skipDoctor = created?.type === "loop_created" && created.data.doctor?.status === "skipped";
      const trees = [...new Set([path.resolve(repo), await realpath(repo).catch(() => repo)])];
      const ran = await runIn(dir, runArguments(run, loaded, predicate, skipDoctor), runEnv(trees, options, dir), options);
      const loopId = Object.values(await loadWorkspace(dir))
        .map((loop) => loop.loop_id)
        .find((id) => !before.includes(id));
      if (!loopId) {
        throw new UserError(`the re-run created no loop (its run exited ${ran.code}${ran.lastError ? `: ${ran.lastError.replace(/^loopwarden: /, "")}` : ""})`);
      }
      const summary = await connection.client.getLoop(loopId);
      if (!summary.halt) {
        // Its checkout is removed with this command: nothing could resume it.
        const cancelled = await connection.client.cancelLoop(loopId, { reason: "reexecute: the re-run ended before a halt, and its checkout is removed" }).then(
          () => "cancelled",
          () => "left running",
        );
        throw new UserError(
          `the re-run ended before its loop ${loopId} halted (exit ${ran.code}${ran.lastError ? `: ${ran.lastError.replace(/^loopwarden: /, "")}` : ""}); the loop is ${cancelled}`,
        );
      }
      if (ran.code !== HALT_EXIT_CODES[summary.halt.halt_reason]) {
        throw new UserError(
          `the re-run's loop ${loopId} halted (${summary.halt.halt_reason}), but its run exited ${ran.code}${ran.lastError ? `: ${ran.lastError.replace(/^loopwarden: /, "")}` : ""}`,
        );
      }
      const rerun = foldEvents((await connection.client.eventLines(loopId)).map((line) => LoopEvent.parse(JSON.parse(line))));
      if (!rerun) throw new UserError(`the re-run's loop ${loopId} has no events`);
      const rerunReceipt = summary.receipt_id ? `${connection.url}/r/${summary.receipt_id}` : null;
      // The re-run's run resolved the same flags and file: anything else is a bug, never a comparison.
      if (rerun.contract_hash !== predicate.contract_hash) {
        throw new Error(`the re-run's loop ${loopId} pinned contract ${rerun.contract_hash}, not the receipt's ${predicate.contract_hash}`);
      }
      return report(options, predicate.loop_id, outcomeOf(original, originalReceipt), outcomeOf(rerun, rerunReceipt), compareOutcomes(original, rerun));
    } finally {
      await connection.close();
    }
  } finally {
    unregister();
    await removeRunClone(dir);
  }
}

function report(
  mode: OutputMode,
  loopId: string,
  original: ReturnType<typeof outcomeOf>,
  rerun: ReturnType<typeof outcomeOf>,
  comparisons: Comparison[],
): number {
  const match = comparisons.every((comparison) => !comparison.counts || comparison.match);
  const mark = (comparison: Comparison) => (!comparison.counts ? paint("—", "dim") : comparison.match ? paint("match", "green") : paint("DIFFERS", "red"));
  emitResult(
    mode,
    {
      status: match ? "ok" : "error",
      match,
      loop_id: rerun.loop_id,
      ...(rerun.receipt ? { receipt_url: rerun.receipt } : {}),
      original,
      reexecuted: rerun,
      comparisons,
      errors: comparisons.filter((comparison) => comparison.counts && !comparison.match).map((comparison) => `${comparison.part}: ${comparison.detail}`),
    },
    [
      ...comparisons.map((comparison) => `  ${comparison.part.padEnd(10)} ${mark(comparison)}  ${comparison.detail}`),
      `  iterations ${paint("—", "dim")}  ${rerun.iterations} (the original: ${original.iterations})`,
      `  original:    loop ${original.loop_id}, receipt ${original.receipt ?? "none"}`,
      `  re-executed: loop ${rerun.loop_id}, receipt ${rerun.receipt ?? "none"}`,
      match
        ? `re-executed: loop ${loopId} run again from t0 halts as the original did, with the same failing set${comparisons.some((comparison) => comparison.part === "metric" && comparison.counts) ? " and its metric within the original's interval" : ""}`
        : `DIFFERS: loop ${loopId} run again from t0 does not end as the receipt records`,
    ],
  );
  return match ? 0 : MISMATCH;
}
