import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { resolveTarget } from "../coordinator/target.js";
import { emitResult, type OutputMode } from "../output.js";

/**
 * `loopwarden cancel [LOOP] [--reason TEXT]`: stops a running loop on purpose (halt reason `cancelled`,
 * exit class 11). The coordinator records who asked and why, halts the loop — its runners stop at their
 * next heartbeat or report — and signs its final receipt like any halt's. Cancelling a cancelled loop
 * answers it again; a loop halted for another reason keeps its halt (exit 1, `loop_halted`).
 */
export async function cancelCommand(
  loopArg: string | undefined,
  options: ServerOptions & OutputMode & { cwd: string; reason?: string | undefined },
): Promise<number> {
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const { loop, replayed } = await connection.client.cancelLoop(loopId, options.reason === undefined ? {} : { reason: options.reason });
    const halt = loop.halt;
    const receiptUrl = loop.receipt_id ? `${connection.url}/r/${loop.receipt_id}` : undefined;
    emitResult(
      options,
      {
        status: "halted",
        loop_id: loop.loop_id,
        iteration: loop.iteration,
        ...(halt ? { halt_reason: halt.halt_reason, exit_class: halt.exit_class } : {}),
        ...(receiptUrl ? { receipt_url: receiptUrl } : {}),
        replayed,
      },
      [
        `loop ${loop.loop_id} ${replayed ? "was cancelled already" : "cancelled"}: ${halt ? `${halt.halt_reason} (exit ${halt.exit_class}) — ${halt.detail}` : "halted"}`,
        ...(receiptUrl ? [`  receipt: ${receiptUrl}`] : []),
      ],
    );
    return 0;
  });
}
