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
