import { appendFileSync, existsSync, renameSync, statSync } from "node:fs";
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import type { Readable } from "node:stream";
import type * as MiniflareModule from "miniflare";
import type { Miniflare } from "miniflare";
import { localOwnerToken, localSigningKey, privateStateDir } from "./state-secrets.js";
import { envSettings, loadWorkerConfig, type WorkerConfig } from "./coordinator-config.js";
import { UserError } from "../errors.js";
import { isPortFree } from "./free-port.js";
import { PACKAGE_ROOT } from "../paths.js";
import { isSameProcess, processStartTicks, statFields } from "../process/processes.js";
import { VERSION } from "#shared/version.js";
import { loadRuntimeSnapshot, removeRuntimeSnapshot, saveRuntimeSnapshot, snapshotKey, startFromSnapshot, watchRuntimeLaunch } from "./runtime-snapshot.js";
import { BUNDLE_DIR, BUNDLE_FILE, bundleStamp, ensureWorkerBundle } from "../../../scripts/lib/worker-bundle.js";

// The local coordinator is the very worker that `wrangler deploy` ships (its bundle, dist/worker), run in
// workerd through Miniflare's API in this process, with wrangler.toml's bindings and its D1, R2 and
// Durable Object state persisted under the state directory in the layout `wrangler dev --persist-to
// <state>/data` uses, so either can open the other's state. No dev proxy and no inspector sit in front
// of it (DESIGN §12).

/** A running local coordinator that this process started. */
export interface LocalCoordinator {
  url: string;
  /** The process hosting it (this one). */
  pid: number;
  /** The workerd process serving it, when it could be found (Linux). */
  runtimePid: number | null;
  /** The instance owner's token it accepts, and whether this start generated it (DESIGN §11). */
  owner: { token: string; created: boolean; file: string | null };
  stop(): Promise<void>;
}

/** What `coordinator.json` in a state directory says of the coordinator serving it. */
export interface CoordinatorRecord {
  url: string;
  /** The process hosting it. */
  pid: number;
  runtime_pid?: number | null;
  /** When each started (`processStartTicks`): a pid given to another process since is not taken for it. */
  started?: number | null;
  runtime_started?: number | null;
  /** The loopwarden version and worker bundle it runs (a warm one of another is restarted). */
  version?: string;
  bundle?: string;
  /** A warm coordinator started on demand, which stops itself after `idle_ms` without use. */
  daemon?: boolean;
  idle_ms?: number;
}

/** The log is kept to this size; past it, it moves to `coordinator.log.1` (one generation) and starts again. */
export const MAX_LOG_BYTES = 1024 * 1024;

/** Appends lines to a log file that never grows past `MAX_LOG_BYTES` (plus one rotated generation). */
export class BoundedLog {
  private size: number;

  constructor(
    readonly file: string,
    private readonly maxBytes = MAX_LOG_BYTES,
  ) {
    this.size = existsSync(file) ? statSync(file).size : 0;
  }

  write(text: string): void {
    const bytes = Buffer.byteLength(text);
    if (this.size > 0 && this.size + bytes > this.maxBytes) {
      renameSync(this.file, `${this.file}.1`);
      this.size = 0;
    }
    appendFileSync(this.file, text);
    this.size += bytes;
  }

  /** Every line of a stream, timestamped, until it ends. */
  follow(stream: Readable, label: string): void {
    let pending = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => {
      const lines = (pending + chunk).split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) if (line.trim() !== "") this.write(`${new Date().toISOString()} ${label} ${line}\n`);
    });
  }
}

type ShippedMigrations = Awaited<ReturnType<typeof shippedMigrations>>;

