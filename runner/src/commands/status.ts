import { CoordinatorError } from "../coordinator/client.js";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { emitResult, type OutputMode } from "../output.js";
import { resolveTarget } from "../coordinator/target.js";

/** `loopwarden status [LOOP]`: the loop's state summary. Without LOOP, the repository's current loop. */
export async function statusCommand(loopArg: string | undefined, options: ServerOptions & OutputMode & { cwd: string }): Promise<number> {
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const loop = await connection.client.getLoop(loopId).catch((error: unknown) => {
      // Created with its baseline left to a runner with the contract's labels: no log yet, and that is its status.
      if (error instanceof CoordinatorError && error.code === "awaiting_baseline") return error;
      throw error;
    });
    if (loop instanceof CoordinatorError) {
      emitResult(options, { status: "awaiting_baseline", loop_id: loopId }, [loop.message]);
      return 0;
    }
    const stored = await connection.client.listArtifacts(loopId);
    const count = `${stored.artifacts.length}${stored.next_cursor ? "+" : ""}`;
    const halt = loop.halt;
    emitResult(
      options,
      {
        status: loop.status,
        loop_id: loop.loop_id,
        iteration: loop.iteration,
        ...(halt
          ? {
              halt_reason: halt.halt_reason,
              exit_class: halt.exit_class,
              ...(halt.still_improving === undefined ? {} : { still_improving: halt.still_improving }),
            }
          : {}),
        loop,
        artifacts: stored.artifacts,
      },
      [
        `loop ${loop.loop_id} (${loop.name}, ${loop.mode}): ${loop.status}${halt ? ` — ${halt.halt_reason} (exit ${halt.exit_class})` : ""}`,
        `  iterations: ${loop.iteration} of ${loop.max_iterations}`,
        `  baseline:   ${loop.t0.commit.slice(0, 10)} with ${loop.t0.failing} failing`,
        `  best:       ${loop.best.candidate_id} at ${loop.best.commit.slice(0, 10)} with ${loop.best.failing} failing`,
        ...(halt ? [`  why:        ${halt.detail}`] : []),
        `  event log:  ${loop.head.seq} events, head ${loop.head.hash.slice(0, 16)}…`,
        // Counted, not named: storage keeps a file under its download name (`stamp.txt`), while a candidate's
        // evidence, which `loopwarden artifacts` lists, names it by its path in the clone (`out/stamp.txt`).
        ...(stored.artifacts.length > 0 ? [`  artifacts:  ${count} stored (each candidate's, by path: loopwarden artifacts [CANDIDATE])`] : []),
      ],
    );
    return 0;
  });
}
