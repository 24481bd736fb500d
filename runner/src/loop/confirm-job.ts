import { BASELINE_ID } from "#shared/engine/index.js";
import type { LoopSummary } from "#shared/wire/api.js";
import type { Labels } from "#shared/wire/contract.js";
import { withClone } from "../evaluation/clone.js";
import { foldLoop } from "./event-log.js";
import { shortCommit } from "../process/git.js";
import { liveStatus, progress } from "../output.js";
import { samplePairs, type PairedSamples } from "../evaluation/sampling.js";
import { CoordinatorError, type Client } from "../coordinator/client.js";
import type { LoadedContract } from "../contract/contract-file.js";
import type { LoopReader } from "./event-log.js";
import type { OutputMode } from "../output.js";
import { formatInterval, formatPercent } from "#shared/format-percent.js";

// The confirm job (DESIGN §6.3): a chain of step-wise gains is not a gain over the baseline, so when an
// optimize loop halts, this runner measures t0 against the final best, interleaved (t0, then best) in two
// clean clones, and reports the readings until the coordinator's sequential comparison records the
// figure — the receipt's headline. The runner measures; the coordinator computes the estimate.

/**
 * Measures the halted optimize loop's best against t0 unless that is recorded already; answers the loop
 * after the record (its final receipt re-issued with the figure), or null when there is nothing to
 * confirm or a reading failed (said on stderr; the loop's halt stands either way).
 */
export async function confirmAgainstT0(
  session: LoopReader & { loop: LoopSummary; loaded: LoadedContract; repo: string; mode: OutputMode; client: Client; labels: Labels },
): Promise<LoopSummary | null> {
  const { loop, mode } = session;
  const contract = session.loaded.contract;
  const metric = contract.metric;
  if (loop.status !== "halted" || contract.mode !== "optimize" || !metric || loop.best.candidate_id === BASELINE_ID) return null;
  const state = await foldLoop(session);
  if (state.confirm?.candidate_id === loop.best.candidate_id) return null;
  const best = loop.best.candidate_id;
  progress(
    mode,
    `confirming ${best} against t0: ${metric.name} interleaved (t0 at ${shortCommit(state.t0.commit)}, then ${best} at ${shortCommit(loop.best.commit)})…`,
  );
  return withClone(session.repo, state.t0.commit, "confirm-t0", (t0) =>
    withClone(session.repo, loop.best.commit, "confirm-best", async (bestClone) => {
      // samplePairs measures its "best" first: here that is t0.
      const samples: PairedSamples = { best: [], candidate: [] };
      let wanted = metric.samples.min;
      // The claim on the measurement lapses without a request for its TTL (DESIGN §11): while more pairs
      // are measured, the readings already sent are sent again every quarter of it, which renews it.
      let keepAlive: NodeJS.Timeout | undefined;
      try {
        for (;;) {
          await samplePairs(samples, wanted, { best: t0, candidate: bestClone }, contract, (done, of) =>
            liveStatus(mode, `confirm: ${metric.name} pair ${done}/${of} (t0, then ${best})`),
          );
          if (samples.error !== undefined) {
            progress(mode, `confirm: no figure recorded, a reading failed (${samples.error.replace(/^best-so-far/, "t0").replace(/^candidate/, best)})`);
            return null;
          }
          clearInterval(keepAlive);
          const request = { candidate_id: best, samples: { t0: [...samples.best], best: [...samples.candidate] }, labels: session.labels };
          let answer: Awaited<ReturnType<Client["confirm"]>>;
          try {
            answer = await session.client.confirm(loop.loop_id, request);
          } catch (error) {
            // Another runner claimed this best's confirm measurement first (DESIGN §11): its figure, not
            // this one, is the receipt's; nothing is lost by stopping here.
            if (error instanceof CoordinatorError && (error.code === "confirm_not_yours" || error.code === "confirm_recorded")) {
              progress(mode, `confirm: ${error.code === "confirm_recorded" ? "already recorded" : "another runner is measuring it"} (${error.message})`);
              return null;
            }
            throw error;
          }
          if (answer.status === "recorded") {
            const { confirm } = answer;
            progress(
              mode,
              `confirmed against t0: ${best} ${confirm.metric} ${formatPercent(confirm.estimate)} better${formatInterval(confirm.interval)} over ${confirm.pairs} interleaved pair(s)`,
            );
            return answer.loop;
          }
          if (answer.ttl_ms !== undefined) {
            keepAlive = setInterval(
              () => {
                session.client.confirm(loop.loop_id, request).catch((error: unknown) => {
                  progress(mode, `confirm: renewing the claim failed (${(error as Error).message}); the next readings will say whether it still holds`);
                });
              },
              Math.max(1_000, Math.floor(answer.ttl_ms / 4)),
            );
          }
          wanted = samples.best.length + answer.more;
        }
      } finally {
        clearInterval(keepAlive);
      }
    }),
  );
}
