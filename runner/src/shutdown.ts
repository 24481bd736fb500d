// Cleanup on SIGINT/SIGTERM: the process groups of running gates and agents, and a local coordinator
// this process started, are stopped before the runner exits — nothing it started outlives it.

type Cleanup = () => void | Promise<void>;

const cleanups = new Set<Cleanup>();
let installed = false;
let shuttingDown = false;

async function shutdown(signal: NodeJS.Signals): Promise<void> {
  if (shuttingDown) return;
  shuttingDown = true;
  process.stderr.write(`\nloopwarden: ${signal}, stopping what this run started…\n`);
  // Newest first: running commands before the coordinator they report to.
  for (const cleanup of [...cleanups].reverse()) {
    try {
      await cleanup();
    } catch {
      // Best effort: keep stopping the rest.
    }
  }
  process.exit(signal === "SIGINT" ? 130 : 143);
}

/** Registers a cleanup to run if the runner is interrupted; returns its unregistration. */
export function onShutdown(cleanup: Cleanup): () => void {
  if (!installed) {
    installed = true;
    process.on("SIGINT", (signal) => void shutdown(signal));
    process.on("SIGTERM", (signal) => void shutdown(signal));
  }
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}