/** The D1 migrations this version ships, per binding, and whether the state directory has them all. */
async function shippedMigrations(config: WorkerConfig, stateDir: string) {
  const recorded = await readFile(migrationsMarker(stateDir), "utf8").then(
    (text) => JSON.parse(text) as string[],
    (): string[] => [],
  );
  const shippedBy = await Promise.all(
    Object.entries(config.d1MigrationsDir).map(async ([binding, dir]) => ({
      binding,
      dir,
      shipped: (await readdir(path.join(PACKAGE_ROOT, dir))).filter((name) => name.endsWith(".sql")).sort(),
    })),
  );
  const applied = shippedBy.every(({ binding, shipped }) => shipped.every((name) => recorded.includes(`${binding}/${name}`)));
  return { shippedBy, applied };
}

const migrationsMarker = (stateDir: string) => path.join(stateDir, "migrations-applied.json");

/**
 * Applies the worker's D1 migrations, recording them as wrangler does (`d1_migrations`), so either tool
 * sees them applied. `migrations-applied.json` in the state directory lets a start skip the database
 * when it already has every migration this version ships.
 */
async function applyD1Migrations(mf: Miniflare, stateDir: string, migrations: ShippedMigrations): Promise<void> {
  const { shippedBy, applied: upToDate } = migrations;
  if (upToDate) return;
  for (const { binding, dir, shipped } of shippedBy) {
    const db = await mf.getD1Database(binding);
    await db.exec(
      "CREATE TABLE IF NOT EXISTS d1_migrations(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL);",
    );
    const rows = (await db.prepare("SELECT name FROM d1_migrations").all()).results as { name: string }[];
    const applied = new Set(rows.map((row) => row.name));
    for (const name of shipped.filter((file) => !applied.has(file))) {
      const sql = await readFile(path.join(PACKAGE_ROOT, dir, name), "utf8");
      // drizzle-kit separates statements with `--> statement-breakpoint`; each runs in one batch with the record.
      const statements = sql
        .split("--> statement-breakpoint")
        .map((statement) => statement.trim())
        .filter(Boolean);
      await db.batch([...statements.map((statement) => db.prepare(statement)), db.prepare("INSERT INTO d1_migrations (name) VALUES (?)").bind(name)]);
    }
  }
  await writeFile(migrationsMarker(stateDir), JSON.stringify(shippedBy.flatMap(({ binding, shipped }) => shipped.map((name) => `${binding}/${name}`))));
}

/**
 * Whether the coordinator at `url` answers /healthz. The client, with the wire schemas it parses with, is
 * loaded here rather than with this module: a start from the runtime snapshot spawns workerd first and
 * loads them while workerd starts (issue 30).
 */
async function answersHealth(url: string): Promise<boolean> {
  const { Client } = await import("./client.js");
  return new Client(url).isHealthy();
}

/** The workerd process among this process's children (Linux `/proc`); null where it cannot be told. */
async function runtimeChildPid(): Promise<number | null> {
  const entries = await readdir("/proc").catch((): string[] => []);
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => "");
    if (Number(statFields(stat)[1]) === process.pid && stat.includes("(workerd)")) return Number(entry);
  }
  return null;
}

/**
 * Refuses clearly when the Workers runtime (miniflare, an optional dependency) is not installed: a
 * runner-only install (--omit=optional) talks to a deployed coordinator and cannot run a local one.
 */
export async function assertWorkersRuntime(): Promise<void> {
  try {
    import.meta.resolve("miniflare");
  } catch {
    const manifest = JSON.parse(await readFile(path.join(PACKAGE_ROOT, "package.json"), "utf8")) as { optionalDependencies?: Record<string, string> };
    const version = manifest.optionalDependencies?.miniflare ?? "4";
    throw new UserError(
      `the local coordinator needs the Workers runtime, which this install left out (--omit=optional): add it with \`npm install miniflare@${version}\`, or use a deployed coordinator with --server URL (or LOOPWARDEN_SERVER)`,
    );
  }
}

