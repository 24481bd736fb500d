import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import path from "node:path";
import { parseDuration } from "../../shared/duration.js";
import { sha256Hex } from "../../shared/hash.js";
import type { Contract, Gate } from "../../shared/wire/contract.js";
import type { ArtifactRef, GateResult, Observation } from "../../shared/wire/observation.js";
import type { Client } from "./client.js";
import { runCommand, type CommandResult } from "./exec.js";
import { cloneAt } from "./git.js";

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

function logOf(gate: Gate, result: CommandResult): Buffer {
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
  ]);
}

/**
 * Evaluates one commit: a fresh detached clone, then the gates in order, stopping at the first
 * failure. Each gate's output is captured once and kept as its log.
 */
export async function evaluateCommit(options: {
  repo: string;
  commit: string;
  contract: Contract;
  label: string;
  onGate?: (gate: Gate, result: GateResult) => void;
}): Promise<Evaluation> {
  const dir = path.join(options.repo, ".loopwarden", "clones", `${options.label}-${randomBytes(4).toString("hex")}`);
  try {
    await cloneAt(options.repo, options.commit, dir);
    const gates: GateResult[] = [];
    const logs: Evaluation["logs"] = [];
    for (const gate of options.contract.gates) {
      const result = await runCommand(gate.run, {
        cwd: dir,
        timeoutMs: parseDuration(gate.timeout) ?? 600_000,
        env: childEnv(),
      });
      const bytes = logOf(gate, result);
      const ref: ArtifactRef = { sha256: sha256Hex(bytes), size: bytes.length, name: `gate-${gate.name}.log`, content_type: "text/plain; charset=utf-8" };
      logs.push({ ref, bytes });
      const gateResult: GateResult = {
        name: gate.name,
        exit_code: result.exit_code,
        signal: result.signal,
        timed_out: result.timed_out,
        duration_ms: result.duration_ms,
        log: ref,
      };
      gates.push(gateResult);
      options.onGate?.(gate, gateResult);
      // The first hard failure stops the rest; the engine counts a gate that did not run as failing.
      if (result.exit_code !== 0 || result.timed_out) break;
    }
    // Gates report no test ids of their own (JUnit/TAP parsing is on the roadmap); the engine derives
    // one test per gate from its exit code.
    return { observation: { gates, tests: { passing: [], failing: [] } }, logs };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Uploads an evaluation's logs to the loop's artifact store. */
export async function uploadLogs(client: Client, loopId: string, logs: Evaluation["logs"]): Promise<void> {
  for (const log of logs) await client.uploadArtifact(loopId, log.ref.name, log.bytes, log.ref.content_type);
}
