import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { parseDuration } from "../../shared/duration.js";
import { sha256Hex } from "../../shared/hash.js";
import type { Contract, Gate } from "../../shared/wire/contract.js";
import type { ArtifactRef, GateResult, Observation } from "../../shared/wire/observation.js";
import type { Client } from "./client.js";
import { runCommand, type CommandResult } from "./exec.js";
import { cloneAt } from "./git.js";
import { parseJUnit, parseMetrics, parseTap, type TestReport } from "./parsers/index.js";

/** An observation and the gate logs it cites, still to be uploaded. */
export interface Evaluation {
  observation: Observation;
  logs: { ref: ArtifactRef; bytes: Buffer }[];
}

/** The environment gates and agents run with: the runner's own credentials are never passed on (invariant 1). */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  delete env.LOOPWARDEN_TOKEN;
  delete env.LOOPWARDEN_SERVER;
  return env;
}

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

/** What a gate's progress line shows. */
export interface GateProgress {
  gate: Gate;
  result: GateResult;
  tests: { passing: number; failing: number } | null;
  metricErrors: string[];
}

/**
 * Evaluates one commit: a fresh detached clone, then the gates in order. The first hard failure stops
 * the rest; soft gates never do. Each gate's output is captured once, kept as its log, and read for
 * `METRIC` lines and, when configured, its JUnit/TAP report.
 */
export async function evaluateCommit(options: {
  repo: string;
  commit: string;
  contract: Contract;
  label: string;
  onGateStart?: (gate: Gate) => void;
  onGate?: (progress: GateProgress) => void;
}): Promise<Evaluation> {
  const dir = path.join(options.repo, ".loopwarden", "clones", `${options.label}-${randomBytes(4).toString("hex")}`);
  try {
    await cloneAt(options.repo, options.commit, dir);
    const gates: GateResult[] = [];
    const logs: Evaluation["logs"] = [];
    const passing = new Set<string>();
    const failing = new Set<string>();
    for (const gate of options.contract.gates) {
      options.onGateStart?.(gate);
      if (gate.tests) {
        // The report must be this run's: a copy committed to the repository must not stand in for a
        // gate that failed to write one. Its directory is made, since reporters rarely make it.
        const report = path.join(dir, "junit" in gate.tests ? gate.tests.junit : gate.tests.tap);
        await rm(report, { force: true });
        await mkdir(path.dirname(report), { recursive: true });
      }
      const result = await runCommand(gate.run, {
        cwd: dir,
        timeoutMs: parseDuration(gate.timeout) ?? 600_000,
        env: childEnv(),
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
      options.onGate?.({ gate, result: gateResult, tests: counts, metricErrors });
      // The first hard failure stops the rest; the engine counts a gate that did not run as failing.
      const hardFailure = !gate.soft && (result.exit_code !== 0 || result.timed_out || reportError !== undefined);
      if (hardFailure) break;
    }
    // A test that failed in any gate is failing, whatever another gate said of it.
    for (const id of failing) passing.delete(id);
    return { observation: { gates, tests: { passing: [...passing].sort(), failing: [...failing].sort() } }, logs };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Uploads an evaluation's logs to the loop's artifact store. */
export async function uploadLogs(client: Client, loopId: string, logs: Evaluation["logs"]): Promise<void> {
  for (const log of logs) await client.uploadArtifact(loopId, log.ref.name, log.bytes, log.ref.content_type);
}
