import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { UserError } from "./errors.js";
import { Client } from "./client.js";
import { freePort, isPortFree } from "./free-port.js";
import { PACKAGE_ROOT } from "./paths.js";

// The local coordinator is the very worker that `wrangler deploy` ships, run in workerd by `wrangler
// dev` with its D1, R2 and Durable Object state persisted under the state directory.

/** A running local coordinator that this process started. */
export interface LocalCoordinator {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** What `coordinator.json` in the state directory records, so other commands can find a running one. */
interface CoordinatorRecord {
  url: string;
  pid: number;
}

const READY_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 5_000;

function wranglerBin(): string {
  const require = createRequire(import.meta.url);
  return path.join(path.dirname(require.resolve("wrangler/package.json")), "bin", "wrangler.js");
}

function wranglerEnv(stateDir: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    WRANGLER_SEND_METRICS: "false",
    // Keep wrangler's own config and logs inside the state directory, not the user's home.
    XDG_CONFIG_HOME: path.join(stateDir, "wrangler-config"),
    WRANGLER_LOG_PATH: path.join(stateDir, "logs"),
    CI: "true",
  };
}

async function runToCompletion(args: string[], stateDir: string, logFile: string): Promise<void> {
  const log = createWriteStream(logFile, { flags: "a" });
  try {
    const child = spawn(process.execPath, [wranglerBin(), ...args], {
      cwd: PACKAGE_ROOT,
      env: wranglerEnv(stateDir),
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.pipe(log, { end: false });
    child.stderr.pipe(log, { end: false });
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on("error", reject);
      child.on("close", resolve);
    });
    if (code !== 0) throw new Error(`wrangler ${args.slice(0, 3).join(" ")} exited with ${code}; see ${logFile}`);
  } finally {
    log.end();
  }
}

/**
 * Applies the D1 migrations to the local database, skipping wrangler when the state directory
 * already records every migration this version ships.
 */
async function applyMigrations(stateDir: string, logFile: string): Promise<void> {
  const shipped = (await readdir(path.join(PACKAGE_ROOT, "migrations"))).filter((name) => name.endsWith(".sql")).sort();
  const marker = path.join(stateDir, "migrations-applied.json");
  const applied = await readFile(marker, "utf8").then((text) => JSON.parse(text) as string[], (): string[] => []);
  if (shipped.every((name) => applied.includes(name))) return;
  await runToCompletion(
    ["d1", "migrations", "apply", "DB", "--local", "--persist-to", path.join(stateDir, "data"), "--config", path.join(PACKAGE_ROOT, "wrangler.toml")],
    stateDir,
    logFile,
  );
  await writeFile(marker, JSON.stringify(shipped));
}

function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill("SIGTERM");
  });
}

/** Starts `wrangler dev` on 127.0.0.1 with state under `stateDir`, and waits until `/healthz` answers. */
export async function startLocalCoordinator(options: { stateDir: string; port?: number }): Promise<LocalCoordinator> {
  const { stateDir } = options;
  await mkdir(path.join(stateDir, "logs"), { recursive: true });
  const logFile = path.join(stateDir, "logs", "coordinator.log");
  await applyMigrations(stateDir, logFile);

  const port = options.port ?? (await freePort());
  if (options.port !== undefined && !(await isPortFree(port))) {
    throw new UserError(`port ${port} on 127.0.0.1 is in use; choose another with --port`);
  }
  const inspectorPort = await freePort();
  const log = createWriteStream(logFile, { flags: "a" });
  const child = spawn(
    process.execPath,
    [
      wranglerBin(),
      "dev",
      "--config",
      path.join(PACKAGE_ROOT, "wrangler.toml"),
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--inspector-port",
      String(inspectorPort),
      "--persist-to",
      path.join(stateDir, "data"),
      "--log-level",
      "warn",
      "--show-interactive-dev-session=false",
    ],
    { cwd: PACKAGE_ROOT, env: wranglerEnv(stateDir), stdio: ["ignore", "pipe", "pipe"] },
  );
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  const pid = child.pid;
  if (pid === undefined) throw new Error("could not start wrangler");
  // If this process dies without stopping the coordinator, take it along.
  const onExit = () => child.kill("SIGTERM");
  process.on("exit", onExit);

  const url = `http://127.0.0.1:${port}`;
  const client = new Client(url);
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (!(await client.isHealthy())) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stopChild(child);
      process.off("exit", onExit);
      const tail = (await readFile(logFile, "utf8").catch(() => "")).split("\n").slice(-15).join("\n");
      throw new Error(`the local coordinator did not start (log: ${logFile}):\n${tail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  const record: CoordinatorRecord = { url, pid };
  await writeFile(path.join(stateDir, "coordinator.json"), JSON.stringify(record));

  return {
    url,
    pid,
    async stop() {
      await stopChild(child);
      process.off("exit", onExit);
      await rm(path.join(stateDir, "coordinator.json"), { force: true });
    },
  };
}

/** The URL of a coordinator already serving this state directory, if one answers. */
export async function findRunningCoordinator(stateDir: string): Promise<string | null> {
  const text = await readFile(path.join(stateDir, "coordinator.json"), "utf8").catch(() => null);
  if (!text) return null;
  try {
    const record = JSON.parse(text) as CoordinatorRecord;
    return (await new Client(record.url).isHealthy()) ? record.url : null;
  } catch {
    return null;
  }
}
