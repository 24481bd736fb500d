import { awaitingBaselineLine } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import type { AwaitingBaseline, CreateLoopRequest, Lease, LoopSummary } from "#shared/wire/api.js";
import type { FullObservation } from "#shared/wire/observation.js";
import { boundedErrors, evidenceOf, evidenceRefusal, inlineLogs, storeLogs, storeReportFiles } from "../evaluation/artifact-files.js";
import type { Client } from "../coordinator/client.js";
import { withClone, type Clone } from "../evaluation/clone.js";
import { contractFileOf, type LoadedContract } from "../contract/contract-file.js";
import { evaluateIn, hardGatesPassed } from "../evaluation/evaluate.js";
import type { Evaluation } from "../evaluation/evaluation.js";
import { shortCommit } from "../process/git.js";
import { holdLease, lostLease, refuseForeignContract, type JobContext } from "./lease-job.js";
import { liveStatus, paint, progress, type OutputMode } from "../output.js";
import { stageBaselineFiles, type PendingFiles } from "./pending-create.js";
import { MetricLog, sampleAlone } from "../evaluation/sampling.js";
import path from "node:path";
import { measurePrecondition } from "./precondition.js";
import { rememberLogTails } from "./context-input.js";

// Measuring t0 (DESIGN §2): the gates, the guard readings and, in optimize mode, the metric's own
// readings, in a clean clone of the commit. Either the loop's creator measures it (`run`, `step`) before
// the loop is created, or — when the contract's `evaluate.labels` ask for a runner the creator is not —
// a `work` runner with those labels measures it on a baseline lease, and the loop is created from its
// report (shared/engine/baseline-lease.ts) while the creator waits for it.

/** t0 measured in `clone`: its gates, and, when the hard gates pass, `samples.min` readings of the metric alone. */
async function measureIn(clone: Clone, loaded: LoadedContract, commit: string, note: (text: string) => void, metricLog: MetricLog): Promise<Evaluation> {
  const evaluation = await evaluateIn(clone, { contract: loaded.contract, guards: { contractFile: contractFileOf(loaded), baseline: commit }, onNote: note });
  const metric = loaded.contract.metric;
  if (metric) {
    // The baseline's own readings: what the first comparison's best-so-far is measured against.
    note(`measuring ${metric.name} ${metric.samples.min} times…`);
    evaluation.observation.samples = hardGatesPassed(loaded.contract, evaluation)
      ? await sampleAlone(clone, loaded.contract, metric.samples.min, metricLog)
      : { best: [], candidate: [], error: "a hard gate failed at t0: the metric was not measured" };
  }
  return evaluation;
}

/**
 * Measures t0 for its creator, and keeps what a candidate's evaluation stores (DESIGN §10) — the metric
 * command's output with the gate logs, and the files the contract's `artifacts` globs match, copied out
 * of the clone before it is removed — all cited by the observation and uploaded once the loop exists.
 */
export async function measureBaseline(
  repo: string,
  source: string,
  commit: string,
  loaded: LoadedContract,
  mode: OutputMode,
): Promise<Evaluation & { files?: PendingFiles | undefined }> {
  progress(mode, `capturing the baseline at ${shortCommit(commit)}: running ${loaded.contract.gates.length} gate(s) in a clean clone…`);
  liveStatus(mode, "baseline: running gates");
  return withClone(repo, commit, "t0", async (clone) => {
    const metricLog = new MetricLog();
    const evaluation = await measureIn(clone, loaded, commit, (text) => progress(mode, `baseline: ${text}`), metricLog);
    // The first agent's context quotes t0's failing gates' logs from here, not downloaded back (issue 30).
    rememberLogTails(evaluation.logs);
    // Matched after the metric ran, as a candidate's are: a benchmark may write the profile.
    const files = await stageBaselineFiles(repo, source, clone.dir, loaded.contract.artifacts ?? []);
    const logs = [...evaluation.logs];
    const artifacts = [...(files?.refs ?? [])];
    if (!metricLog.isEmpty) {
      const bytes = Buffer.from(metricLog.bytes());
      const ref = { sha256: sha256Hex(bytes), size: bytes.length, name: "metric.log", content_type: "text/plain; charset=utf-8" };
      logs.push({ ref, bytes });
      artifacts.push(ref);
    }
    if (artifacts.length > 0) evaluation.observation.artifacts = artifacts;
    return { observation: evaluation.observation, logs, files };
  });
}

/**
 * A baseline lease, for a `work` runner: t0 measured in a clean clone under heartbeats, its logs and files
 * stored, and the observation reported — the loop is created from it. Answers the loop, or null when the
 * lease was lost (the job is the coordinator's again).
 */
