import path from "node:path";
import { formatDuration } from "#shared/duration.js";
import { formatLabels, type Verdict } from "#shared/engine/index.js";
import type { Lease, LoopSummary, ReportResponse } from "#shared/wire/api.js";
import { compactTests } from "#shared/engine/test-sets.js";
import type { FullObservation } from "#shared/wire/observation.js";
import { CoordinatorError } from "../coordinator/client.js";
import { withClone, type Clone } from "../evaluation/clone.js";
import { JobRefused, LoopHaltedMeanwhile } from "../errors.js";
import { evaluateIn, hardGatesPassed, type EvaluationOptions } from "../evaluation/evaluate.js";
import { foldAnswered, foldLoop, type LoopReader } from "./event-log.js";
import { contractFileOf, type LoadedContract } from "../contract/contract-file.js";
import { shortCommit } from "../process/git.js";
import { liveStatus, paint, progress, type OutputMode } from "../output.js";
import { MetricLog, samplePairs, type PairedSamples } from "../evaluation/sampling.js";
import { boundedErrors, evidenceOf, evidenceRefusal, inlineLogs, storeLogs, storeReportFiles, type StoredFiles } from "../evaluation/artifact-files.js";
import { timed } from "../timings.js";
import { rememberLogTails } from "./context-input.js";
import type { Session } from "./session-type.js";

// A leased evaluation job (DESIGN §2): the candidate evaluated in a clean clone under heartbeats, its
// observation reported — in optimize mode with paired readings until the coordinator decides.

export function verdictLine(iteration: number | string, verdict: Verdict): string {
  const word = verdict.decision === "promoted" ? paint("promoted", "green") : paint("rejected", "red");
  return `[${iteration}] ${verdict.candidate_id} ${word} (${verdict.reason}): ${verdict.detail}`;
}

/** What evaluating a leased job needs: a checkout holding the contract, and the loop's log as read so far. */
export interface JobContext extends LoopReader {
  repo: string;
  loaded: LoadedContract;
  mode: OutputMode;
}

/** Why a job's processes were killed: its lease is no longer this runner's, or its loop halted (`answer`: the heartbeat's 409). */
class LeaseLost extends Error {
  constructor(
    readonly code: string,
    readonly answer: CoordinatorError,
  ) {
    super(`lease lost (${code})`);
  }
}

/** Invariant 4: a runner runs only the contract pinned in its own checkout, and refuses a job for another. */
export function refuseForeignContract(ctx: Pick<JobContext, "loaded">, lease: Lease): void {
  if (lease.job.contract_hash === ctx.loaded.hash) return;
  throw new JobRefused(
    `refusing the job for ${lease.job.candidate_id}: its contract hash ${lease.job.contract_hash.slice(0, 12)} differs from this checkout's ${ctx.loaded.hash.slice(0, 12)}`,
  );
}

/**
 * Runs one leased evaluation with heartbeats and reports it. Null when the lease was lost — reclaimed,
 * superseded (409) or its comparison stale (`requeued`): the job is someone else's now, or back in the
 * queue. A heartbeat answered 409 kills the job's process groups at once (invariant 6: a runner never
 * works on under a stale fencing token). When the loop halted while the job was out, a report or a
 * heartbeat is answered 409 `loop_halted`: that CoordinatorError is thrown (the job can never be judged;
 * a heartbeat's has killed its processes first). Aborting `cancel` (a runner stopped at once) kills the
 * job's processes too and throws its reason: nothing is reported after it.
 */
