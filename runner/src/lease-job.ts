import { formatDuration } from "../../shared/duration.js";
import type { Verdict } from "../../shared/engine/index.js";
import type { Lease, LoopSummary } from "../../shared/wire/api.js";
import { compactTests } from "../../shared/engine/test-sets.js";
import type { FullObservation } from "../../shared/wire/observation.js";
import { CoordinatorError } from "./client.js";
import { withClone } from "./clone.js";
import { UserError } from "./errors.js";
import { evaluateIn, hardGatesPassed, uploadLogs, type EvaluationOptions } from "./evaluate.js";
import { foldLoop, testBaseOf } from "./event-log.js";
import { contractFileOf } from "./contract-file.js";
import { shortCommit } from "./git.js";
import { liveStatus, paint, progress } from "./output.js";
import { samplePairs, type PairedSamples } from "./sampling.js";
import type { Session } from "./session.js";

// A leased evaluation job (DESIGN §2): the candidate evaluated in a clean clone under heartbeats, its
// observation reported — in optimize mode with paired readings until the coordinator decides.

export function verdictLine(iteration: number, verdict: Verdict): string {
  const word = verdict.decision === "promoted" ? paint("promoted", "green") : paint("rejected", "red");
  return `[${iteration}] ${verdict.candidate_id} ${word} (${verdict.reason}): ${verdict.detail}`;
}

/** Runs one leased evaluation with heartbeats and reports it; null when the lease was lost (the job is re-queued). */
async function evaluateLease(session: Session, lease: Lease, iteration: number): Promise<{ verdict: Verdict; loop: LoopSummary } | null> {
  const { client, mode } = session;
  if (lease.job.contract_hash !== session.loaded.hash) {
    // Invariant 4: run only the contract pinned in this checkout.
    throw new UserError(
      `refusing the job for ${lease.job.candidate_id}: its contract hash ${lease.job.contract_hash.slice(0, 12)} differs from this checkout's ${session.loaded.hash.slice(0, 12)}`,
    );
  }
  let lost = false;
  const heartbeat = setInterval(
    () => {
      client.heartbeat(lease.lease_id, { fencing_token: lease.fencing_token }).catch((error: unknown) => {
        if (error instanceof CoordinatorError && error.status === 409) lost = true;
        else progress(mode, `heartbeat failed (${(error as Error).message}); will retry`);
      });
    },
    Math.max(1_000, Math.floor(lease.ttl_ms / 4)),
  );
  const label = `[${iteration}] ${lease.job.candidate_id}`;
  try {
    progress(mode, `${label} evaluating ${shortCommit(lease.job.commit)} in a clean clone…`);
    const contract = session.loaded.contract;
    const base = await testBaseOf(session);
    return await withClone(session.repo, lease.job.commit, lease.job.candidate_id, async (clone) => {
      const evaluation = await evaluateIn(clone, { ...evaluationOptions(session, label), contract });
      if (lost) return null;
      await uploadLogs(client, lease.loop_id, evaluation.logs);
      // Sent as a difference from t0's collected set (DESIGN §8): as large as what changed, not the suite.
      const tests = compactTests(evaluation.observation.tests, base);
      const report = (observation: FullObservation) => {
        liveStatus(mode, `${label} reporting`);
        return client.report(lease.lease_id, { fencing_token: lease.fencing_token, observation: { ...observation, tests } });
      };
      if (!contract.metric) return report(evaluation.observation);
      if (!hardGatesPassed(contract, evaluation)) {
        return report({ ...evaluation.observation, samples: { best: [], candidate: [], error: "a hard gate failed: the metric was not measured" } });
      }
      // Optimize mode: readings of the best-so-far and the candidate, interleaved on this runner, until
      // the coordinator's sequential test decides (DESIGN §6.3).
      const metric = contract.metric;
      return withClone(session.repo, session.loop.best.commit, `${lease.job.candidate_id}-best`, async (bestClone) => {
        const samples: PairedSamples = { best: [], candidate: [] };
        let wanted = metric.samples.min;
        for (;;) {
          await samplePairs(samples, wanted, { best: bestClone, candidate: clone }, contract, (done, of) =>
            liveStatus(mode, `${label} ${metric.name}: pair ${done}/${of} (best, then candidate)`),
          );
          if (lost) return null;
          const answer = await report({ ...evaluation.observation, samples: { ...samples } });
          const { verdict } = answer;
          if (verdict.decision !== "need_samples") return answer;
          progress(mode, `${label}   ${verdict.detail}`);
          wanted = samples.best.length + Math.max(1, verdict.metric?.more ?? 1);
        }
      });
    });
  } catch (error) {
    if (error instanceof CoordinatorError && error.status === 409 && error.code !== "loop_halted") {
      progress(mode, `${label} lease lost (${error.code}); leasing again`);
      return null;
    }
    throw error;
  } finally {
    clearInterval(heartbeat);
  }
}

/** The evaluation options of a loop's evaluations: guard readings, and progress lines for each gate. */
function evaluationOptions(session: Session, label: string): Omit<EvaluationOptions, "contract"> {
  const { mode } = session;
  return {
    guards: { contractFile: contractFileOf(session.loaded) },
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

/** Evaluates leased jobs until `candidateId` has its verdict (a local loop has only its own job queued). */
export async function evaluateUntilDecided(session: Session, candidateId: string, iteration: number): Promise<{ verdict: Verdict; loop: LoopSummary }> {
  for (;;) {
    const lease = await session.client.leaseJob(session.loop.loop_id, { runner_id: session.workspace.runner_id });
    if (!lease) {
      const loop = await session.client.getLoop(session.loop.loop_id);
      const candidate = (await foldLoop(session)).candidates[candidateId];
      if (candidate?.verdict) return { verdict: candidate.verdict, loop };
      if (loop.status === "halted") throw new UserError(`the loop halted (${loop.halt?.halt_reason}) before ${candidateId} was decided`);
      liveStatus(session.mode, `[${iteration}] ${candidateId} waiting for its evaluation job`);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      continue;
    }
    const result = await evaluateLease(session, lease, iteration);
    if (result && lease.job.candidate_id === candidateId) return result;
  }
}