export async function measureLeasedBaseline(ctx: JobContext, lease: Lease, label: string, cancel?: AbortSignal): Promise<LoopSummary | null> {
  refuseForeignContract(ctx, lease);
  const { client, mode, loaded } = ctx;
  const { lost, end } = holdLease(ctx, lease, label, cancel);
  const note = (text: string) => progress(mode, `${label}   ${text}`);
  const warn = (text: string) => progress(mode, `${label}   ${paint("warning", "yellow")}: ${text}`);
  try {
    progress(mode, `${label} measuring the baseline of loop ${lease.loop_id} at ${shortCommit(lease.job.commit)} in a clean clone…`);
    return await withClone(ctx.repo, lease.job.commit, "t0", async (made) => {
      const clone: Clone = { ...made, signal: lost.signal };
      const metricLog = new MetricLog();
      const evaluation = await measureIn(clone, loaded, lease.job.commit, note, metricLog);
      lost.signal.throwIfAborted();
      // The precondition, where t0 is measured (DESIGN §6.5): the coordinator decides from the record.
      const doctor = await measurePrecondition({
        repo: ctx.repo,
        commit: lease.job.commit,
        loaded,
        t0: evaluation.observation,
        mode,
        label: `${label}   precondition`,
        signal: lost.signal,
      });
      lost.signal.throwIfAborted();
      const { inline, uploaded } = inlineLogs(client, evaluation.logs);
      const logErrors = await storeLogs(client, lease.loop_id, { ...evaluation, logs: uploaded }, warn);
      const files = await storeReportFiles(client, lease.loop_id, {
        dir: clone.dir,
        globs: loaded.contract.artifacts ?? [],
        metricLog: metricLog.isEmpty ? null : metricLog.bytes(),
        resumeIn: path.join(ctx.repo, ".loopwarden", "uploads"),
        note,
        warn,
      });
      lost.signal.throwIfAborted();
      const send = (evidence: Evaluation["logs"]) => {
        const errors = boundedErrors([...logErrors, ...files.errors]);
        const inlined = evidenceOf(evidence);
        const observation: FullObservation = {
          ...evaluation.observation,
          ...(files.refs.length > 0 ? { artifacts: files.refs } : {}),
          ...(errors.length > 0 ? { artifact_errors: errors } : {}),
        };
        return client.reportBaseline(lease.lease_id, { fencing_token: lease.fencing_token, observation, doctor, ...(inlined ? { evidence: inlined } : {}) });
      };
      liveStatus(mode, `${label} reporting the baseline`);
      try {
        return (await send(inline)).loop;
      } catch (error) {
        const refusal = inline.length > 0 ? evidenceRefusal(error) : null;
        if (!refusal) throw error;
        // Refused for its inline logs: uploaded first, as a report's would be, and the report sent without them.
        if (refusal === "not_taken") client.refuseEvidence();
        logErrors.push(...(await storeLogs(client, lease.loop_id, { ...evaluation, logs: inline }, warn)));
        return (await send([])).loop;
      }
    });
  } catch (error) {
    return lostLease(ctx, error, label, cancel);
  } finally {
    end();
  }
}

/** How often a creator waiting for its baseline says so again when stderr is no terminal. */
const WAITING_LINE_MS = 30_000;

/** How long one wait for the baseline is held by the coordinator (at most 25 s). */
const LONG_POLL_MS = 25_000;

/**
 * Waits for the runner that measures t0 (a creation answered `awaiting_baseline`), saying what it waits
 * for — the labels, or the runner measuring it — when that changes and every 30 s meanwhile (a live line
 * on a terminal); answers the loop once it is created. The creation request is sent again as it was
 * (idempotent), held by the coordinator until the loop exists.
 */
export async function awaitBaseline(client: Client, request: CreateLoopRequest, first: AwaitingBaseline, mode: OutputMode): Promise<LoopSummary> {
  const since = Date.now();
  let awaiting = first;
  let said = { line: "", at: 0 };
  for (;;) {
    const line = awaitingBaselineLine(awaiting);
    const now = Date.now();
    if (line !== said.line || now - said.at >= WAITING_LINE_MS) {
      progress(mode, `loop ${awaiting.loop_id}: ${line} (${Math.round((now - since) / 1000)} s so far)`);
      said = { line, at: now };
    }
    liveStatus(mode, `loop ${awaiting.loop_id}: ${line}; waiting`);
    // Each wait ends by the time the next line is due, so lines are never more than 30 s apart.
    const waitMs = Math.max(1_000, Math.min(LONG_POLL_MS, said.at + WAITING_LINE_MS - Date.now()));
    const answer = await client.createLoop(request, waitMs);
    if ("loop" in answer) return answer.loop;
    awaiting = answer.awaiting_baseline;
  }
}
