import path from "node:path";
import { startLocalCoordinator } from "../local-coordinator.js";
import { emitResult, progress, type OutputMode } from "../output.js";
import { defaultStateDir } from "../paths.js";

/** `loopwarden serve`: the local coordinator (workerd through Miniflare) in the foreground until SIGINT/SIGTERM. */
export async function serveCommand(options: OutputMode & { port: number; state?: string | undefined }): Promise<number> {
  const stateDir = options.state ? path.resolve(options.state) : defaultStateDir();
  progress(options, `starting the local coordinator (state: ${stateDir})…`);
  const coordinator = await startLocalCoordinator({ stateDir, port: options.port, onNote: (text) => progress(options, text) });
  emitResult(options, { status: "ok", url: coordinator.url, pid: coordinator.pid, runtime_pid: coordinator.runtimePid, state_dir: stateDir }, [
    `loopwarden coordinator listening on ${coordinator.url}`,
    `  state: ${stateDir} (log: ${path.join(stateDir, "logs", "coordinator.log")})`,
    `  use it from another shell with --server ${coordinator.url} (or LOOPWARDEN_SERVER); stop with Ctrl-C`,
  ]);
  await new Promise<void>((resolve) => {
    process.once("SIGINT", () => resolve());
    process.once("SIGTERM", () => resolve());
  });
  progress(options, "stopping the coordinator…");
  await coordinator.stop();
  return 0;
}
