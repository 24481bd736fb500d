import { randomBytes } from "node:crypto";
import { formatDuration } from "#shared/duration.js";
import { labelsSatisfy, recheckEvery, type LoopState } from "#shared/engine/index.js";
import { compactTests } from "#shared/engine/test-sets.js";
import type { LoopSummary } from "#shared/wire/api.js";
import { boundedErrors, storeLogs } from "../evaluation/artifact-files.js";
import { evaluateCommit } from "../evaluation/evaluate.js";
import { liveStatus, paint, progress } from "../output.js";
import { shortCommit } from "../process/git.js";
import { timed } from "../timings.js";
import { stateAtHead } from "./event-log.js";
import type { Session } from "./session-type.js";

// Re-running the best's gates before an agent run (DESIGN §6.5, docs/design.md): on resume, the check
// must still give the best's recorded outcome — the check, its dependencies or the machine may have
// changed meanwhile — and every `determinism.recheck_every` iterations the re-run is one more sample of
// the loop's flake monitor. The runner measures and reports; the coordinator judges the run against what
// it recorded (`recheckBest`) and halts the loop `check_flaky` when the check can no longer be trusted.

/** Why the best is re-run now: `resume` before a resumed loop's first agent run, `periodic` when due, or null. */
export function recheckDue(state: LoopState, resumedNow: boolean): "resume" | "periodic" | null {
  if (resumedNow) return "resume";
  // A loop from before the flake monitor keeps its old rule and its old cost: no periodic rechecks.
  if (!state.monitor) return null;
  const every = recheckEvery(state.contract, state.t0_check_ms);
  if (every === null || state.iterations === 0 || state.iterations % every !== 0) return null;
  return state.last_recheck_iteration === state.iterations ? null : "periodic";
}

/**
 * Before iteration `iteration`'s agent run: the best's gates once in a fresh clone when a recheck is due
 * (`recheckDue`), reported to the coordinator; answers the loop after it (halted when the check drifted).
 * A runner without the contract's evaluate.labels leaves it be: it does not measure this loop's check.
 */
export async function recheckBeforeAgent(session: Session, iteration: number, resumedNow: boolean): Promise<LoopSummary> {
  const { mode, client, loaded } = session;
  if (!labelsSatisfy(loaded.contract.evaluate?.labels ?? {}, session.labels)) return session.loop;
  const state = await stateAtHead(session);
  const purpose = recheckDue(state, resumedNow);
  if (!purpose) return session.loop;
  const best = state.best;
  const why = purpose === "resume" ? "the loop resumed" : `every ${recheckEvery(state.contract, state.t0_check_ms) ?? 0} iterations`;
  progress(mode, `[${iteration}] re-running the best's gates (${best.candidate_id} at ${shortCommit(best.commit)}) in a clean clone: ${why}…`);
  const started = performance.now();
  const evaluation = await timed("recheck", () =>
    evaluateCommit({
      repo: session.repo,
      commit: best.commit,
      contract: loaded.contract,
      label: `recheck-${best.candidate_id}`,
      onGateStart: (gate) => liveStatus(mode, `[${iteration}] recheck: gate ${gate.name}`),
    }),
  );
  const warn = (text: string) => progress(mode, `[${iteration}]   ${paint("warning", "yellow")}: ${text}`);
  const errors = boundedErrors(await timed("upload", () => storeLogs(client, session.loop.loop_id, evaluation, warn)));
  const answer = await timed("report", () =>
    client.recheck(session.loop.loop_id, {
      idempotency_key: `recheck-${randomBytes(16).toString("hex")}`,
      candidate_id: best.candidate_id,
      commit: best.commit,
      purpose,
      runner_id: session.workspace.runner_id,
      observation: {
        ...evaluation.observation,
        tests: compactTests(evaluation.observation.tests, state.t0_base),
        ...(errors.length > 0 ? { artifact_errors: errors } : {}),
      },
      labels: session.labels,
    }),
  );
  const took = formatDuration(Math.round(performance.now() - started));
  if (answer.changed_count === 0) progress(mode, `[${iteration}] the best's gates gave its recorded outcome again (${took})`);
  else {
    const shown = answer.changed.slice(0, 5).join(", ") + (answer.changed_count > 5 ? `, and ${answer.changed_count - 5} more` : "");
    progress(mode, `[${iteration}] ${paint("the best's gates gave another outcome", "yellow")} than recorded for ${shown} (${took})`);
  }
  return answer.loop;
}
