import { open, readFile, rm, stat } from "node:fs/promises";

// One lock for the few things only one process may do at a time: start the warm local coordinator of a
// state directory (runner/src/coordinator/warm-coordinator.ts), build the worker bundle (worker-bundle.ts). Here,
// under scripts/lib, because both the runner and the build use it and the build imports no runner code.
//
// The lock is a file created exclusively (`open(…, "wx")`) that names its owner's pid. A lock whose owner
// has died is taken over at once; one still unnamed after UNNAMED_STALE_MS (its owner died between
// creating and naming it) too. No age limit otherwise: a live owner keeps its lock however long its work.

/** How long a lock may stay without its owner's pid before it counts as left behind. */
const UNNAMED_STALE_MS = 5_000;

/** A lock taken: `release` removes it (once). */
export interface HeldLock {
  release(): Promise<void>;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, as another user's process.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Takes the lock at `file`, waiting while another live process holds it, polling every `pollMs`. While it
 * waits, `instead` (when given) is asked between tries: a value it answers ends the wait without the lock
 * (what the lock's holder was doing is done). Throws after `timeoutMs`, naming `what` it waited for.
 */
export async function acquireFileLock<T = never>(
  file: string,
  options: { timeoutMs: number; pollMs: number; what: string; instead?: () => Promise<T | null> },
): Promise<{ lock: HeldLock } | { instead: T }> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    const handle = await open(file, "wx").catch((error: NodeJS.ErrnoException) => {
      if (error.code === "EEXIST") return null;
      throw error;
    });
    if (handle) {
      try {
        await handle.writeFile(String(process.pid));
      } finally {
        await handle.close();
      }
      let released = false;
      return {
        lock: {
          release: async () => {
            if (released) return;
            released = true;
            await rm(file, { force: true });
          },
        },
      };
    }
    const done = await options.instead?.();
    if (done !== undefined && done !== null) return { instead: done };
    const owner = Number(await readFile(file, "utf8").catch(() => ""));
    const age = Date.now() - ((await stat(file).catch(() => null))?.mtimeMs ?? Date.now());
    // `recursive`: a lock an older version left as a directory is removed all the same.
    if ((owner > 0 && !isAlive(owner)) || (!(owner > 0) && age > UNNAMED_STALE_MS)) await rm(file, { recursive: true, force: true });
    else if (Date.now() > deadline) throw new Error(`waited ${Math.round(options.timeoutMs / 1_000)}s for ${options.what} (${file})`);
    else await new Promise((resolve) => setTimeout(resolve, options.pollMs));
  }
}
