import { randomBytes } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { canonicalJson } from "../../../shared/canonical-json.js";
import { formatDuration, parseDuration } from "../../../shared/duration.js";
import { HALT_EXIT_CODES, type Verdict } from "../../../shared/engine/index.js";
import { sha256Hex } from "../../../shared/hash.js";
import type { Lease, LoopSummary } from "../../../shared/wire/api.js";
import { Contract } from "../../../shared/wire/contract.js";
import { CoordinatorError, type Client } from "../client.js";
import { connect, type ServerOptions } from "../connect.js";
import { UserError } from "../errors.js";
import { childEnv, evaluateCommit, uploadLogs } from "../evaluate.js";
import { runCommand } from "../exec.js";
import {
  currentBranch,
  diffOf,
  dirtyPaths,
  excludeStateDir,
  headCommit,
  loopBranch,
  rejectedRef,
  repoRoot,
  revertTo,
  snapshotCandidate,
  switchToLoopBranch,
} from "../git.js";
import { emitResult, paint, progress, type OutputMode } from "../output.js";
import { saveWorkspaceState } from "../workspace.js";

/** Options of `loopwarden run` in flag-only mode (DESIGN §5, end). */
export interface RunOptions extends ServerOptions, OutputMode {
  check?: string;
  exec?: string;
  maxIterations?: number;
  name?: string;
  checkTimeout?: string;
  agentTimeout?: string;
  cwd: string;
}

const short = (commit: string) => commit.slice(0, 10);

function verdictLine(iteration: number, verdict: Verdict): string {
  const word = verdict.decision === "promoted" ? paint("promoted", "green") : paint("rejected", "red");
  return `[${iteration}] ${verdict.candidate_id} ${word} (${verdict.reason}): ${verdict.detail}`;
}

