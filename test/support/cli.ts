import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll } from "vitest";
import { freePort } from "../../runner/src/coordinator/free-port.js";
import { LoopEvent } from "#shared/engine/index.js";

/** The repository root. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
// The compiled CLI (dist/cli), as an installed package runs it: the e2e layer's global setup builds it
// from the sources (compiled-cli.ts). runner/bin, which runs the sources through tsx in a checkout,
// has its own test (source-checkout.test.ts).
const BIN = path.join(ROOT, "dist", "cli", "main.js");

/** A temporary directory, removed by `cleanup`. */
export function tempDir(prefix: string): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), `lw-${prefix}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * The test process's npm variables (set by `npx vitest`) describe loopwarden's own checkout
 * (npm_config_local_prefix, npm_package_json, INIT_CWD…): CLI runs and npm calls that drop them see the
 * environment of a user's shell, not of loopwarden's test script.
 */
export const NO_NPM_ENV: NodeJS.ProcessEnv = Object.fromEntries(
  Object.keys(process.env)
    .filter((name) => /^(npm_|INIT_CWD$)/i.test(name))
    .map((name) => [name, undefined]),
);

/** Creates a git repository with `files` committed on `main`. */
export function makeRepo(dir: string, files: Record<string, string>): string {
  for (const [name, content] of Object.entries(files)) {
    const file = path.join(dir, name);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, content);
  }
  const git = (...args: string[]) => execFileSync("git", args, { cwd: dir, encoding: "utf8" });
  git("init", "-q", "-b", "main");
  git("config", "user.name", "test");
  git("config", "user.email", "test@localhost");
  git("add", "-A");
  git("commit", "-q", "-m", "initial");
  return dir;
}

/** The demo project (examples/demo) committed as a fresh repository in `dir`. */
export function demoRepo(dir: string): string {
  cpSync(path.join(ROOT, "examples", "demo"), dir, { recursive: true });
  return makeRepo(dir, {});
}

/** The loop the runner recorded in `repo` for a contract source (`flags` for a flag-only loop; DESIGN §6.6). */
export function recordedLoopId(repo: string, source = "flags"): string {
  const state = JSON.parse(readFileSync(path.join(repo, ".loopwarden", "state.json"), "utf8")) as { loops: Record<string, { loop_id: string }> };
  const loop = state.loops[source];
  if (!loop) throw new Error(`no loop recorded for ${source} in ${repo}`);
  return loop.loop_id;
}

/** Where a runner process keeps its clones while it evaluates (the system's temporary directory, DESIGN §6.4). */
export function clonesOf(pid: number, tmpDir = os.tmpdir()): string {
  return path.join(tmpDir, "loopwarden-clones", String(pid));
}

/** Runs git in a directory and returns stdout. */
export function gitIn(dir: string, ...args: string[]): string {
  return execFileSync("git", args, { cwd: dir, encoding: "utf8" });
}

/** The outcome of one CLI run. */
export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * The instance owner's token of every coordinator the tests start (LOOPWARDEN_OWNER_TOKEN), which the
 * CLI also sends (LOOPWARDEN_TOKEN): a test about tokens sets its own.
 */
export const TEST_OWNER_TOKEN = "lwo_e2e-tests-owner-token-0123456789abcdef";

/** A request to a coordinator's API as its owner (`fetch` with the owner's bearer token). */
export function api(url: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (!headers.has("authorization")) headers.set("authorization", `Bearer ${TEST_OWNER_TOKEN}`);
  return fetch(url, { ...init, headers });
}

/** Every stored event of a loop, page after page while the coordinator says more follow (DESIGN §8), as the owner unless another token is given. */
export async function loopEvents(url: string, loopId: string, token = TEST_OWNER_TOKEN): Promise<LoopEvent[]> {
  const events: LoopEvent[] = [];
  for (;;) {
    const response = await api(`${url}/v1/loops/${loopId}/events?after=${events.length}`, { headers: { authorization: `Bearer ${token}` } });
    if (!response.ok) throw new Error(`events of ${loopId}: ${response.status} ${await response.text()}`);
    for (const line of (await response.text()).split("\n")) if (line.length > 0) events.push(LoopEvent.parse(JSON.parse(line)));
    if (response.headers.get("loopwarden-more") !== "true") return events;
  }
}

/**
 * The CLI's environment in tests: a command's local coordinator lives in its own process and stops
 * with it (LOOPWARDEN_IDLE=0), so no test leaves a warm one behind; the warm coordinator's own tests
 * set an idle period and stop it by its pid.
 */
const CLI_ENV = { NO_COLOR: "1", LOOPWARDEN_IDLE: "0", LOOPWARDEN_OWNER_TOKEN: TEST_OWNER_TOKEN, LOOPWARDEN_TOKEN: TEST_OWNER_TOKEN };

/** Runs the loopwarden CLI to completion. */
export function runCli(args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: options.cwd,
      env: { ...process.env, ...CLI_ENV, ...options.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** Starts the CLI without waiting, e.g. a long `run`. */
export function startCli(args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): ChildProcess & { output(): string } {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: options.cwd,
    env: { ...process.env, ...CLI_ENV, ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  return Object.assign(child, { output: () => output });
}

/** Polls `condition` every 100 ms until it holds; fails naming `what` after the timeout. */
export async function waitFor(condition: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Waits for a child to exit and returns its exit code. */
export function exitOf(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once("exit", (code) => resolve(code)));
}

/**
 * A coordinator run by `loopwarden serve` (the worker in workerd through Miniflare) in a process group
 * of its own, so a test can crash the whole stack with SIGKILL and start it again on the same state.
 */
export interface TestCoordinator {
  url: string;
  port: number;
  /** The `loopwarden serve` process (its workerd is a child in the same process group). */
  pid: number;
  stateDir: string;
  /** Stops it gracefully (SIGTERM to the serve process, which stops its workerd). */
  stop(): Promise<void>;
  /** Crashes it: SIGKILL to every process of its group, workerd included. */
  crash(): Promise<void>;
}

/**
 * A temporary directory and a coordinator shared by the tests of one describe block: started before
 * them, stopped (by PID) and removed after.
 */
export function sharedCoordinator(prefix: string, env: NodeJS.ProcessEnv = {}): { tmp: { dir: string }; coordinator: { readonly url: string } } {
  const tmp = tempDir(prefix);
  let started: TestCoordinator | undefined;
  beforeAll(async () => {
    started = await startCoordinator(path.join(tmp.dir, "state"), undefined, env);
  });
  afterAll(async () => {
    await started?.stop();
    tmp.cleanup();
  });
  return {
    tmp,
    coordinator: {
      get url() {
        if (!started) throw new Error("the shared coordinator starts in beforeAll");
        return started.url;
      },
    },
  };
}

export async function startCoordinator(stateDir: string, port?: number, env: NodeJS.ProcessEnv = {}): Promise<TestCoordinator> {
  // A free port can be taken by another test's process between being found and being bound (test files
  // run in parallel, each starting coordinators): serve then says the port is in use, and another is tried.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startCoordinatorOn(stateDir, port ?? (await freePort()), env);
    } catch (error) {
      if (port !== undefined || attempt >= 3 || !(error instanceof PortInUse)) throw error;
    }
  }
}

/** Serve's answer that the port it was given is taken. */
class PortInUse extends Error {}

async function startCoordinatorOn(stateDir: string, chosen: number, env: NodeJS.ProcessEnv): Promise<TestCoordinator> {
  const child = spawn(process.execPath, [BIN, "--json", "--state", stateDir, "serve", "--port", String(chosen)], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: "1", LOOPWARDEN_OWNER_TOKEN: TEST_OWNER_TOKEN, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let stdout = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      const line = stdout.split("\n")[0];
      if (!stdout.includes("\n") || !line) return;
      // Its first line is the URL it serves at, or (--json) the error it stopped on.
      const answer = JSON.parse(line) as { url?: string; errors?: string[] };
      if (answer.url) resolve(answer.url);
      else if (answer.errors?.some((error) => error.includes("is in use"))) reject(new PortInUse(`serve: ${answer.errors.join("; ")}`));
      else reject(new Error(`serve did not start: ${line}`));
    });
    child.once("exit", (code) => reject(new Error(`serve exited with ${code}: ${stderr}`)));
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error("serve did not start");
  // A coordinator that dies while its tests run leaves them failing with "cannot reach": say why, once.
  let expectedExit = false;
  child.once("exit", (code, signal) => {
    if (!expectedExit)
      console.error(`the test coordinator at ${url} (pid ${pid}) exited on its own (${signal ?? `exit ${code}`}); its stderr ends:\n${stderr.slice(-4000)}`);
  });
  return {
    url,
    port: chosen,
    pid,
    stateDir,
    async stop() {
      expectedExit = true;
      if (child.exitCode !== null) return;
      const exited = exitOf(child);
      child.kill("SIGTERM");
      await exited;
    },
    async crash() {
      expectedExit = true;
      const exited = exitOf(child);
      process.kill(-pid, "SIGKILL");
      await exited;
      // Give the kernel a moment to release the port held by workerd.
      await new Promise((resolve) => setTimeout(resolve, 300));
    },
  };
}