export async function evaluateLease(
  ctx: JobContext,
  lease: Lease,
  label: string,
  cancel?: AbortSignal,
): Promise<{ verdict: Verdict; loop: LoopSummary } | null> {
  const { client, mode } = ctx;
  if (lease.job.kind !== "evaluate") throw new Error(`internal: ${lease.lease_id} is a ${lease.job.kind} job, not an evaluation`);
  refuseForeignContract(ctx, lease);
  const { lost, end } = holdLease(ctx, lease, label, cancel);
  const jobClone = (clone: Clone): Clone => ({ ...clone, signal: lost.signal });
  try {
    progress(mode, `${label} evaluating ${shortCommit(lease.job.commit)} in a clean clone…`);
    const contract = ctx.loaded.contract;
    const folded = ctx.folded?.state ?? (await foldLoop(ctx));
    const base = folded.t0_base;
    // The best the lease names is what the candidate is measured against (a lease from before leases
    // named it: the best as this runner last read it).
    const compareTo = lease.job.compare_to?.commit ?? (await foldLoop(ctx)).best.commit;
    return await withClone(ctx.repo, lease.job.commit, lease.job.candidate_id, async (candidateClone) => {
      const clone = jobClone(candidateClone);
      const options = evaluationOptions(mode, ctx.loaded, folded.t0.commit, label);
      // Begun before the lease came (the proposer's own candidate, with this contract: checked above), it
      // is this job's evaluation now: its lines are this job's, and it dies with the job.
      const begun = clone.evaluationAhead;
      if (begun) {
        begun.adopt(options);
        lost.signal.addEventListener("abort", () => begun.stop(lost.signal.reason), { once: true });
        if (lost.signal.aborted) begun.stop(lost.signal.reason);
      }
      const evaluation = await timed("gates", () => begun?.result ?? evaluateIn(clone, { ...options, contract }));
      lost.signal.throwIfAborted();
      // The next agent's context quotes the failing gates' logs from here, not downloaded back (issue 30).
      rememberLogTails(evaluation.logs);
      // What could not be stored as it was (a refusal, a log kept as its tail) is evidence in the
      // report and a warning line, once each, never the end of the job.
      const warned = new Set<string>();
      const warn = (text: string) => {
        if (warned.has(text)) return;
        warned.add(text);
        progress(mode, `${label}   ${paint("warning", "yellow")}: ${text}`);
      };
      // Small logs travel with the first report (one request where an upload and a report took two); the
      // rest are uploaded before it.
      const { inline, uploaded } = inlineLogs(client, evaluation.logs);
      const logErrors = await timed("upload", () => storeLogs(client, lease.loop_id, { ...evaluation, logs: uploaded }, warn));
      let evidence = inline;
      const metricLog = new MetricLog();
      // What the contract's `artifacts` globs match in the clone, and the metric command's output, stored
      // by digest before each report names them (again after more readings: what is stored is not re-sent).
      const storeArtifacts = (): Promise<StoredFiles> =>
        storeReportFiles(client, lease.loop_id, {
          dir: clone.dir,
          globs: contract.artifacts ?? [],
          metricLog: metricLog.isEmpty ? null : metricLog.bytes(),
          resumeIn: path.join(ctx.repo, ".loopwarden", "uploads"),
          note: (text) => progress(mode, `${label}   ${text}`),
          warn,
        });
      // Sent as a difference from t0's collected set (DESIGN §8): as large as what changed, not the suite.
      const tests = compactTests(evaluation.observation.tests, base);
      const report = async (observation: FullObservation): Promise<ReportResponse> => {
        lost.signal.throwIfAborted();
        const { refs: artifacts, errors } = await timed("upload", storeArtifacts);
        liveStatus(mode, `${label} reporting`);
        // Built at each attempt: uploading refused evidence may change what a gate's log refers to.
        const send = async () => {
          const artifactErrors = boundedErrors([...logErrors, ...errors]);
          const inlined = evidenceOf(evidence);
          const after = ctx.folded?.seq;
          const observed = {
            ...observation,
            tests,
            ...(artifacts.length > 0 ? { artifacts } : {}),
            ...(artifactErrors.length > 0 ? { artifact_errors: artifactErrors } : {}),
            ...(lease.job.compare_to ? { compared_to: compareTo } : {}),
          };
          const answer = await client.report(
            lease.lease_id,
            { fencing_token: lease.fencing_token, observation: observed, ...(inlined ? { evidence: inlined } : {}) },
            after,
          );
          // What the log gained (this report, its verdict) comes with the answer: folded now.
          foldAnswered(ctx, after, answer.events);
          return answer;
        };
        const answer = await timed("report", async () => {
          try {
            return await send();
          } catch (error) {
            const refusal = evidence.length > 0 ? evidenceRefusal(error) : null;
            if (!refusal) throw error;
            // Refused for its inline files: they are uploaded first, each refusal handled as an upload's
            // (a log too large is stored as its tail), and the report sent again without them.
            if (refusal === "not_taken") client.refuseEvidence();
            logErrors.push(...(await timed("upload", () => storeLogs(client, lease.loop_id, { ...evaluation, logs: evidence }, warn))));
            evidence = [];
            return send();
          }
        });
        // Stored with the first answer: later reports (more metric readings) cite them as recorded.
        evidence = [];
        return answer;
      };
      const decided = (answer: ReportResponse): { verdict: Verdict; loop: LoopSummary } | null => {
        if (answer.verdict.decision !== "requeued") return { verdict: answer.verdict, loop: answer.loop };
        progress(mode, `${label} ${answer.verdict.detail}`);
        return null;
      };
      if (!contract.metric) return decided(await report(evaluation.observation));
      if (!hardGatesPassed(contract, evaluation)) {
        return decided(
          await report({ ...evaluation.observation, samples: { best: [], candidate: [], error: "a hard gate failed: the metric was not measured" } }),
        );
      }
      // Optimize mode: readings of the best-so-far and the candidate, interleaved on this runner, until
      // the coordinator's sequential test decides (DESIGN §6.3).
      const metric = contract.metric;
      return withClone(ctx.repo, compareTo, `${lease.job.candidate_id}-best`, async (bestClone) => {
        const samples: PairedSamples = { best: [], candidate: [] };
        let wanted = metric.samples.min;
        for (;;) {
          await samplePairs(
            samples,
            wanted,
            { best: jobClone(bestClone), candidate: clone },
            contract,
            (done, of) => liveStatus(mode, `${label} ${metric.name}: pair ${done}/${of} (best, then candidate)`),
            metricLog,
          );
          const answer = await report({ ...evaluation.observation, samples: { ...samples } });
          const { verdict } = answer;
          if (verdict.decision !== "need_samples") return decided(answer);
          progress(mode, `${label}   ${verdict.detail}`);
          wanted = samples.best.length + Math.max(1, verdict.metric?.more ?? 1);
        }
      });
    });
  } catch (error) {
    return lostLease(ctx, error, label, cancel);
  } finally {
    end();
  }
}

