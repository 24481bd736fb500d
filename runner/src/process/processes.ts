import { execFile } from "node:child_process";
import { access, constants } from "node:fs/promises";
import path from "node:path";

// Small facts about processes and programs on this machine, asked the same way everywhere.

/** Whether a process with this pid exists (one of another user's counts: signalling it is refused, not failed). */
export function isProcessAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The first executable named `name` in `dirs`, in order; null when none has it. */
export async function executableIn(dirs: readonly string[], name: string): Promise<string | null> {
  for (const dir of dirs) {
    const candidate = path.join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not here; the next directory.
    }
  }
  return null;
}

/** The first executable named `name` on PATH, then in `extraDirs`; null when none has it. */
export function findExecutable(name: string, extraDirs: readonly string[] = []): Promise<string | null> {
  return executableIn([...(process.env.PATH ?? "").split(path.delimiter).filter(Boolean), ...extraDirs], name);
}

/**
 * Runs a command once to learn whether this machine can (a sandbox, a namespace): null when it exits 0,
 * else the last line it said on stderr (or the error), as the reason it cannot.
 */
export function tryCommand(argv: readonly string[]): Promise<string | null> {
  return new Promise((resolve) => {
    const [file, ...args] = argv;
    if (!file) return resolve("no command");
    execFile(file, args, { timeout: 10_000 }, (error, _stdout, stderr) => {
      if (!error) return resolve(null);
      resolve(String(stderr).trim().split("\n").filter(Boolean).pop() || error.message);
    });
  });
}
