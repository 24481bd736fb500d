import { spawn } from "node:child_process";
import { mkdir, rm, stat, utimes, writeFile } from "node:fs/promises";
import path from "node:path";
import { formatDuration, parseDuration } from "#shared/duration.js";
import { UserError } from "../errors.js";
import { findRunningCoordinator, type CoordinatorRecord } from "./local-coordinator.js";
import { acquireFileLock } from "../../../scripts/lib/file-lock.js";
import { PACKAGE_ROOT } from "../paths.js";
import { isSameProcess } from "../process/processes.js";

// The warm local coordinator (DESIGN §12): a command that needs the local coordinator and finds none
// starts one in a process of its own, which stays up until no command has used it for an idle period,
// so later commands (and the URLs they print) find it answering. Commands mark their use by touching
// `activity` in the state directory (a long run, every half minute); the coordinator stops itself when
// that is older than its idle period. One start at a time: `coordinator.starting` is created exclusively.

/** How long a warm coordinator waits without use before it stops itself. */
export const DEFAULT_IDLE_MS = 15 * 60_000;
const BIN = path.join(PACKAGE_ROOT, "runner", "bin", "loopwarden.js");
const TOUCH_EVERY_MS = 30_000;
const START_TIMEOUT_MS = 60_000;

/** The idle period: LOOPWARDEN_IDLE (a duration like `15m`; `0` keeps no coordinator warm), else 15 minutes. */
export function idleMs(env: NodeJS.ProcessEnv = process.env): number {
  const value = env.LOOPWARDEN_IDLE?.trim();
  if (value === undefined || value === "") return DEFAULT_IDLE_MS;
  if (value === "0") return 0;
  const parsed = parseDuration(value);
  if (parsed === null) throw new UserError(`LOOPWARDEN_IDLE=${value} is not a duration (e.g. 15m, 90s, or 0 for no warm coordinator)`, 2);
  return parsed;
}

const activityFile = (stateDir: string) => path.join(stateDir, "activity");

/** Marks the warm coordinator as used now. */
export async function touchActivity(stateDir: string): Promise<void> {
  const now = new Date();
  await utimes(activityFile(stateDir), now, now).catch(async () => writeFile(activityFile(stateDir), ""));
}

/** When a command last used this state directory's coordinator (ms since the epoch); 0 when never. */
export async function lastActivity(stateDir: string): Promise<number> {
  return (await stat(activityFile(stateDir)).catch(() => null))?.mtimeMs ?? 0;
}

/** Keeps marking use while a command holds the connection; answers the function that stops it (with a last mark). */
export function keepActive(stateDir: string): () => Promise<void> {
  const timer = setInterval(() => void touchActivity(stateDir).catch(() => undefined), TOUCH_EVERY_MS);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await touchActivity(stateDir).catch(() => undefined);
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Starts a warm coordinator for `stateDir` in a detached process (`serve --daemon`) and answers its
 * record once it answers. When another command is starting one, waits for that one instead.
 */
export async function startWarmCoordinator(stateDir: string, idle: number): Promise<CoordinatorRecord> {
  await mkdir(stateDir, { recursive: true });
  // Another command starting it meanwhile holds the lock: its coordinator, once it answers, is this one's too.
  const taken = await acquireFileLock(path.join(stateDir, "coordinator.starting"), {
    timeoutMs: START_TIMEOUT_MS,
    pollMs: 200,
    what: "another command to start the local coordinator",
    instead: () => findRunningCoordinator(stateDir),
  });
  if ("instead" in taken) return taken.instead;
  const deadline = Date.now() + START_TIMEOUT_MS;
  try {
    // One may have come up while this command waited for the lock.
    const already = await findRunningCoordinator(stateDir);
    if (already) return already;
    await touchActivity(stateDir);
    const child = spawn(process.execPath, [BIN, "--state", stateDir, "serve", "--daemon", "--idle", String(idle)], {
      detached: true,
      stdio: "ignore",
      env: process.env,
    });
    child.unref();
    let exited: number | null = null;
    child.once("exit", (code) => (exited = code ?? 1));
    for (;;) {
      const running = await findRunningCoordinator(stateDir);
      if (running) return running;
      if (exited !== null) {
        throw new Error(`the local coordinator exited (${exited}) before it answered; see ${path.join(stateDir, "logs", "coordinator.log")}`);
      }
      if (Date.now() > deadline)
        throw new Error(`the local coordinator did not answer within ${START_TIMEOUT_MS / 1_000}s; see ${path.join(stateDir, "logs", "coordinator.log")}`);
      await sleep(100);
    }
  } finally {
    await taken.lock.release();
  }
}

/** Stops the coordinator serving `stateDir` (warm or `serve`), by its pid; answers its pid, or null when none runs. */
export async function stopCoordinator(stateDir: string): Promise<number | null> {
  const running = await findRunningCoordinator(stateDir);
  if (!running) return null;
  process.kill(running.pid, "SIGTERM");
  const deadline = Date.now() + 15_000;
  const stillRunning = () => isSameProcess(running.pid, running.started);
  while (stillRunning() && Date.now() < deadline) await sleep(100);
  if (stillRunning()) {
    // It did not stop in time: stop it and its workerd for good.
    process.kill(running.pid, "SIGKILL");
    if (running.runtime_pid && isSameProcess(running.runtime_pid, running.runtime_started)) process.kill(running.runtime_pid, "SIGKILL");
    await rm(path.join(stateDir, "coordinator.json"), { force: true });
  }
  return running.pid;
}

/** How a warm coordinator's idle period reads in messages. */
export function describeIdle(idle: number): string {
  return `it stays up until ${formatDuration(idle)} without use; \`loopwarden serve --stop\` ends it`;
}