/**
 * Heartbeats a leased job every quarter of its TTL until `end()`: a heartbeat answered 409 (the lease
 * reclaimed or superseded, the loop halted) aborts `lost` with a `LeaseLost`, and so does `cancel` (a
 * runner stopped at once) with its reason — every process of the job runs under `lost`.
 */
export function holdLease(
  ctx: Pick<JobContext, "client" | "mode">,
  lease: Lease,
  label: string,
  cancel?: AbortSignal,
): { lost: AbortController; end: () => void } {
  const lost = new AbortController();
  const stop = () => lost.abort(cancel?.reason);
  cancel?.addEventListener("abort", stop, { once: true });
  if (cancel?.aborted) stop();
  const heartbeat = setInterval(
    () => {
      ctx.client.heartbeat(lease.lease_id, { fencing_token: lease.fencing_token }).catch((error: unknown) => {
        if (error instanceof CoordinatorError && error.status === 409) lost.abort(new LeaseLost(error.code, error));
        else progress(ctx.mode, `${label} heartbeat failed (${(error as Error).message}); will retry`);
      });
    },
    Math.max(1_000, Math.floor(lease.ttl_ms / 4)),
  );
  return {
    lost,
    end: () => {
      clearInterval(heartbeat);
      cancel?.removeEventListener("abort", stop);
    },
  };
}

/**
 * How a leased job that threw ends: null when its lease was lost (a heartbeat's or a report's 409: the
 * job is the coordinator's again), said on stderr; the 409 `loop_halted` thrown as the report's answer
 * would be; a stop at once throws its reason; anything else is rethrown.
 */
export function lostLease(ctx: Pick<JobContext, "mode">, error: unknown, label: string, cancel?: AbortSignal): null {
  if (cancel?.aborted) throw cancel.reason;
  // The loop halted: as a report answered so, whether the report or a heartbeat learnt it first.
  if (error instanceof LeaseLost && error.code === "loop_halted") throw error.answer;
  const code =
    error instanceof LeaseLost ? error.code : error instanceof CoordinatorError && error.status === 409 && error.code !== "loop_halted" ? error.code : null;
  if (code === null) throw error;
  progress(ctx.mode, `${label} lease lost (${code}): its processes were stopped and the job left to the coordinator`);
  return null;
}

