import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
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

/**
 * The fields of a `/proc/<pid>/stat` line after the command name, from the state (field 3) on: `[1]` is
 * the parent's pid, `[19]` the start time. The name may hold spaces and parentheses, so the fields are
 * read after its last ")".
 */
export function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/**
 * When the process `pid` started, in clock ticks since boot (`/proc/<pid>/stat`'s 22nd field); null
 * where it cannot be read (no such process, not Linux). A pid the kernel gave to another process since
 * has another start time: a pid recorded earlier names the same process only while this still matches
 * (pids come round again within minutes on a machine that starts many processes and threads).
 */
export function processStartTicks(pid: number): number | null {
  if (!Number.isInteger(pid) || pid <= 0) return null;
  try {
    const ticks = Number(statFields(readFileSync(`/proc/${pid}/stat`, "utf8"))[19]);
    return Number.isSafeInteger(ticks) ? ticks : null;
  } catch {
    return null;
  }
}

/**
 * Whether `pid` is still the process recorded with it: alive, and started when it was recorded to have
 * started (`processStartTicks`). Without a recorded start (an older record, a system without /proc),
 * only whether it is alive.
 */
export function isSameProcess(pid: number, startTicks: number | null | undefined): boolean {
  if (!isProcessAlive(pid)) return false;
  if (startTicks === null || startTicks === undefined) return true;
  const now = processStartTicks(pid);
  return now === null || now === startTicks;
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
