/**
 * Waits `ms`, or until `signal` aborts — at once if it already has. A listener added to an aborted
 * signal never fires: `loopwarden work` stopped while it was reading its loops (its first SIGINT aborts
 * the signal, then the runner found none and paused) waited out the whole 10 s pause before exiting.
 */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