function buildContract(options: RunOptions, repo: string): Contract {
  if (!options.check || !options.exec) {
    throw new UserError(
      "run needs --check CMD and --exec CMD (loop.yaml contracts are on the roadmap); e.g. loopwarden run --check \"npm test\" --exec \"./agent.sh\"",
      2,
    );
  }
  const parsed = Contract.safeParse({
    name: options.name ?? path.basename(repo),
    mode: "check_fixpoint",
    gates: [{ name: "check", run: options.check, ...(options.checkTimeout ? { timeout: options.checkTimeout } : {}) }],
    stop: { max_iterations: options.maxIterations ?? 50, no_progress: 10 },
    agent: { run: options.exec, ...(options.agentTimeout ? { timeout: options.agentTimeout } : {}) },
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new UserError(`invalid flags: ${issue?.path.join(".")}: ${issue?.message}`, 2);
  }
  return parsed.data;
}

/** Evaluates leased jobs until our candidate has its verdict (a local run has only its own job queued). */
async function evaluateUntilDecided(
  client: Client,
  loopId: string,
  candidateId: string,
  context: { repo: string; contract: Contract; contractHash: string; runnerId: string; iteration: number; mode: OutputMode },
): Promise<{ verdict: Verdict; loop: LoopSummary }> {
  for (;;) {
    const lease = await client.leaseJob(loopId, { runner_id: context.runnerId });
    if (!lease) {
      const loop = await client.getLoop(loopId);
      if (loop.status === "halted") throw new UserError(`the loop halted (${loop.halt?.halt_reason}) before ${candidateId} was evaluated`);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      continue;
    }
    const result = await evaluateLease(client, lease, context);
    if (result && lease.job.candidate_id === candidateId) return result;
  }
}

/** Runs one leased evaluation with heartbeats and reports it; null when the lease was lost (the job is re-queued). */
async function evaluateLease(
  client: Client,
  lease: Lease,
  context: { repo: string; contract: Contract; contractHash: string; iteration: number; mode: OutputMode },
): Promise<{ verdict: Verdict; loop: LoopSummary } | null> {
  if (lease.job.contract_hash !== context.contractHash) {
    // Invariant 4: run only the contract pinned in this checkout.
    throw new UserError(
      `refusing job for ${lease.job.candidate_id}: its contract hash ${lease.job.contract_hash.slice(0, 12)} differs from this checkout's ${context.contractHash.slice(0, 12)}`,
    );
  }
  let lost = false;
  const heartbeat = setInterval(() => {
    client.heartbeat(lease.lease_id, { fencing_token: lease.fencing_token }).catch((error: unknown) => {
      if (error instanceof CoordinatorError && error.status === 409) lost = true;
      else progress(context.mode, `heartbeat failed (${(error as Error).message}); will retry`);
    });
  }, Math.max(1_000, Math.floor(lease.ttl_ms / 4)));
  try {
    progress(context.mode, `[${context.iteration}] evaluating ${lease.job.candidate_id} (${short(lease.job.commit)}) in a clean clone…`);
    const evaluation = await evaluateCommit({
      repo: context.repo,
      commit: lease.job.commit,
      contract: context.contract,
      label: lease.job.candidate_id,
      onGate: (gate, result) =>
        progress(
          context.mode,
          `[${context.iteration}]   gate ${gate.name}: ${result.timed_out ? "timed out" : `exit ${result.exit_code ?? result.signal}`} (${formatDuration(result.duration_ms)})`,
        ),
    });
    if (lost) return null;
    await uploadLogs(client, lease.loop_id, evaluation.logs);
    return await client.report(lease.lease_id, { fencing_token: lease.fencing_token, observation: evaluation.observation });
  } catch (error) {
    if (error instanceof CoordinatorError && error.status === 409 && error.code !== "loop_halted") {
      progress(context.mode, `[${context.iteration}] lease lost (${error.code}); leasing again`);
      return null;
    }
    throw error;
  } finally {
    clearInterval(heartbeat);
  }
}

/** `loopwarden run`: capture t0, then agent → candidate → evaluate → verdict → keep/revert until a halt. */
export async function runCommandLoop(options: RunOptions): Promise<number> {
  const mode: OutputMode = options;
  const repo = await repoRoot(options.cwd);
  const contract = buildContract(options, repo);
  const contractHash = sha256Hex(canonicalJson(contract));
  await headCommit(repo);
  const dirty = await dirtyPaths(repo);
  if (dirty.length > 0) {
    const shown = dirty.slice(0, 5).join(", ") + (dirty.length > 5 ? ` and ${dirty.length - 5} more` : "");
    throw new UserError(`the working tree has uncommitted changes (${shown}); commit or stash them first, so a revert never loses your work`);
  }
  await excludeStateDir(repo);

  const connection = await connect(options, mode);
  try {
    const { client } = connection;
    const startedFrom = await currentBranch(repo);
    const t0Commit = await headCommit(repo);
    progress(mode, `capturing the baseline at ${short(t0Commit)}: running the check in a clean clone…`);
    const baseline = await evaluateCommit({ repo, commit: t0Commit, contract, label: "t0" });
    const created = await client.createLoop({
      idempotency_key: `run-${randomBytes(16).toString("hex")}`,
      contract,
      t0: { commit: t0Commit, observation: baseline.observation },
    });
    let loop = created.loop;
    await uploadLogs(client, loop.loop_id, baseline.logs);
    await saveWorkspaceState(repo, {
      loop_id: loop.loop_id,
      server: connection.local ? null : connection.url,
      state_dir: connection.local ? (options.state ?? null) : null,
      branch: loopBranch(loop.loop_id),
      started_from: startedFrom,
    });
    progress(mode, `loop ${loop.loop_id}: baseline has ${loop.t0.failing} failing check(s)`);

    if (loop.status === "running") {
      await switchToLoopBranch(repo, loop.loop_id, t0Commit);
      progress(mode, `working on branch ${loopBranch(loop.loop_id)}${startedFrom ? ` (from ${startedFrom})` : ""}`);
    }
    const runnerId = `${os.hostname().replace(/[^A-Za-z0-9_.:-]/g, "-").slice(0, 60)}-${randomBytes(4).toString("hex")}`;
    const agentTimeoutMs = parseDuration(contract.agent.timeout) ?? 1_200_000;
    const logDir = path.join(repo, ".loopwarden", "logs", loop.loop_id);
    await mkdir(logDir, { recursive: true });

    while (loop.status === "running") {
      const iteration = loop.iteration + 1;
      progress(mode, `[${iteration}] running the agent: ${contract.agent.run}`);
      const agent = await runCommand(contract.agent.run, {
        cwd: repo,
        timeoutMs: agentTimeoutMs,
        env: childEnv({ LOOPWARDEN_LOOP_ID: loop.loop_id, LOOPWARDEN_ITERATION: String(iteration) }),
        ...(mode.quiet || mode.json ? {} : { onOutput: (chunk: Buffer) => process.stderr.write(chunk) }),
      });
      await writeFile(path.join(logDir, `agent-${iteration}.log`), agent.output);
      const best = loop.best.commit;
      const commit = await snapshotCandidate(
        repo,
        `loopwarden: candidate of iteration ${iteration}\n\nLoopwarden-Loop: ${loop.loop_id}\nLoopwarden-Iteration: ${iteration}\n`,
      );
      const diff = await diffOf(repo, best, commit);
      const proposed = await client.proposeCandidate(loop.loop_id, {
        idempotency_key: `cand-${commit}`,
        commit,
        diff_sha256: diff.sha256,
        empty: diff.empty,
        proposer: { kind: "command", command: contract.agent.run },
        agent: { exit_code: agent.exit_code, timed_out: agent.timed_out, duration_ms: agent.duration_ms },
      });
      let verdict = proposed.candidate.verdict;
      loop = proposed.loop;
      if (!verdict) {
        const decided = await evaluateUntilDecided(client, loop.loop_id, proposed.candidate.candidate_id, {
          repo,
          contract,
          contractHash,
          runnerId,
          iteration,
          mode,
        });
        verdict = decided.verdict;
        loop = decided.loop;
      }
      progress(mode, verdictLine(iteration, verdict));
      if (verdict.decision === "rejected") {
        const ref = rejectedRef(loop.loop_id, verdict.candidate_id);
        await revertTo(repo, loop.best.commit, { ref, commit });
        progress(mode, `[${iteration}] restored the working tree to ${short(loop.best.commit)}; the candidate is kept at ${ref}`);
      }
    }

    const halt = loop.halt;
    if (!halt) throw new Error("loop stopped running without a halt");
    const exitCode = HALT_EXIT_CODES[halt.halt_reason];
    emitResult(
      mode,
      {
        status: "halted",
        loop_id: loop.loop_id,
        iteration: loop.iteration,
        halt_reason: halt.halt_reason,
        exit_class: exitCode,
        ...(halt.still_improving === undefined ? {} : { still_improving: halt.still_improving }),
      },
      [
        `loop ${loop.loop_id} halted: ${paint(halt.halt_reason, halt.halt_reason === "success_condition_met" ? "green" : "yellow")} (exit ${exitCode}) after ${loop.iteration} iteration(s)`,
        `  ${halt.detail}`,
        `  best: ${loop.best.candidate_id} at ${short(loop.best.commit)}${loop.status === "halted" && loop.iteration > 0 ? ` on branch ${loopBranch(loop.loop_id)}` : ""}`,
      ],
    );
    return exitCode;
  } finally {
    await connection.close();
  }
}