/** The evaluation options of a loop's evaluations: guard readings, and progress lines for each gate. */
function evaluationOptions(mode: OutputMode, loaded: LoadedContract, baseline: string, label: string): Omit<EvaluationOptions, "contract"> {
  return {
    guards: { contractFile: contractFileOf(loaded), baseline },
    onNote: (text) => progress(mode, `${label}   ${text}`),
    onGateStart: (gate) => liveStatus(mode, `${label} gate ${gate.name}: ${gate.run}`),
    onGate: ({ gate, result, tests, metricErrors }) => {
      const outcome = result.timed_out ? `timed out after ${gate.timeout}` : `exit ${result.exit_code ?? result.signal}`;
      const testCounts = tests ? `, ${tests.passing} passing / ${tests.failing} failing tests` : "";
      const report = result.report_error ? `, report unreadable: ${result.report_error}` : "";
      const metrics = result.metrics
        ? `, ${Object.entries(result.metrics)
            .map(([name, value]) => `${name}=${value}`)
            .join(" ")}`
        : "";
      progress(mode, `${label}   gate ${gate.name}: ${outcome} (${formatDuration(result.duration_ms)})${testCounts}${metrics}${report}`);
      for (const error of metricErrors) progress(mode, `${label}   gate ${gate.name}: malformed METRIC ${error}`);
    },
  };
}

/**
 * Has `candidateId` evaluated and answers its verdict: this runner evaluates whatever job it may lease
 * (a local loop has only its own queued), and when there is none for it — another runner holds the
 * job, or the contract asks for labels this runner lacks — it waits on the log (a long-poll) until the
 * verdict is there, or the job comes back to the queue. `offered` is what the proposal's answer already
 * leased (null: nothing for this runner; undefined: the proposal did not ask).
 */
export async function evaluateUntilDecided(
  session: Session,
  candidateId: string,
  iteration: number,
  offered?: Lease | null,
): Promise<{ verdict: Verdict; loop: LoopSummary }> {
  let first = offered;
  // What it waits for, said as a line when it changes and every 30 s meanwhile: without a terminal (a
  // CI log, a pipe) the live line is not shown, and a run waiting for a runner must not look hung.
  const required = session.loaded.contract.evaluate?.labels ?? {};
  const wanted = Object.keys(required).length > 0 ? `a runner with ${formatLabels(required)}` : "a runner";
  let waitingSince: number | null = null;
  let said = { line: "", at: 0 };
  for (;;) {
    const lease =
      first !== undefined ? first : await session.client.leaseJob(session.loop.loop_id, { runner_id: session.workspace.runner_id, labels: session.labels });
    first = undefined;
    if (lease) {
      const result = await evaluateLease(session, lease, `[${iteration}] ${lease.job.candidate_id}`);
      if (result && lease.job.candidate_id === candidateId) return result;
      continue;
    }
    const candidate = (await foldLoop(session)).candidates[candidateId];
    if (candidate?.verdict) return { verdict: candidate.verdict, loop: await session.client.getLoop(session.loop.loop_id) };
    const state = session.folded?.state;
    if (state?.halt) throw new LoopHaltedMeanwhile(`the loop halted (${state.halt.halt_reason}) before ${candidateId} was decided`);
    const holder = candidate?.lease?.runner_id;
    const request = candidate?.status === "awaiting_review" ? candidate.review_request : null;
    const line = request
      ? `${candidateId} asks a person to allow its change to ${request.files.join(", ")}: loopwarden review shows it; loopwarden ack ${candidateId} --note … or reject ${candidateId} --note … answers it`
      : holder
        ? `${candidateId} is being evaluated by runner ${holder}`
        : `waiting for ${wanted} to evaluate ${candidateId}`;
    const now = Date.now();
    waitingSince ??= now;
    if (line !== said.line || now - said.at >= WAITING_LINE_MS) {
      progress(session.mode, `[${iteration}] ${line} (${Math.round((now - waitingSince) / 1000)} s so far)`);
      said = { line, at: now };
    }
    liveStatus(session.mode, `[${iteration}] ${line}; waiting`);
    // The long-poll ends by the time the next line is due, so lines are never more than 30 s apart.
    await foldLoop(session, Math.max(1_000, Math.min(LONG_POLL_MS, said.at + WAITING_LINE_MS - Date.now())));
  }
}

/** How often a runner waiting for another's verdict says so again. */
const WAITING_LINE_MS = 30_000;

/** How long one long-poll waits (the coordinator holds it at most 25 s). */
export const LONG_POLL_MS = 25_000;
