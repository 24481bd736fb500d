// Cleanup on SIGINT/SIGTERM: the process groups of running gates and agents, and a local coordinator
// this process started, are stopped before the runner exits — nothing it started outlives it.

type Cleanup = () => void | Promise<void>;

const cleanups = new Set<Cleanup>();
let installed = false;
let shuttingDown = false;
/** A command that stops gracefully on the first signal (`work` finishes the job in hand); the second stops at once. */
let drain: (() => void) | null = null;
/**
 * What that command does first when it is stopped at once, before any other cleanup: `work` stops its
 * jobs (so none goes on to report) and gives their leases back while its coordinator still runs.
 */
let stopNow: Cleanup | null = null;

async function shutdown(signal: NodeJS.Signals): Promise<void> {
  if (shuttingDown) return;
  shuttingDown = true;
  const first = stopNow;
  stopNow = null;
  // Said only when there is something to stop: a process that merely loaded the runner's modules (a test
  // worker torn down with SIGTERM) exits as quietly as it would have.
  if (cleanups.size > 0 || first) process.stderr.write(`\nloopwarden: ${signal}, stopping what this run started…\n`);
  if (first) {
    try {
      await first();
    } catch {
      // Best effort: the cleanups below still run.
    }
  }
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

function onSignal(signal: NodeJS.Signals): void {
  const graceful = drain;
  if (graceful) {
    drain = null;
    process.stderr.write(`\nloopwarden: ${signal}, finishing what is in hand (${signal} again stops at once)…\n`);
    graceful();
    return;
  }
  void shutdown(signal);
}

function install(): void {
  if (installed) return;
  installed = true;
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
}

let stdoutGone = false;

/**
 * A reader that stops early (`loopwarden status | head -1`) closes the pipe: what the command still
 * writes has nowhere to go, which is no fault of the command's. Node reports it as an `error` event on
 * stdout or stderr, which unhandled crashed the process with a stack trace. Handled, the stream takes
 * no more output and the command goes on to its end and its usual exit code (a loop's halt class for
 * `run`); a command that would only go on printing (`watch`) asks `stdoutClosed()` and ends.
 */
export function surviveClosedPipes(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code !== "EPIPE") throw error;
      stream.write = () => true;
      if (stream === process.stdout) stdoutGone = true;
    });
  }
}

/** Whether stdout's reader went away (`surviveClosedPipes`): nothing written there is read any more. */
export function stdoutClosed(): boolean {
  return stdoutGone;
}

/** Registers a cleanup to run if the runner is interrupted; returns its unregistration. */
export function onShutdown(cleanup: Cleanup): () => void {
  install();
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}

/**
 * Makes the first SIGINT/SIGTERM call `graceful` instead of stopping: the command winds down by itself
 * (and exits when done); a second signal stops everything at once, as without it, after `immediate`
 * (run before every other cleanup). Returns its removal.
 */
export function drainOnFirstSignal(graceful: () => void, immediate?: Cleanup): () => void {
  install();
  drain = graceful;
  stopNow = immediate ?? null;
  return () => {
    if (drain === graceful) drain = null;
    if (immediate && stopNow === immediate) stopNow = null;
  };
}