/** Starts the coordinator on 127.0.0.1 with state under `stateDir`, and waits until `/healthz` answers. */
export async function startLocalCoordinator(options: {
  stateDir: string;
  port?: number;
  onNote?: (text: string) => void;
  /** Recorded in coordinator.json besides where it is (a warm coordinator says so, and its idle period). */
  record?: Pick<CoordinatorRecord, "daemon" | "idle_ms">;
  /**
   * For a caller that listens for SIGINT/SIGTERM itself from before the start (`serve`): aborted with the
   * signal's name while the start runs, it stops the runtime first and ends the process as that signal
   * would have, as a signal nobody else listens for does.
   */
  interrupt?: AbortSignal;
}): Promise<LocalCoordinator> {
  const { stateDir } = options;
  await privateStateDir(stateDir);
  await mkdir(path.join(stateDir, "logs"), { recursive: true });
  const log = new BoundedLog(path.join(stateDir, "logs", "coordinator.log"));
  // Without a port asked for, the runtime binds port 0 and says which it got: a port found free here and
  // bound later could be taken meanwhile (by any process's connection, whose local port comes from the
  // same range), and the start would fail on it.
  const port = options.port ?? 0;
  if (options.port !== undefined && !(await isPortFree(port))) {
    throw new UserError(`port ${port} on 127.0.0.1 is in use; choose another with --port`);
  }
  await assertWorkersRuntime();
  await ensureWorkerBundle(() => options.onNote?.("building the worker bundle (dist/worker) from its sources…"));
  const [config, contents, signingKey, owner] = await Promise.all([
    loadWorkerConfig(),
    readFile(BUNDLE_FILE, "utf8"),
    localSigningKey(stateDir),
    localOwnerToken(stateDir),
  ]);
  const migrations = await shippedMigrations(config, stateDir);
  // The worker's options for Miniflare, but for its module: the snapshot's key takes the bundle's digest.
  const worker = {
    name: config.name,
    compatibilityDate: config.compatibilityDate,
    compatibilityFlags: config.compatibilityFlags,
    durableObjects: config.durableObjects,
    d1Databases: config.d1Databases,
    r2Buckets: config.r2Buckets,
    ratelimits: config.ratelimits,
    // The receipt signing key and the owner token, secrets when deployed, are this state directory's own here.
    bindings: {
      ...(config.bindings as Record<string, never>),
      RECEIPT_SIGNING_KEY: signingKey,
      OWNER_TOKEN: owner.token,
      // LOOPWARDEN_LEASE_TTL, LOOPWARDEN_S3_* and the like override or add to wrangler.toml's (ENV_SETTINGS).
      ...envSettings(process.env),
    },
  };
  // Miniflare's options but for its functions (the log's and the runtime output's handlers) and the
  // module's text: what its workerd configuration is made of, so the runtime snapshot's key.
  const launchOptions = {
    host: "127.0.0.1",
    // No request.cf lookup over the network, no inspector: nothing but the worker itself.
    cf: false,
    logLevel: "WARN",
    defaultPersistRoot: path.join(stateDir, "data", "v3"),
    worker: { ...worker, modulesRoot: BUNDLE_DIR, module: BUNDLE_FILE },
  } as const;
  const key = await snapshotKey({ loopwarden: VERSION, options: launchOptions, bundle: contents });

  // A signal while the runtime starts, before the caller listens for one (`serve` does once it is up),
  // would end this process by the signal's default action: no exit hook runs then, and workerd, a
  // process of its own, would be left serving the port. Until the start is over, such a signal stops
  // the runtime first, then ends the process as the signal would have.
  let disposeLaunched: (() => Promise<void>) | undefined;
  let interrupting = false;
  const interrupted = (signal: NodeJS.Signals) => {
    interrupting = true;
    void (disposeLaunched?.() ?? Promise.resolve()).catch(() => undefined).finally(() => process.exit(128 + (os.constants.signals[signal] ?? 0)));
  };
  const unheard = (["SIGINT", "SIGTERM"] as const).filter((signal) => process.listenerCount(signal) === 0);
  for (const signal of unheard) process.on(signal, interrupted);
  const onAbort = () => interrupted(options.interrupt?.reason === "SIGINT" ? "SIGINT" : "SIGTERM");
  options.interrupt?.addEventListener("abort", onAbort, { once: true });
  if (options.interrupt?.aborted) onAbort();

  /** Workerd from the state directory's snapshot (runtime-snapshot.ts), when it has one for these inputs. */
  const fromSnapshot = async (): Promise<Runtime | null> => {
    if (!migrations.applied) return null;
    const snapshot = await loadRuntimeSnapshot(stateDir, key);
    if (snapshot === null) return null;
    try {
      const started = startFromSnapshot(snapshot, { port, log, whileStarting: () => import("./client.js") });
      disposeLaunched = async () => (await started).dispose();
      const runtime = await started;
      disposeLaunched = runtime.dispose;
      if (!(await answersHealth(runtime.url))) {
        await runtime.dispose();
        throw new Error(`workerd at ${runtime.url} does not answer /healthz`);
      }
      return { ...runtime, how: "snapshot" };
    } catch (error) {
      // Stopped by a signal while it started: the snapshot is not at fault, and the process is ending.
      if (interrupting) throw error;
      log.write(
        `${new Date().toISOString()} loopwarden: the start from the runtime snapshot failed, starting through Miniflare: ${(error as Error).message}\n`,
      );
      await removeRuntimeSnapshot(stateDir);
      return null;
    }
  };

  /** Workerd through Miniflare, which applies the D1 migrations; its launch becomes the snapshot. */
  const throughMiniflare = async (): Promise<Runtime> => {
    // Required, not imported: Miniflare is a 3.7 MB CommonJS file, and an ESM import of it first has Node
    // scan the whole file for its export names (cjs-module-lexer) and its syntax: 300 ms of a 800 ms load.
    const { Miniflare, Log, LogLevel } = createRequire(import.meta.url)("miniflare") as typeof MiniflareModule;
    class FileLog extends Log {
      override log(message: string): void {
        log.write(`${new Date().toISOString()} miniflare ${message}\n`);
      }
    }
    const signalListeners = (signal: NodeJS.Signals) => new Set(process.listeners(signal));
    const before = { SIGINT: signalListeners("SIGINT"), SIGTERM: signalListeners("SIGTERM") };
    const { module, ...workerOptions } = launchOptions.worker;
    const launch = () =>
      new Miniflare({
        host: launchOptions.host,
        port,
        cf: launchOptions.cf,
        log: new FileLog(LogLevel[launchOptions.logLevel]),
        handleRuntimeStdio(stdout: Readable, stderr: Readable) {
          log.follow(stdout, "worker");
          log.follow(stderr, "worker");
        },
        defaultPersistRoot: launchOptions.defaultPersistRoot,
        // The module given whole: Miniflare then does not parse a megabyte of JavaScript to find imports.
        workers: [{ ...workerOptions, modules: [{ type: "ESModule", path: module, contents }] }],
      });
    // Miniflare exits the process from its own SIGINT/SIGTERM handlers, which would cut the runner's
    // shutdown short (the agent's and gates' process groups left running). The runner's shutdown stops
    // this coordinator itself, so those handlers go; Miniflare's exit hook, which stops workerd when the
    // process exits, stays.
    const dropSignalHandlers = () => {
      for (const signal of ["SIGINT", "SIGTERM"] as const) {
        for (const listener of process.listeners(signal)) if (!before[signal].has(listener)) process.off(signal, listener);
      }
    };
    // A start that fails inside the runtime (seen on a loaded machine as an assertion in Miniflare's
    // synchronous proxy while the migrations ran) is tried once more, the first failure written to the
    // log; a second failure is the command's error.
    const start = async (): Promise<{ instance: Miniflare; url: string }> => {
      const instance = launch();
      disposeLaunched = () => instance.dispose();
      dropSignalHandlers();
      try {
        const ready = await instance.ready;
        await applyD1Migrations(instance, stateDir, migrations);
        return { instance, url: ready.origin };
      } catch (error) {
        await instance.dispose().catch(() => undefined);
        throw error;
      }
    };
    const { result, launch: launched } = await watchRuntimeLaunch(() =>
      start().catch(async (error: unknown) => {
        log.write(`${new Date().toISOString()} loopwarden: the coordinator's start failed, trying once more: ${(error as Error).stack ?? String(error)}\n`);
        return start();
      }),
    );
    const runtime: Runtime = {
      url: result.url,
      pid: launched?.child.pid ?? (await runtimeChildPid()),
      dispose: () => result.instance.dispose(),
      how: "miniflare",
    };
    if (!(await answersHealth(runtime.url))) {
      await runtime.dispose();
      throw new Error(`the local coordinator at ${runtime.url} does not answer /healthz (log: ${log.file})`);
    }
    // Kept once it answers: the next start with the same inputs spawns workerd from it.
    if (launched) {
      await saveRuntimeSnapshot(stateDir, key, launched).catch((error: unknown) => {
        log.write(`${new Date().toISOString()} loopwarden: the runtime snapshot was not kept: ${(error as Error).message}\n`);
      });
    }
    return runtime;
  };

  let runtime: Runtime | undefined;
  try {
    runtime = (await fromSnapshot()) ?? (await throughMiniflare());
    const { url } = runtime;
    const record: CoordinatorRecord = {
      url,
      pid: process.pid,
      runtime_pid: runtime.pid,
      started: processStartTicks(process.pid),
      runtime_started: runtime.pid === null ? null : processStartTicks(runtime.pid),
      version: VERSION,
      bundle: await bundleStamp(),
      ...options.record,
    };
    // One line a start, so the log a command names (`serve` prints its path) is there to open, even
    // while the worker has logged nothing (it logs warnings and errors only).
    log.write(
      `${new Date().toISOString()} loopwarden ${VERSION}: coordinator listening on ${url} (pid ${process.pid}; workerd ${runtime.how === "snapshot" ? "from the state's runtime snapshot" : "through Miniflare"})\n`,
    );
    await writeFile(path.join(stateDir, "coordinator.json"), JSON.stringify(record));
    const running = runtime;
    const stop = async () => {
      await running.dispose();
      await rm(path.join(stateDir, "coordinator.json"), { force: true });
    };
    return { url, pid: process.pid, runtimePid: runtime.pid, owner, stop };
  } catch (error) {
    log.write(`${new Date().toISOString()} loopwarden: the coordinator did not start: ${(error as Error).stack ?? String(error)}\n`);
    await runtime?.dispose().catch(() => undefined);
    throw new Error(`the local coordinator did not start (log: ${log.file}): ${(error as Error).message}`);
  } finally {
    for (const signal of unheard) process.off(signal, interrupted);
    options.interrupt?.removeEventListener("abort", onAbort);
  }
}

