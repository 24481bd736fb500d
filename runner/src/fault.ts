// Fault injection for crash tests (DESIGN §4: a crash at any point loses nothing). With
// LOOPWARDEN_FAULT=<point> in the runner's own environment, the runner kills itself with SIGKILL when it
// reaches that point, exactly as a crash would: no cleanup, no shutdown handlers. Agents and gates run
// with their own environments and cannot set it for the runner.

/**
 * The points a test can crash the runner at. In the order a loop's creation passes them: its request
 * saved but not sent; the coordinator's answer received, the baseline's logs not uploaded; the logs
 * uploaded, the loop not yet recorded in the workspace. Then, in `run`'s iterations: a rejection's
 * return of the working tree to the best commit begun and left running (`restore-begun`).
 */
export type FaultPoint = "create-saved" | "create-answered" | "loop-created" | "restore-begun";

/** Crashes the process here when LOOPWARDEN_FAULT names this point; does nothing otherwise. */
export function faultPoint(point: FaultPoint): void {
  if (process.env.LOOPWARDEN_FAULT === point) process.kill(process.pid, "SIGKILL");
}
