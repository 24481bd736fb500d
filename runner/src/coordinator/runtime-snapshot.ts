import type * as ChildProcessModule from "node:child_process";
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import type { Readable } from "node:stream";
import * as z from "zod";

// The local coordinator's fast start (issue 30: a first command waits for the coordinator's first
// answer). A start through Miniflare spends most of its time in this process before workerd even runs:
// loading Miniflare (a 3.7 MB module), assembling workerd's configuration and encoding it as Cap'n
// Proto (about 850 ms of a 1.2 s start on a 2-core host, workerd's own start the other 350 ms). On a
// state directory it has served before, with the same inputs, it produces the same configuration every
// time, byte for byte but for the random secret of Miniflare's proxy, which only Miniflare's Node side
// uses. So a start through Miniflare keeps what it gave workerd — the command, its arguments and the
// encoded configuration — in the state directory (its `runtime/`, private like the secrets in it), and
// a later start whose inputs are the same spawns workerd with it directly (docs/architecture.md, "The
// runner", `runtime-snapshot.ts`; docs/deploy.md, "The local coordinator").
//
// While workerd runs, Miniflare's Node side does two things for it: its loopback server receives the
// log lines (/core/log) and uncaught errors (/core/error) workerd's internal workers send, and its proxy
// serves `getD1Database` and the like. A start from a snapshot serves the first itself, into the
// coordinator's log; the proxy is only used to apply D1 migrations, so a start with migrations to apply
// goes through Miniflare. Anything unexpected — a snapshot that does not match its record, workerd
// exiting before it listens, Miniflare spawning workerd with other arguments than these — means a start
// through Miniflare, which is always correct, only slower.

/** Where a state directory keeps its runtime snapshot: the record, and the encoded configuration. */
const snapshotFiles = (stateDir: string) => ({
  record: path.join(stateDir, "runtime", "workerd.json"),
  config: path.join(stateDir, "runtime", "workerd.capnp"),
});

/** How a process that hosts the coordinator writes its log (local-coordinator.ts's BoundedLog). */
export interface RuntimeLog {
  write(text: string): void;
  follow(stream: Readable, label: string): void;
}

/** How Miniflare spawned workerd: the command, its arguments and the configuration written to its stdin. */
export interface RuntimeLaunch {
  command: string;
  args: string[];
  config: Buffer;
  child: ChildProcess;
}

const ENTRY_ARG = "--socket-addr=entry=";
const LOOPBACK_ARG = "--external-addr=loopback=";
/** The arguments Miniflare gives workerd, but for the two addresses: anything else is not snapshotted. */
const EXPECTED_ARGS = ["serve", "--binary", "--experimental", "--control-fd=3", "-"];

/** The same arguments with these addresses for the entry socket and the loopback service. */
function withAddresses(args: readonly string[], entry: string, loopback: string): string[] {
  return args.map((arg) => (arg.startsWith(ENTRY_ARG) ? `${ENTRY_ARG}${entry}` : arg.startsWith(LOOPBACK_ARG) ? `${LOOPBACK_ARG}${loopback}` : arg));
}

/** Whether these are the arguments this module knows how to reproduce (the set Miniflare 4 gives). */
function isKnownLaunch(args: readonly string[]): boolean {
  const rest = args.filter((arg) => !arg.startsWith(ENTRY_ARG) && !arg.startsWith(LOOPBACK_ARG));
  return (
    args.filter((arg) => arg.startsWith(ENTRY_ARG)).length === 1 &&
    args.filter((arg) => arg.startsWith(LOOPBACK_ARG)).length === 1 &&
    rest.length === EXPECTED_ARGS.length &&
    rest.every((arg, index) => arg === EXPECTED_ARGS[index])
  );
}

/**
 * Runs `start` (a start through Miniflare) while watching `child_process.spawn`, the function Miniflare
 * spawns workerd with, and answers the last workerd launch it saw, or null. Every call goes through to
 * the real spawn unchanged; the watch ends with `start`.
 */
