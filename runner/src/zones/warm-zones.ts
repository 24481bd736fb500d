import { spawn, type ChildProcessByStdio } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import path from "node:path";
import { quote } from "shell-quote";
import { onShutdown } from "../process/shutdown.js";
import { sandboxSupport, zoneArgs, type ZoneSpec } from "./sandbox.js";

// Zones built ahead of their command (issue 30). Building a zone — bubblewrap's namespaces and mount
// view — costs a few milliseconds a start, and a loop pays it twice an iteration on its critical path:
// for the agent's run and for the candidate's first gate. Both zones are known before they are needed
// (the next workspace and the next candidate's clone are made ahead), so the runner starts them early: the
// same bubblewrap arguments a cold start would use, with a shell that waits on its standard input for
// its command. `runCommand` takes a warm zone only when the zone it is asked for is, argument for
// argument, the warm one's (a path hidden since, another network, another clone: a cold start instead),
// and then hands it a script that sets exactly the command's environment and execs the command with
// standard input from /dev/null: the command runs as it would have in a zone started for it (the same
// arguments, variables, working directory, PID 1 of its namespace, process group), only sooner. Nothing
// runs in a warm zone before it is taken. One never taken is let go when its directory is removed or the
// run ends (its stdin closed: it exits, reaped by the runner), and killed with the runner (on SIGINT or
// SIGTERM; bubblewrap's --die-with-parent when the runner dies otherwise).

/** What a warm zone's shell runs: the script it is handed on its standard input, once that is closed. */
const WAITING_SHELL = 'script=$(/bin/cat) && eval "$script"';

// A name a POSIX shell can export. The environment of a command is handed over as `export` lines, so a
// command whose environment has any other name (which only `env -i` could pass on) is started cold.
const EXPORTABLE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A zone's first process, with its standard streams piped. */
type Zoned = ChildProcessByStdio<Writable, Readable, Readable>;

interface WarmZone {
  key: string;
  writable: string[];
  child: Zoned;
  unregister: () => void;
}

// Warm zones not yet taken, by their bubblewrap arguments.
const warm = new Map<string, WarmZone>();

const keyOf = (args: string[]) => args.join("\0");

/** Stops a warm zone at once (the runner is being stopped): SIGKILL to its process group. */
function kill(zone: WarmZone): void {
  zone.unregister();
  if (zone.child.pid === undefined || zone.child.exitCode !== null || zone.child.signalCode !== null) return;
  try {
    process.kill(-zone.child.pid, "SIGKILL");
  } catch {
    // Already gone.
  }
}

/**
 * Lets a warm zone go: its standard input is closed, so its shell, handed no command, exits, and each
 * bubblewrap process reaps the one it started; settles once it has exited (killed if it has not within
 * COOL_MS), reaped by the runner itself rather than left to init.
 */
function cool(zone: WarmZone): Promise<void> {
  zone.unregister();
  const { child } = zone;
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  child.ref();
  return new Promise((resolve) => {
    const timer = setTimeout(() => kill(zone), COOL_MS);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.stdin.end();
  });
}

/** How long a warm zone let go has to exit by itself before it is killed. */
const COOL_MS = 2_000;

/**
 * Starts a zone for `spec` now, for the next command asked to run in the same zone to take
 * (`takeWarmZone`). Does nothing where zones cannot be built (the command's own start then says why),
 * or when a zone for the same arguments is already warm.
 */
export async function warmZone(spec: ZoneSpec): Promise<void> {
  const support = await sandboxSupport();
  if (!support.available) return;
  const args = zoneArgs(support.bwrap, spec);
  const key = keyOf(args);
  if (warm.has(key)) return;
  const [file = support.bwrap, ...rest] = args;
  // Its own process group, as a cold start's (a timeout kills the group); the variables come with the command.
  const child = spawn(file, [...rest, "/bin/sh", "-c", WAITING_SHELL], { env: {}, stdio: ["pipe", "pipe", "pipe"], detached: true });
  const zone: WarmZone = { key, writable: spec.writable.map((dir) => path.resolve(dir)), child, unregister: () => {} };
  zone.unregister = onShutdown(() => kill(zone));
  // A zone waiting for a command does not keep the runner's process alive; the command that takes it does.
  child.unref();
  for (const stream of [child.stdin, child.stdout, child.stderr]) (stream as { unref?: () => void }).unref?.();
  child.stdin.on("error", () => undefined);
  const forget = () => {
    zone.unregister();
    if (warm.get(key) === zone) warm.delete(key);
  };
  child.on("exit", forget);
  child.on("error", forget);
  warm.set(key, zone);
}

// Zones whose spec is still being worked out (`warmZoneFor`).
const starting = new Set<Promise<void>>();

/**
 * Starts the zone `spec` settles to (`warmZone`), once it does: for a zone whose directory is still being
 * made. Nothing when it settles to none; a failure only means a cold start.
 */
export function warmZoneFor(spec: Promise<ZoneSpec | undefined>): void {
  const started = spec.then((settled) => (settled ? warmZone(settled) : undefined)).catch(() => undefined);
  starting.add(started);
  void started.finally(() => starting.delete(started));
}

/** Settles once every zone `warmZoneFor` was asked to start has started (or will not): before what it started is let go. */
export async function zonesStarted(): Promise<void> {
  await Promise.all([...starting]);
}

/**
 * The warm zone started with exactly `args` (`zoneArgs`), handed `command` to run with exactly `env`, or
 * null when there is none still waiting, or `env` cannot be handed over. The caller owns the process
 * from here on, as if it had spawned it: its output, its exit, its process group.
 */
export function takeWarmZone(args: string[], command: string, env: NodeJS.ProcessEnv): Zoned | null {
  const key = keyOf(args);
  const zone = warm.get(key);
  if (!zone) return null;
  const entries = Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined);
  if (!entries.every(([name]) => EXPORTABLE.test(name))) return null;
  warm.delete(key);
  zone.unregister();
  const { child } = zone;
  if (child.exitCode !== null || child.signalCode !== null || !child.stdin.writable) {
    kill(zone);
    return null;
  }
  child.ref();
  for (const stream of [child.stdin, child.stdout, child.stderr]) (stream as { ref?: () => void }).ref?.();
  const script = [...entries.map(([name, value]) => `export ${name}=${quote([value])}`), `exec /bin/sh -c ${quote([command])} </dev/null`].join("\n");
  child.stdin.end(script);
  return child;
}

/** Lets the warm zones that write to `dir` go (their clone or workspace is going), or every one; settles once they have exited. */
export async function coolZones(dir?: string): Promise<void> {
  const resolved = dir === undefined ? null : path.resolve(dir);
  const cooling: Promise<void>[] = [];
  for (const zone of [...warm.values()]) {
    if (resolved !== null && !zone.writable.includes(resolved)) continue;
    warm.delete(zone.key);
    cooling.push(cool(zone));
  }
  await Promise.all(cooling);
}

/** How many zones are warm now (for tests). */
export function warmZoneCount(): number {
  return warm.size;
}
