import { execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import path from "node:path";

// How a test meets a gate inside the exec zone (DESIGN §6.7): the zone sees none of the test's files and
// its pids are not the host's, so a gate leaves markers in its own clone (the one directory it may write,
// which the host sees at the same path) and waits there for a file the test writes; the test finds the
// clone by the marker, and finds processes by a marker on their command lines.

/** The directories directly under `root` (a runner's clones, `clonesOf(pid)`) that hold `file`, oldest name first. */
export function dirsHolding(root: string, file: string): string[] {
  let entries: string[];
  try {
    entries = readdirSync(root);
  } catch {
    return [];
  }
  return entries
    .map((entry) => path.join(root, entry))
    .filter((dir) => existsSync(path.join(dir, file)))
    .sort();
}

/**
 * The host's processes whose command line carries `marker` (`pgrep -af`, its own excluded), as "pid
 * command line" lines. The marker follows `--`, so one that begins with a dash (a workerd argument) is a
 * pattern, not an option; and only pgrep's "nothing matched" (exit 1) answers none: a query pgrep could
 * not run throws, never passing for a machine with nothing left running.
 */
export function processesWith(marker: string): string[] {
  try {
    return execFileSync("pgrep", ["-af", "--", marker], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
      .split("\n")
      .filter((line) => line.length > 0 && !line.includes("pgrep"));
  } catch (error) {
    if ((error as { status?: number | null }).status === 1) return [];
    throw error;
  }
}

/**
 * The processes carrying `marker` still there after `ms`: a killed process closes its pipes a moment
 * before the kernel lets it go, so a check made right after its runner ends allows for that moment.
 */
export async function survivorsAfter(marker: string, ms = 5_000): Promise<string[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = processesWith(marker);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Kills the processes `processesWith` listed (by pid), so a failed check leaves nothing running. */
export function killListed(lines: readonly string[]): void {
  for (const line of lines) {
    try {
      process.kill(Number(line.split(" ")[0]), "SIGKILL");
    } catch {
      // Gone meanwhile.
    }
  }
}