export async function watchRuntimeLaunch<T>(start: () => Promise<T>): Promise<{ result: T; launch: RuntimeLaunch | null }> {
  // Miniflare is CommonJS and calls `spawn` on this module object at the time it spawns, so a property
  // set here is what it calls; ESM imports of `spawn` elsewhere in this process are not affected.
  const childProcess = createRequire(import.meta.url)("node:child_process") as typeof ChildProcessModule;
  const original = childProcess.spawn;
  let launch: RuntimeLaunch | null = null;
  const watching = (command: string, args: readonly string[], options: SpawnOptions): ChildProcess => {
    const child = original(command, args, options);
    if (Array.isArray(args) && args[0] === "serve" && args.includes("--binary") && child.stdin) {
      const chunks: Buffer[] = [];
      const stdin = child.stdin;
      const write = stdin.write.bind(stdin) as (chunk: unknown, ...rest: unknown[]) => boolean;
      stdin.write = ((chunk: unknown, ...rest: unknown[]) => {
        if (typeof chunk === "string" || chunk instanceof Uint8Array) chunks.push(Buffer.from(chunk));
        return write(chunk, ...rest);
      }) as typeof stdin.write;
      const current = { command, args: [...args], config: Buffer.alloc(0), child };
      stdin.once("finish", () => {
        current.config = Buffer.concat(chunks);
      });
      launch = current;
    }
    return child;
  };
  childProcess.spawn = watching as typeof childProcess.spawn;
  try {
    const result = await start();
    return { result, launch };
  } finally {
    childProcess.spawn = original;
  }
}

/** A file's identity for the snapshot's key: its path, size and modification time. */
async function fileIdentity(file: string): Promise<{ file: string; size: number; mtime_ms: number }> {
  const stats = await stat(file);
  return { file, size: stats.size, mtime_ms: stats.mtimeMs };
}

