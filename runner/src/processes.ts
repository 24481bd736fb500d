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
