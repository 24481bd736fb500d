import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, readdirSync, readFileSync, type WriteStream } from "node:fs";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { NO_NPM_ENV } from "./cli.js";
import { isAlive } from "./process.js";
import { isSameProcess, processStartTicks } from "../../runner/src/process/processes.js";

// The docs' code blocks, run as written (issue 26: the docs cannot drift again): a section's fenced
// blocks read from the Markdown file when the test runs, a block run whole with `bash -euo pipefail -c`
// (runBlock) or line by line in one shell, as a reader types them (Terminal), and the checks that nothing
// a test started is left running afterwards. Used by readme.test.ts and docs-teams.test.ts.

/**
 * A reader's machine, as the docs' commands run there: a user's shell (not `npx vitest`'s, which describes
 * loopwarden's own checkout) with its own $HOME and XDG directories under `root`, the local coordinator's
 * state in `state`, started per command and stopped with it (LOOPWARDEN_IDLE=0), no coordinator, token or
 * key of the developer's, and npm's global prefix and cache under `root` too.
 */
export function machineEnv(root: string, state: string): NodeJS.ProcessEnv {
  const home = path.join(root, "home");
  return {
    ...process.env,
    ...NO_NPM_ENV,
    LOOPWARDEN_SERVER: undefined,
    LOOPWARDEN_TOKEN: undefined,
    LOOPWARDEN_OWNER_TOKEN: undefined,
    LOOPWARDEN_STATE: state,
    LOOPWARDEN_IDLE: "0",
    NO_COLOR: "1",
    HOME: home,
    XDG_DATA_HOME: path.join(home, ".local", "share"),
    XDG_CONFIG_HOME: path.join(home, ".config"),
    XDG_CACHE_HOME: path.join(home, ".cache"),
    npm_config_prefix: path.join(root, "npm-prefix"),
    npm_config_cache: path.join(root, "npm-cache"),
    npm_config_update_notifier: "false",
  };
}

/** The lines of `file`'s section `heading` ("## …"): from the heading to the next one of the same level. */
export function sectionLines(file: string, heading: string): string[] {
  const lines = readFileSync(file, "utf8").split("\n");
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`${file} has no section "${heading}"`);
  const level = /^#+ /.exec(heading)?.[0] ?? "## ";
  const next = lines.findIndex((line, index) => index > start && line.startsWith(level));
  return lines.slice(start + 1, next < 0 ? undefined : next);
}

/** A fenced code block: its language (```sh → "sh") and its text, without the fence's indentation. */
export interface FencedBlock {
  lang: string;
  text: string;
}

/** The fenced blocks of `file`'s section `heading`, in order; a block inside a list item is dedented by its fence's indentation. */
export function sectionBlocks(file: string, heading: string): FencedBlock[] {
  const blocks: FencedBlock[] = [];
  let open: { lang: string; indent: string; lines: string[] } | null = null;
  for (const line of sectionLines(file, heading)) {
    const fence = /^(\s*)```\s*([\w-]*)\s*$/.exec(line);
    if (open === null && fence) open = { lang: fence[2] ?? "", indent: fence[1] ?? "", lines: [] };
    else if (open !== null && fence && fence[2] === "") {
      blocks.push({ lang: open.lang, text: open.lines.join("\n") });
      open = null;
    } else if (open !== null) open.lines.push(line.startsWith(open.indent) ? line.slice(open.indent.length) : line.trimStart());
  }
  if (open !== null) throw new Error(`${file}'s section "${heading}" has an unclosed \`\`\`${open.lang} block`);
  return blocks;
}

/** The outcome of one block. */
export interface BlockResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
  timedOut: boolean;
}

/** A block and what it did, for an assertion's message: enough to see why it failed without rerunning. */
export function shown(script: string, result: BlockResult): string {
  const tail = (text: string) => (text.length > 6_000 ? `…${text.slice(-6_000)}` : text);
  const ended = result.timedOut ? "timed out" : result.signal ? `killed by ${result.signal}` : `exit ${result.code}`;
  return `\n--- block (${ended} after ${result.ms} ms) ---\n${script}\n--- stdout ---\n${tail(result.stdout)}\n--- stderr ---\n${tail(result.stderr)}\n`;
}

/**
 * Runs a block with `bash -euo pipefail -c` in its own process group, killed whole (by its group id)
 * if it outlives `timeoutMs`.
 */
