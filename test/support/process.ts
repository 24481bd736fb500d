import { existsSync, readFileSync } from "node:fs";

/** Whether a process is running (a zombie waiting to be reaped by a container's init does not count). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, "utf8") : "";
  return !/\) Z /.test(stat);
}

/**
 * Whether a process is gone within `ms`. A killed process closes its pipes a moment before the kernel
 * marks it dead, so a check made right after its output ends must allow for that moment.
 */
export async function isGoneWithin(pid: number, ms = 2_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (isAlive(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}
