import { formatDuration } from "#shared/duration.js";
import { foldEvents, reportedCounts, type LoopEvent, type LoopState } from "#shared/engine/index.js";
import { CoordinatorError } from "../coordinator/client.js";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { emitResult, paint, progress, type OutputMode } from "../output.js";
import { stdoutClosed } from "../process/shutdown.js";
import { resolveTarget } from "../coordinator/target.js";
import { formatInterval, formatPercent } from "#shared/format-percent.js";
import type { LoopSummary } from "#shared/wire/api.js";
import { followEvents } from "../coordinator/event-stream.js";

/** One human line for an event of the log, given the loop's state folded up to it (its test counts come from there). */
export function describeEvent(event: LoopEvent, state: LoopState | null = null): string {
  const at = event.at.slice(11, 19);
  const prefix = `${paint(`#${event.seq}`, "dim")} ${at}`;
  switch (event.type) {
    case "loop_created":
      return `${prefix} loop created: ${event.data.contract.name} (${event.data.contract.mode}), t0 ${event.data.t0.commit.slice(0, 10)}`;
    case "candidate_proposed": {
      const agent = event.data.agent;
      const run = agent ? `agent ${agent.timed_out ? "timed out" : `exit ${agent.exit_code ?? "signal"}`} in ${formatDuration(agent.duration_ms)}` : "via step";
      const review = event.data.review_request ? `; asks a person to allow its change to ${event.data.review_request.files.join(", ")}` : "";
      return `${prefix} ${event.data.candidate_id} proposed at ${event.data.commit.slice(0, 10)} (${run}${event.data.empty ? ", no change" : ""})${review}`;
    }
    case "lease_granted":
      return `${prefix} ${event.data.candidate_id} leased to ${event.data.runner_id} (token ${event.data.fencing_token})`;
    case "lease_renewed":
      return `${prefix} ${event.data.candidate_id} lease renewed`;
    case "lease_expired":
      return `${prefix} ${event.data.candidate_id} lease expired; back in the queue`;
    case "lease_released":
      return `${prefix} ${event.data.candidate_id} lease released by its runner; back in the queue`;
    case "lease_requeued":
      return `${prefix} ${event.data.candidate_id} not judged: measured against ${event.data.compare_to.candidate_id}, but the best is now ${event.data.best.candidate_id}; back in the queue`;
    case "observation_reported": {
      const { observation } = event.data;
      const gates = observation.gates
        .map(
          (gate) =>
            `${gate.name} ${gate.timed_out ? "timed out" : `exit ${gate.exit_code ?? gate.signal}`}${gate.report_error ? " (test report unreadable)" : ""}`,
        )
        .join(", ");
      // A report is a difference from t0's collected set: its counts are read from the folded standing.
      const standing = state?.candidates[event.data.candidate_id]?.report?.tests;
      const counts = standing ? reportedCounts(standing) : null;
      const tests = counts && counts.passing + counts.failing > 0 ? `; tests ${counts.passing} passing, ${counts.failing} failing` : "";
      return `${prefix} ${event.data.candidate_id} observed: ${gates}${tests}`;
    }
    case "verdict": {
      const word =
        event.data.decision === "promoted"
          ? paint("promoted", "green")
          : event.data.decision === "need_samples"
            ? paint("needs more samples", "yellow")
            : paint("rejected", "red");
      return `${prefix} ${event.data.candidate_id} ${word} (${event.data.reason}): ${event.data.detail}`;
    }
    case "halted":
      return `${prefix} halted: ${event.data.halt_reason} (exit ${event.data.exit_class}): ${event.data.detail}`;
    case "confirm_claimed":
      return `${prefix} the confirm measurement of ${event.data.candidate_id} is claimed by ${event.data.holder}`;
    case "confirm_measured": {
      const { data } = event;
      return `${prefix} confirmed against t0: ${data.candidate_id} ${data.metric} ${formatPercent(data.estimate)} better${formatInterval(data.interval)} over ${data.pairs} interleaved pair(s)`;
    }
    case "receipt_issued":
      return `${prefix} ${event.data.kind} receipt ${event.data.receipt_id} signed over events 1-${event.data.head.seq} (key ${event.data.keyid})`;
    case "cancel_requested":
      return `${prefix} cancel requested by ${event.data.by}${event.data.reason ? `: ${event.data.reason}` : ""}`;
    case "recheck_reported":
      return `${prefix} ${event.data.candidate_id}'s gates re-run${event.data.purpose === "resume" ? " on resume" : ""} by ${event.data.runner_id}`;
    case "review_decided":
      return `${prefix} ${event.data.candidate_id}'s change to ${event.data.files.join(", ")} ${event.data.decision === "ack" ? paint("approved", "green") : paint("refused", "red")} by ${event.data.by}: ${event.data.note}`;
    case "review_timed_out":
      return `${prefix} nobody answered ${event.data.candidate_id}'s review request by ${event.data.deadline}`;
    case "context_unsatisfiable":
      return `${prefix} the agent's context needs ${event.data.needed} tokens, over the budget of ${event.data.budget}: the agent was not run`;
  }
}

/**
 * `loopwarden watch [LOOP]`: prints the event log as the coordinator pushes it (Server-Sent Events,
 * coordinator/event-stream.ts), until the loop halts (or Ctrl-C). A dropped connection is opened again
 * from the last event printed: nothing is missed, nothing printed twice.
 */
export async function watchCommand(loopArg: string | undefined, options: ServerOptions & OutputMode & { cwd: string }): Promise<number> {
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const { client } = connection;
    // No log yet: a runner with the contract's labels is to measure t0. Said once; its events follow.
    await client.getLoop(loopId).catch((error: unknown) => {
      if (!(error instanceof CoordinatorError && error.code === "awaiting_baseline")) throw error;
      progress(options, error.message);
    });
    let state: LoopState | null = null;
    let halted: LoopSummary | null = null;
    await followEvents(
      client,
      loopId,
      0,
      async (event) => {
        const folded = foldEvents([event], state);
        if (!folded) throw new Error(`event ${event.seq} folds to no loop`);
        state = folded;
        if (!options.json && !options.quiet) process.stdout.write(`${describeEvent(event, folded)}\n`);
        // Its reader went away (`watch | head -1`): there is no one left to print for.
        if (stdoutClosed()) return true;
        if (!folded.halt) return false;
        // Halted: done once every event the loop has (its final receipt's too) is printed.
        const loop = await client.getLoop(loopId);
        if (event.seq < loop.head.seq) return false;
        halted = loop;
        return true;
      },
      (why: string) => progress(options, `the event stream was interrupted (${why}); reading on from where it stopped`),
    );
    const loop = halted as LoopSummary | null;
    if (!loop?.halt) return 0;
    emitResult(
      options,
      {
        status: "halted",
        loop_id: loop.loop_id,
        iteration: loop.iteration,
        halt_reason: loop.halt.halt_reason,
        exit_class: loop.halt.exit_class,
        ...(loop.halt.still_improving === undefined ? {} : { still_improving: loop.halt.still_improving }),
      },
      [],
    );
    return 0;
  });
}
