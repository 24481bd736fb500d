import { spawn } from "node:child_process";
import { onShutdown } from "./shutdown.js";

/** How a command ended. `output` is stdout and stderr interleaved as written, truncated to its tail. */
export interface CommandResult {
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  duration_ms: number;
  output: Buffer;
  truncated: boolean;
}

/** Captured output kept per command; beyond it the head is dropped and the tail kept. */
export const MAX_CAPTURED_BYTES = 8 * 1024 * 1024;
/** After a timeout, the process group gets SIGTERM, then SIGKILL this long after. */
const KILL_GRACE_MS = 2_000;

/**
 * Runs a shell command in its own process group, capturing its output once. On timeout the whole
 * group is killed (children included), so a hung gate never outlives its limit.
 */
export function runCommand(
  command: string,
  options: { cwd: string; timeoutMs: number; env?: NodeJS.ProcessEnv; onOutput?: (chunk: Buffer) => void },
): Promise<CommandResult> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/sh", ["-c", command], {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const chunks: Buffer[] = [];
    let size = 0;
    let truncated = false;
    const collect = (chunk: Buffer) => {
      options.onOutput?.(chunk);
      chunks.push(chunk);
      size += chunk.length;
      while (size > MAX_CAPTURED_BYTES && chunks.length > 1) {
        size -= chunks.shift()?.length ?? 0;
        truncated = true;
      }
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);

    let timedOut = false;
    let killTimer: NodeJS.Timeout | undefined;
    const killGroup = (signal: NodeJS.Signals) => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, signal);
      } catch {
        // The group is already gone.
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup("SIGTERM");
      killTimer = setTimeout(() => killGroup("SIGKILL"), KILL_GRACE_MS);
    }, options.timeoutMs);

    const unregister = onShutdown(() => killGroup("SIGKILL"));
    child.on("error", (error) => {
      clearTimeout(timer);
      clearTimeout(killTimer);
      unregister();
      reject(error);
    });
    // When the shell exits, anything it left running in its group (a backgrounded child holding the
    // output pipe open) goes with it, so the result never waits on a straggler.
    child.on("exit", () => killGroup("SIGKILL"));
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      clearTimeout(killTimer);
      unregister();
      resolve({
        exit_code: code,
        signal,
        timed_out: timedOut,
        duration_ms: Math.round(performance.now() - started),
        output: Buffer.concat(chunks),
        truncated,
      });
    });
  });
}