export function runBlock(script: string, options: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number }): Promise<BlockResult> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/bash", ["-euo", "pipefail", "-c", script], {
      cwd: options.cwd,
      env: options.env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const kill = (signal: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, signal);
      } catch {
        // The group is gone already.
      }
    };
    let killTimer: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      timedOut = true;
      kill("SIGTERM");
      killTimer = setTimeout(() => kill("SIGKILL"), 5_000);
    }, options.timeoutMs);
    child.on("error", reject);
    child.on("close", (code, signal) => {
      // Once the script's processes are gone their group id is free: no signal may follow to whatever gets it.
      clearTimeout(timer);
      clearTimeout(killTimer);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - started, timedOut });
    });
  });
}

/** One command typed into a Terminal and what it did. */
export interface LineResult {
  command: string;
  /** Its exit status (`$?`); null when it did not end (the shell died, or `timeoutMs` passed). */
  status: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** A command a Terminal started in the background (`command &`), in a process group of its own. */
export interface BackgroundJob {
  command: string;
  /** Its pid, also its process group's id. */
  pid: number;
  /** When it started (`processStartTicks`): its pid names it only while this matches. */
  startTicks: number | null;
  /** What it printed so far, stdout and stderr as they came. */
  output(): string;
}

/**
 * A reader's shell: one `bash -uo pipefail` reading its commands from a FIFO as they are typed, so what
 * one command exports the next sees, and a placeholder in a block's later line can be filled from what
 * an earlier line of it printed. Each command's exit status is checked by the caller (a reader sees it),
 * so a failing line does not end the shell as `-e` would. Foreground commands run in the shell's own
 * process group; one started with `start` runs in a group of its own (`set -m` around it), as a job
 * started in another terminal does, and is stopped by its pid (`stop`, Ctrl-C by default).
 */
export class Terminal {
  private stdout = "";
  private stderr = "";
  /** stdout and stderr together, as they came: a background job's output. */
  private combined = "";
  private exited: number | null | undefined;
  private readonly log: string[] = [];

  private constructor(
    private readonly shell: ChildProcess,
    private readonly script: WriteStream,
    readonly name: string,
  ) {
    shell.stdout?.on("data", (chunk: Buffer) => {
      this.stdout += chunk.toString();
      this.combined += chunk.toString();
    });
    shell.stderr?.on("data", (chunk: Buffer) => {
      this.stderr += chunk.toString();
      this.combined += chunk.toString();
    });
    shell.on("close", (code) => (this.exited = code));
  }