const SnapshotRecord = z.object({
  key: z.string().regex(/^[0-9a-f]{64}$/),
  command: z.string().min(1),
  command_file: z.object({ file: z.string(), size: z.number(), mtime_ms: z.number() }),
  args: z.array(z.string()),
  config_sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
type SnapshotRecord = z.infer<typeof SnapshotRecord>;

/** A snapshot that matches its key: what a start spawns workerd with. */
export interface RuntimeSnapshot {
  command: string;
  args: string[];
  config: Buffer;
}

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

/**
 * The key a snapshot is kept under: everything the configuration Miniflare encodes depends on — the
 * options given to it (the worker's bundle as its digest, its bindings with the secrets among them, the
 * persistence root), the Miniflare module that encodes them and the workerd it is told to run
 * (MINIFLARE_WORKERD_PATH). The loopwarden version is part of it too.
 */
export async function snapshotKey(parts: { loopwarden: string; options: unknown; bundle: string }): Promise<string> {
  const miniflare = await fileIdentity(createRequire(import.meta.url).resolve("miniflare"));
  // Miniflare runs the workerd this variable names, when set, rather than its own.
  const workerd = process.env.MINIFLARE_WORKERD_PATH ?? null;
  return sha256(JSON.stringify({ ...parts, bundle: sha256(parts.bundle), miniflare, workerd }));
}

/** The snapshot kept under this key, or null: none, another key, a changed workerd, or a damaged file. */
export async function loadRuntimeSnapshot(stateDir: string, key: string): Promise<RuntimeSnapshot | null> {
  const files = snapshotFiles(stateDir);
  const text = await readFile(files.record, "utf8").catch(() => null);
  if (text === null) return null;
  let record: SnapshotRecord;
  try {
    record = SnapshotRecord.parse(JSON.parse(text));
  } catch {
    return null;
  }
  if (record.key !== key || !isKnownLaunch(record.args)) return null;
  const [command, config] = await Promise.all([fileIdentity(record.command).catch(() => null), readFile(files.config).catch(() => null)]);
  if (command === null || JSON.stringify(command) !== JSON.stringify(record.command_file)) return null;
  if (config === null || sha256(config) !== record.config_sha256) return null;
  return { command: record.command, args: record.args, config };
}

/**
 * Keeps a launch Miniflare made as this state directory's snapshot under `key`, each file written whole
 * then renamed into place, readable by their owner only (the configuration holds the worker's secrets).
 * Answers false, keeping nothing, when the launch is not one a snapshot can reproduce.
 */
export async function saveRuntimeSnapshot(stateDir: string, key: string, launch: RuntimeLaunch): Promise<boolean> {
  if (!isKnownLaunch(launch.args) || launch.config.length === 0) return false;
  const files = snapshotFiles(stateDir);
  await mkdir(path.dirname(files.record), { recursive: true, mode: 0o700 });
  const record: SnapshotRecord = {
    key,
    command: launch.command,
    command_file: await fileIdentity(launch.command),
    args: launch.args,
    config_sha256: sha256(launch.config),
  };
  const writeWhole = async (file: string, data: Buffer | string) => {
    const temporary = `${file}.${randomBytes(6).toString("hex")}.tmp`;
    await writeFile(temporary, data, { mode: 0o600 });
    await rename(temporary, file);
  };
  // The record last: a crash between the two leaves a record whose digest the configuration fails.
  await writeWhole(files.config, launch.config);
  await writeWhole(files.record, JSON.stringify(record));
  return true;
}

/** Forgets this state directory's snapshot (the next start goes through Miniflare and makes another). */
export async function removeRuntimeSnapshot(stateDir: string): Promise<void> {
  const files = snapshotFiles(stateDir);
  await Promise.all([rm(files.record, { force: true }), rm(files.config, { force: true })]);
}

/** A workerd started from a snapshot. */
export interface SnapshotRuntime {
  url: string;
  pid: number | null;
  dispose(): Promise<void>;
}

const ControlMessage = z.object({ event: z.string(), socket: z.string().optional(), port: z.number().int().optional() });
/** How long workerd may take to listen before the start gives up on the snapshot. */
const LISTEN_TIMEOUT_MS = 60_000;

/**
 * Spawns workerd with a snapshot's configuration, its entry socket on 127.0.0.1:`port` (0: the port it
 * binds, which it reports on its control pipe), and serves the loopback workerd's internal workers log
 * to. Answers once workerd listens and `whileStarting` is done; rejects, with workerd stopped, if
 * workerd exits or does not listen first.
 */
export async function startFromSnapshot(
  snapshot: RuntimeSnapshot,
  options: { port: number; log: RuntimeLog; /** Work for this process while workerd starts (loading modules). */ whileStarting?: () => Promise<unknown> },
): Promise<SnapshotRuntime> {
  const { log } = options;
  const loopback = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const route = new URL(request.url ?? "/", "http://loopback").pathname;
      const body = Buffer.concat(chunks).toString("utf8").trim();
      if (route === "/core/log" || route === "/core/error") {
        for (const line of body.split("\n")) if (line.trim() !== "") log.write(`${new Date().toISOString()} worker ${line}\n`);
      } else {
        log.write(`${new Date().toISOString()} loopwarden: workerd asked the loopback for ${route}, which only Miniflare serves\n`);
      }
      // An uncaught error's response goes to the client as it is: a plain 500, the error in the log.
      if (route === "/core/error") response.writeHead(500, { "content-type": "text/plain" }).end("Internal Server Error");
      else response.writeHead(route === "/core/log" ? 200 : 404).end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    loopback.once("error", reject);
    loopback.listen(0, "127.0.0.1", () => resolve());
  });
  const loopbackPort = (loopback.address() as AddressInfo).port;
  const child = spawn(snapshot.command, withAddresses(snapshot.args, `127.0.0.1:${options.port}`, `127.0.0.1:${loopbackPort}`), {
    stdio: ["pipe", "pipe", "pipe", "pipe"],
    env: { ...process.env, FORCE_COLOR: "0" },
  });
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once("exit", () => resolve());
  });
  // As Miniflare does: workerd never outlives this process (a SIGKILL of it aside, which the next start handles).
  const killOnExit = () => child.kill("SIGKILL");
  process.on("exit", killOnExit);
  const dispose = async () => {
    process.off("exit", killOnExit);
    for (const stream of child.stdio) stream?.destroy();
    child.kill("SIGKILL");
    await exited;
    await new Promise<void>((resolve) => loopback.close(() => resolve()));
  };
  log.follow(child.stdout as Readable, "worker");
  log.follow(child.stderr as Readable, "worker");
  try {
    const listening = new Promise<number>((resolve, reject) => {
      let pending = "";
      const control = child.stdio[3] as Readable;
      control.setEncoding("utf8");
      control.on("data", (chunk: string) => {
        const lines = (pending + chunk).split("\n");
        pending = lines.pop() ?? "";
        for (const line of lines) {
          let parsed: unknown;
          try {
            parsed = JSON.parse(line);
          } catch {
            continue;
          }
          const message = ControlMessage.safeParse(parsed);
          if (message.success && message.data.event === "listen" && message.data.socket === "entry" && message.data.port !== undefined) {
            resolve(message.data.port);
          }
        }
      });
      child.once("error", reject);
      void exited.then(() => reject(new Error(`workerd exited (${child.exitCode ?? child.signalCode}) before it listened`)));
      setTimeout(() => reject(new Error(`workerd did not listen within ${LISTEN_TIMEOUT_MS / 1000} s`)), LISTEN_TIMEOUT_MS).unref();
    });
    child.stdin?.end(snapshot.config);
    const [port] = await Promise.all([listening, options.whileStarting?.()]);
    return { url: `http://127.0.0.1:${port}`, pid: child.pid ?? null, dispose };
  } catch (error) {
    await dispose();
    throw error;
  }
}
