import { spawn } from "node:child_process";
import { UserError } from "../errors.js";
import { findExecutable, tryCommand } from "./processes.js";
import { onShutdown } from "./shutdown.js";
import { countSpawn } from "../timings.js";
import { requireSandbox, zoneArgs, type ZoneSpec } from "../zones/sandbox.js";
import { takeWarmZone } from "../zones/warm-zones.js";

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

/** The network a command sees: the host's, or none (a network namespace of its own, DESIGN §5 `exec`). */
export type NetworkMode = "none" | "host";

/** Whether commands can be isolated from the network here, and how (the argv to put before the command). */
export type NetworkIsolation = { available: true; prefix: string[]; how: string } | { available: false; reason: string };

// Inside the new namespace only a loopback interface exists, and it is down: bring it up, so a gate can
// still use 127.0.0.1 among its own processes (a test server), then run the command in a shell of its
// own. Arguments: $1 the `ip` binary, $2 the command. Both shells are exec'd in place, so the process
// runCommand spawned stays the process group's leader and a timeout still kills the whole group.
const ISOLATED_SHELL = [
  '"$1" link set lo up || { echo "loopwarden: cannot bring up the loopback interface of the gate\'s network namespace" >&2; exit 125; }',
  'exec /bin/sh -c "$2"',
].join("\n");

/**
 * Finds how to run a command in a network namespace of its own on this machine, by trying it once:
 * `unshare --net` as root, else `unshare --map-root-user --net` (an unprivileged user namespace, in
 * which the command sees itself as root while its files stay the caller's), each wrapping a shell that
 * brings the namespace's loopback up with iproute2's `ip`. Exported with its binaries as parameters
 * for tests; commands use `networkIsolation()`, which probes once per process.
 */
export async function probeNetworkIsolation(binaries: { unshare?: string | null; ip?: string | null } = {}): Promise<NetworkIsolation> {
  if (process.platform !== "linux") return { available: false, reason: `network namespaces are a Linux feature and this is ${process.platform}` };
  const unshare = binaries.unshare === undefined ? await findExecutable("unshare") : binaries.unshare;
  if (!unshare) return { available: false, reason: "util-linux's unshare is not installed (or not on PATH)" };
  const ip = binaries.ip === undefined ? await findExecutable("ip", ["/usr/sbin", "/sbin"]) : binaries.ip;
  if (!ip) return { available: false, reason: "iproute2's ip is not installed, and it is needed to bring up the namespace's loopback" };
  const attempts = process.getuid?.() === 0 ? [["--net"], ["--map-root-user", "--net"]] : [["--map-root-user", "--net"]];
  let reason = "";
  for (const flags of attempts) {
    const prefix = [unshare, ...flags, "/bin/sh", "-c", ISOLATED_SHELL, "loopwarden-netns", ip];
    const failure = await tryCommand([...prefix, "true"]);
    if (failure === null) return { available: true, prefix, how: `unshare ${flags.join(" ")}` };
    reason = `unshare ${flags.join(" ")}: ${failure}`;
  }
  return { available: false, reason };
}

let isolation: Promise<NetworkIsolation> | undefined;

/** How this machine isolates commands from the network, probed on first use and remembered. */
export function networkIsolation(): Promise<NetworkIsolation> {
  isolation ??= probeNetworkIsolation();
  return isolation;
}

/** The refusal when a contract asks for `exec.network: none` and this machine cannot provide it. */
export function isolationUnavailable(reason: string): UserError {
  return new UserError(
    `the contract asks for exec.network: none (gates without network), and this machine cannot isolate them: ${reason}. ` +
      "Run where network namespaces are available (Linux with unprivileged user namespaces allowed, or as root, with util-linux and iproute2), " +
      "or remove exec from the contract to run the gates with the host's network",
    2,
  );
}

/** The argv prefix that isolates a command from the network; refuses (never runs unisolated) when there is none. */
export async function requireNetworkIsolation(): Promise<string[]> {
  const found = await networkIsolation();
  if (!found.available) throw isolationUnavailable(found.reason);
  return found.prefix;
}

/**
 * Runs a shell command in its own process group, capturing its output once. On timeout the whole
 * group is killed (children included), so a hung gate never outlives its limit. With `network: "none"`
 * the command runs in a network namespace of its own (loopback only), or not at all.
 */
export async function runCommand(
  command: string,
  options: {
    cwd: string;
    timeoutMs: number;
    env?: NodeJS.ProcessEnv;
    onOutput?: ((chunk: Buffer) => void) | undefined;
    network?: NetworkMode;
    /** Aborting kills the command's whole process group at once and rejects with the signal's reason (a lost lease). */
    signal?: AbortSignal | undefined;
    /**
     * Runs the command confined in a zone (DESIGN §6.7), whose own `network` then applies; never
     * unconfined instead when no zone can be built here.
     */
    zone?: ZoneSpec | undefined;
  },
): Promise<CommandResult> {
  options.signal?.throwIfAborted();
  countSpawn();
  const zone = options.zone ? zoneArgs(await requireSandbox(), options.zone) : null;
  const [file = "/bin/sh", ...args] = zone
    ? [...zone, "/bin/sh", "-c", command]
    : options.network === "none"
      ? [...(await requireNetworkIsolation()), command]
      : ["/bin/sh", "-c", command];
  const env = options.env ?? process.env;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    // A zone started ahead for exactly these arguments (warm-zones.ts) when there is one, else a new one.
    const child = (zone && takeWarmZone(zone, command, env)) || spawn(file, args, { cwd: options.cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
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
    const abort = () => killGroup("SIGKILL");
    options.signal?.addEventListener("abort", abort, { once: true });
    child.on("error", (error) => {
      clearTimeout(timer);
      clearTimeout(killTimer);
      unregister();
      options.signal?.removeEventListener("abort", abort);
      reject(error);
    });
    // When the shell exits, anything it left running in its group (a backgrounded child holding the
    // output pipe open) goes with it, so the result never waits on a straggler.
    child.on("exit", () => killGroup("SIGKILL"));
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      clearTimeout(killTimer);
      unregister();
      options.signal?.removeEventListener("abort", abort);
      if (options.signal?.aborted) {
        reject(options.signal.reason);
        return;
      }
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