  /** Opens a shell in `cwd` with `env`, reading its commands from the FIFO `fifo` (made here; it must not exist). */
  static open(name: string, options: { cwd: string; env: NodeJS.ProcessEnv; fifo: string }): Terminal {
    execFileSync("mkfifo", ["-m", "600", options.fifo]);
    const shell = spawn("/bin/bash", ["--noprofile", "--norc", "-uo", "pipefail", options.fifo], {
      cwd: options.cwd,
      env: options.env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    return new Terminal(shell, createWriteStream(options.fifo), name);
  }

  /** The shell's pid, also its process group's id. */
  get pid(): number {
    return this.shell.pid ?? -1;
  }

  /** Every command typed so far and what it printed, for an assertion's message. */
  transcript(): string {
    const tail = (text: string) => (text.length > 8_000 ? `…${text.slice(-8_000)}` : text);
    return `\n--- terminal "${this.name}" ---\n${tail(this.log.join("\n"))}\n`;
  }

  /** Types `command`, waits for it to end (at most `timeoutMs`; then the shell's group is killed) and returns what it did. */
  async run(command: string, timeoutMs = 60_000): Promise<LineResult> {
    const started = Date.now();
    const mark = `@@lw-${randomBytes(6).toString("hex")}`;
    const from = { stdout: this.stdout.length, stderr: this.stderr.length };
    this.script.write(`${command}\n__lw_status=$?; printf '\\n%s %d\\n' ${mark} "$__lw_status"; printf '\\n%s\\n' ${mark} >&2\n`);
    const ended = await this.until(() => this.stdout.includes(`\n${mark} `, from.stdout) && this.stderr.includes(`\n${mark}\n`, from.stderr), timeoutMs);
    const outEnd = this.stdout.indexOf(`\n${mark} `, from.stdout);
    const errEnd = this.stderr.indexOf(`\n${mark}\n`, from.stderr);
    const status = ended && outEnd >= 0 ? Number(/^ (\d+)/.exec(this.stdout.slice(outEnd + mark.length + 1))?.[1]) : null;
    const result: LineResult = {
      command,
      status,
      stdout: this.stdout.slice(from.stdout, outEnd >= 0 ? outEnd : undefined),
      stderr: this.stderr.slice(from.stderr, errEnd >= 0 ? errEnd : undefined),
      ms: Date.now() - started,
    };
    this.log.push(
      `$ ${command}\n${result.stdout}${result.stderr}[${status === null ? (ended ? "the shell ended" : "timed out") : `exit ${status}`} after ${result.ms} ms]`,
    );
    if (!ended) this.kill("SIGKILL");
    return result;
  }

  /** Types `command &` with job control on, so that it runs in a process group of its own, and returns it. */
  async start(command: string): Promise<BackgroundJob> {
    const started = await this.run(`set -m; ${command} &\n__lw_job=$!; set +m; echo "$__lw_job"`, 10_000);
    const pid = Number(started.stdout.trim().split("\n").at(-1));
    if (started.status !== 0 || !Number.isInteger(pid) || pid <= 0) throw new Error(`could not start ${command} in the background:${this.transcript()}`);
    const from = this.combined.length;
    this.log.push(`(${command} runs in the background as pid ${pid})`);
    return { command, pid, startTicks: processStartTicks(pid), output: () => this.combined.slice(from) };
  }

  /**
   * Stops a job `start` began: `signal` to its process group (SIGINT, what Ctrl-C sends), SIGKILL if it
   * is not gone within `graceMs`; returns its exit status as `wait` reports it (128 + the signal's number when killed).
   */
  async stop(job: BackgroundJob, signal: NodeJS.Signals = "SIGINT", graceMs = 20_000): Promise<number | null> {
    // A job that ended already has freed its pid, which another process may have by now: it is signalled
    // only while it is still the job.
    const isJob = () => isSameProcess(job.pid, job.startTicks);
    if (isJob()) signalGroup(job.pid, signal);
    const deadline = Date.now() + graceMs;
    while (isJob() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    if (isJob()) signalGroup(job.pid, "SIGKILL");
    const waited = await this.run(`wait ${job.pid}`, 10_000);
    this.log.push(`(${job.command}, pid ${job.pid}, stopped by ${signal}: exit ${waited.status})\n${job.output()}`);
    return waited.status;
  }

  /** Ends the shell (end of its input, as `exit`); its exit status. */
  async close(timeoutMs = 10_000): Promise<number | null> {
    this.script.end();
    if (!(await this.until(() => this.exited !== undefined, timeoutMs))) this.kill("SIGKILL");
    return this.exited ?? null;
  }

  /** Kills the shell's process group (not the groups of the jobs it started). */
  kill(signal: NodeJS.Signals): void {
    signalGroup(this.pid, signal);
  }

  private async until(condition: () => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!condition()) {
      if (this.exited !== undefined || Date.now() > deadline) return condition();
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    return true;
  }
}

/** Sends `signal` to the process group `pid` leads, if it is still there. */
function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    if (pid > 0) process.kill(-pid, signal);
  } catch {
    // The group is gone already.
  }
}

/** The processes whose environment names `marker` (a test's temporary directory): every one it started, workerd and the zones included. */
export function processesNaming(marker: string): { pid: number; command: string }[] {
  const found: { pid: number; command: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (!readFileSync(`/proc/${entry}/environ`, "utf8").includes(marker) || !isAlive(Number(entry))) continue;
      found.push({ pid: Number(entry), command: readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ").trim() });
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return found;
}

/** Waits (at most `ms`) until no process names `marker`; those still running then. */
export async function processesLeft(marker: string, ms = 5_000): Promise<{ pid: number; command: string }[]> {
  const deadline = Date.now() + ms;
  let left = processesNaming(marker);
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    left = processesNaming(marker);
  }
  return left;
}

/** SIGKILLs, by pid, every process whose environment names `marker`: a test's last resort in afterAll. */
export async function killProcessesNaming(marker: string): Promise<void> {
  for (const { pid } of processesNaming(marker)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Gone already.
    }
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
}

/** The workerd processes running now (`pgrep -af workerd`), by pid. */
export function workerdPids(): number[] {
  try {
    return execFileSync("pgrep", ["-f", "workerd"], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number);
  } catch (error) {
    // pgrep exits 1 when nothing matches; any other failure is the query's, never "none left".
    if ((error as { status?: number | null }).status === 1) return [];
    throw error;
  }
}
