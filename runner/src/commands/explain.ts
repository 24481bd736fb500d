import { foldEvents, LoopEvent } from "#shared/engine/index.js";
import { explainState } from "#shared/explain/explain-state.js";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { UserError } from "../errors.js";
import { emitResult, type OutputMode } from "../output.js";
import { resolveTarget } from "../coordinator/target.js";

/** `loopwarden explain [LOOP]`: why the loop halted, the evidence, and whether to raise a limit or not retry. */
export async function explainCommand(loopArg: string | undefined, options: ServerOptions & OutputMode & { cwd: string }): Promise<number> {
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const events = (await connection.client.eventLines(loopId)).map((line) => LoopEvent.parse(JSON.parse(line)));
    const state = foldEvents(events);
    if (!state) throw new UserError(`loop ${loopId} has no events`);
    const { lines, retry } = explainState(state);
    const halt = state.halt;
    emitResult(
      options,
      {
        status: halt ? "halted" : "running",
        loop_id: state.loop_id,
        iteration: state.iterations,
        ...(halt ? { halt_reason: halt.halt_reason, exit_class: halt.exit_class, detail: halt.detail } : {}),
        ...(halt?.still_improving === undefined ? {} : { still_improving: halt.still_improving }),
        retry,
        explanation: lines.join("\n"),
      },
      lines,
    );
    return 0;
  });
}
