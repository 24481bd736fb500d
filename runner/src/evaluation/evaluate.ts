import { mkdir, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { parseDuration } from "#shared/duration.js";
import { sha256Hex } from "#shared/hash.js";
import type { Contract, Gate } from "#shared/wire/contract.js";
import type { ArtifactRef, GateResult } from "#shared/wire/observation.js";
import type { Client } from "../coordinator/client.js";
import { prepareClone, warmPreparedClone, withClone, type Clone } from "./clone.js";
import { requireNetworkIsolation, runCommand, type CommandResult } from "../process/exec.js";
import { execConfinement, execZone } from "../zones/isolation.js";
import { requireSandbox } from "../zones/sandbox.js";
import { clearCoverageReport, readGuardsAfterGates, readGuardsBeforeGates, type GuardSources } from "./guard-readings.js";
import { parseJUnit, parseMetrics, parseTap, type TestReport } from "./parsers/index.js";
import type { Evaluation, GateHooks, GateProgress } from "./evaluation.js";

function logOf(gate: Gate, result: CommandResult, notes: string[]): Buffer {
  const ending = result.timed_out
    ? `timed out after ${gate.timeout}`
    : result.exit_code === null
      ? `killed by ${result.signal}`
      : `exit code ${result.exit_code}`;
  return Buffer.concat([
    Buffer.from(`$ ${gate.run}\n`),
    result.truncated ? Buffer.from("[… earlier output truncated …]\n") : Buffer.alloc(0),
    result.output,
    Buffer.from(`\n[loopwarden] ${ending} in ${result.duration_ms} ms\n`),
    Buffer.from(notes.map((note) => `[loopwarden] ${note}\n`).join("")),
  ]);
}

/** Reads the gate's test report (JUnit or TAP) from the clone; an error says why it could not. */
async function readTestReport(gate: Gate, clone: string): Promise<{ report: TestReport } | { error: string }> {
  const source = gate.tests;
  if (!source) return { error: "no report configured" };
  const relative = "junit" in source ? source.junit : source.tap;
  let text: string;
  try {
    text = await readFile(path.join(clone, relative), "utf8");
  } catch {
    return { error: `${relative}: the gate did not write its test report` };
  }
  try {
    return { report: "junit" in source ? parseJUnit(text, relative) : parseTap(text, relative) };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

/**
 * Starts a clone of `repo` for the next candidate to be evaluated in (`prepareClone`), and in it the exec
 * zone of the first command the contract runs there (the setup's, with the host's network, when it has
 * one, else the first gate's): the candidate checked out there then starts it without waiting for its
 * zone to be built (issue 30). No zone when the contract runs unconfined.
 */
export function prepareEvaluationClone(repo: string, contract: Contract): void {
  prepareClone(repo);
  warmPreparedClone(repo, (clone) => execZone(clone, contract, contract.exec?.setup ? "host" : undefined));
}

/**
 * Runs the contract's gates in order in `clone`, a checkout of the commit under evaluation, with the
 * clone's environment. The first
 * hard failure stops the rest; soft gates never do. Each gate's output is captured once, kept as its
 * log, and read for `METRIC` lines and, when configured, its JUnit/TAP report. With `exec.network:
 * none` every gate runs in a network namespace of its own, and none runs where that is impossible.
 * Evaluations, probes and doctor all run gates through here, so they judge exactly the same way.
 */
export async function runGates(clone: Clone, contract: Contract, hooks: GateHooks = {}): Promise<Evaluation> {
  const { dir } = clone;
  const network = contract.exec?.network ?? "host";
  const zone = execZone(clone, contract);
  // Refuse before the first gate rather than between two of them.
  if (zone) await requireSandbox();
  else if (network === "none") await requireNetworkIsolation();
  const gates: GateResult[] = [];
  const logs: Evaluation["logs"] = [];
  const setup = contract.exec?.setup;
  if (setup) {
    // With the host's network, in the same zone as the gates otherwise (installing dependencies).
    const result = await runCommand(setup, {
      cwd: dir,
      timeoutMs: parseDuration(contract.exec?.setup_timeout ?? "10m") ?? 600_000,
      env: clone.env,
      signal: clone.signal,
      network: "host",
      zone: execZone(clone, contract, "host"),
    });
    if (result.exit_code !== 0 || result.timed_out) {
      // No gate can be judged on a tree whose setup failed: the first gate stands failed, with the
      // setup's output as its log, and the rest do not run (as after any hard failure).
      const first = contract.gates[0] as Gate;
      const bytes = logOf({ ...first, name: "setup", run: setup }, result, [`exec.setup failed, so gate ${first.name} and those after it did not run`]);
      const ref: ArtifactRef = { sha256: sha256Hex(bytes), size: bytes.length, name: `gate-${first.name}.log`, content_type: "text/plain; charset=utf-8" };
      logs.push({ ref, bytes });
      const failed: GateResult = {
        name: first.name,
        exit_code: result.exit_code ?? 125,
        signal: result.signal,
        timed_out: result.timed_out,
        duration_ms: result.duration_ms,
        log: ref,
      };
      gates.push(failed);
      hooks.onGate?.({ gate: first, result: failed, tests: null, metricErrors: [] });
      return { observation: { gates, tests: { passing: [], failing: [] }, exec_zone: execConfinement(contract) }, logs };
    }
  }
  const passing = new Set<string>();
  const failing = new Set<string>();
  const skipped = new Set<string>();
  for (const gate of contract.gates) {
    hooks.onGateStart?.(gate);
    if (gate.tests) {
      // The report must be this run's: a copy committed to the repository (or left by an earlier run
      // in the same directory) must not stand in for a gate that failed to write one. Its directory is
      // made, since reporters rarely make it.
      const report = path.join(dir, "junit" in gate.tests ? gate.tests.junit : gate.tests.tap);
      await rm(report, { force: true });
      await mkdir(path.dirname(report), { recursive: true });
    }
    const result = await runCommand(gate.run, {
      cwd: dir,
      timeoutMs: parseDuration(gate.timeout) ?? 600_000,
      env: clone.env,
      signal: clone.signal,
      network,
      zone,
    });
    const notes: string[] = [];
    const metrics = parseMetrics(result.output.toString("utf8"));
    const metricErrors = metrics.errors.map((error) => `line ${error.line}: ${error.reason}: ${error.text}`);
    notes.push(...metricErrors.map((error) => `malformed METRIC ${error}`));
    let reportError: string | undefined;
    let counts: GateProgress["tests"] = null;
    if (gate.tests) {
      const read = await readTestReport(gate, dir);
      if ("error" in read) {
        reportError = read.error;
        notes.push(`test report: ${read.error}`);
      } else {
        read.report.passing.forEach((id) => passing.add(id));
        read.report.failing.forEach((id) => failing.add(id));
        read.report.skipped.forEach((id) => skipped.add(id));
        counts = { passing: read.report.passing.length, failing: read.report.failing.length };
      }
    }
    const bytes = logOf(gate, result, notes);
    const ref: ArtifactRef = {
      sha256: sha256Hex(bytes),
      size: bytes.length,
      name: `gate-${gate.name}.log`,
      content_type: "text/plain; charset=utf-8",
    };
    logs.push({ ref, bytes });
    const gateResult: GateResult = {
      name: gate.name,
      exit_code: result.exit_code,
      signal: result.signal,
      timed_out: result.timed_out,
      duration_ms: result.duration_ms,
      log: ref,
      ...(Object.keys(metrics.metrics).length > 0 ? { metrics: metrics.metrics } : {}),
      ...(reportError === undefined ? {} : { report_error: reportError }),
    };
    gates.push(gateResult);
    hooks.onGate?.({ gate, result: gateResult, tests: counts, metricErrors });
    // The first hard failure stops the rest; the engine counts a gate that did not run as failing.
    const hardFailure = !gate.soft && (result.exit_code !== 0 || result.timed_out || reportError !== undefined);
    if (hardFailure) break;
  }
  // A test that failed in any gate is failing, whatever another gate said of it; one that ran anywhere
  // is not merely skipped.
  for (const id of failing) passing.delete(id);
  for (const id of [...passing, ...failing]) skipped.delete(id);
  const tests = { passing: [...passing].sort(), failing: [...failing].sort(), ...(skipped.size > 0 ? { skipped: [...skipped].sort() } : {}) };
  return { observation: { gates, tests, exec_zone: execConfinement(contract) }, logs };
}

/** How an evaluation is measured besides its gates: guard readings for a loop's evaluations. */
export interface EvaluationOptions extends GateHooks {
  contract: Contract;
  /** Guard readings (DESIGN §6.4) for a loop's evaluations: where the contract file is (null: flag-only). */
  guards?: GuardSources;
}

/**
 * Evaluates the commit checked out in `clone`: its gates (`runGates`) and, when `guards` is given, the
 * guard readings of DESIGN §6.4 — the protected files and the contract file as committed, before any
 * gate runs, and the coverage the gates left (with `changed_lines`, which changed lines none ran).
 */
export async function evaluateIn(clone: Clone, options: EvaluationOptions): Promise<Evaluation> {
  const guards = options.guards;
  if (!guards) return withTasks(clone, options, await runGates(clone, options.contract, options));
  // Taken when the clone was made ahead (the same contract's readings, of the same untouched checkout).
  const before = await (clone.guardsBefore ?? readGuardsBeforeGates(clone.dir, options.contract, guards));
  await clearCoverageReport(clone.dir, options.contract);
  const evaluation = await withTasks(clone, options, await runGates(clone, options.contract, options));
  const after = await readGuardsAfterGates(clone.dir, options.contract, guards);
  for (const note of after.notes) options.onNote?.(note);
  evaluation.observation.guards = { ...before, ...after.readings };
  return evaluation;
}

/** Time limit of one task's check (tasks have no timeout key of their own). */
const TASK_TIMEOUT = "10m";

/**
 * task_list mode: runs every task's own check after the gates, in the same clone, and adds the results
 * (a task is done only when its check passes; the engine judges) and their logs to the evaluation.
 */
async function withTasks(clone: Clone, options: EvaluationOptions, evaluation: Evaluation): Promise<Evaluation> {
  const tasks = options.contract.tasks;
  if (!tasks) return evaluation;
  const results: GateResult[] = [];
  for (const task of tasks) {
    // A task without a check halts its loop at creation (check_inadequate): no evaluation reaches it.
    if (task.check === undefined) continue;
    const asGate: Gate = { name: task.id, run: task.check, timeout: TASK_TIMEOUT };
    const result = await runCommand(task.check, {
      cwd: clone.dir,
      timeoutMs: parseDuration(TASK_TIMEOUT) ?? 600_000,
      env: clone.env,
      signal: clone.signal,
      network: options.contract.exec?.network ?? "host",
      zone: execZone(clone, options.contract),
    });
    const bytes = logOf(asGate, result, []);
    const ref: ArtifactRef = { sha256: sha256Hex(bytes), size: bytes.length, name: `task-${task.id}.log`, content_type: "text/plain; charset=utf-8" };
    evaluation.logs.push({ ref, bytes });
    results.push({ name: task.id, exit_code: result.exit_code, signal: result.signal, timed_out: result.timed_out, duration_ms: result.duration_ms, log: ref });
    options.onNote?.(
      `task ${task.id}: ${result.exit_code === 0 && !result.timed_out ? "done" : result.timed_out ? "timed out" : `not done (exit ${result.exit_code ?? result.signal})`}`,
    );
  }
  evaluation.observation.tasks = results;
  return evaluation;
}

/** Whether every hard gate of an evaluation passed (a metric is only worth measuring then). */
export function hardGatesPassed(contract: Contract, evaluation: Evaluation): boolean {
  return contract.gates
    .filter((gate) => !gate.soft)
    .every((gate) => {
      const result = evaluation.observation.gates.find((candidate) => candidate.name === gate.name);
      return result !== undefined && result.exit_code === 0 && !result.timed_out && result.report_error === undefined;
    });
}

/** Evaluates one commit in a fresh detached clone (`withClone` + `evaluateIn`). */
export async function evaluateCommit(options: EvaluationOptions & { repo: string; commit: string; label: string }): Promise<Evaluation> {
  return withClone(options.repo, options.commit, options.label, (clone) => evaluateIn(clone, options));
}

/** Uploads an evaluation's logs to the loop's artifact store. */
export async function uploadLogs(client: Client, loopId: string, logs: Evaluation["logs"]): Promise<void> {
  for (const log of logs) await client.uploadArtifact(loopId, log.ref.name, log.bytes, log.ref.content_type);
}