/** Workerd serving the coordinator, however it was started. */
interface Runtime {
  url: string;
  pid: number | null;
  dispose(): Promise<void>;
  how: "snapshot" | "miniflare";
}

/**
 * The URL of a coordinator already serving this state directory, if one answers. A coordinator whose
 * host process died without stopping it (SIGKILL) leaves its workerd behind: that orphan is stopped
 * here, by the pid recorded for it, rather than served by a process nobody will stop.
 */
export async function findRunningCoordinator(stateDir: string): Promise<CoordinatorRecord | null> {
  const file = path.join(stateDir, "coordinator.json");
  const text = await readFile(file, "utf8").catch(() => null);
  if (!text) return null;
  let record: CoordinatorRecord;
  try {
    record = JSON.parse(text) as CoordinatorRecord;
  } catch {
    return null;
  }
  if (isSameProcess(record.pid, record.started)) return (await answersHealth(record.url)) ? record : null;
  // Its host is gone. A workerd it left is stopped, but only that one: its pid, given to another process
  // since (another coordinator's workerd, say), is left alone.
  const orphan = record.runtime_pid;
  if (orphan && isSameProcess(orphan, record.runtime_started) && (await readFile(`/proc/${orphan}/cmdline`, "utf8").catch(() => "")).includes("workerd")) {
    process.kill(orphan, "SIGKILL");
  }
  await rm(file, { force: true });
  return null;
}
