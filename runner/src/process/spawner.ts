import { execFile, spawn, type ChildProcess } from "node:child_process";
import { promisify } from "node:util";

// Short-lived commands (git) started from a small helper process instead of from the runner itself.
//
// Node starts a child with fork() then exec(), and the fork copies the parent's page tables while the
// event loop waits: measured on the runner, 2.5 ms a command with a coordinator elsewhere and 4.5 ms with
// the local coordinator (Miniflare) in the process, against 1.3 ms from a bare Node process — and an
// iteration runs about a dozen git commands. The helper is a bare Node process, started once, that
// runs each command it is sent (execFile, the same options) and sends back what it printed; the runner
// only passes messages. The agent and the gates are started by the runner itself (`exec.ts`): they need
// its process groups, timeouts and kill on shutdown. When the helper cannot be started or dies, commands
// are run directly, as before.

const execFileAsync = promisify(execFile);

/** What a command printed; `encoding` as execFile's (utf8, or latin1 for bytes kept one per char). */
export interface ExecOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  encoding: "utf8" | "latin1";
  maxBuffer: number;
}

/** A command that failed: execFile's error, carried across the helper with what the command printed. */
export class ExecFailure extends Error {
  constructor(
    message: string,
    readonly stdout: string,
    readonly stderr: string,
  ) {
    super(message);
    this.name = "ExecFailure";
  }
}

// The helper, plain JavaScript given to `node -e`: no file to find in a source checkout or a package.
const HELPER = `
const { execFile } = require("node:child_process");
process.on("message", (request) => {
  execFile(request.file, request.args, request.options, (error, stdout, stderr) => {
    process.send({ id: request.id, error: error ? error.message : null, stdout, stderr });
  });
});
process.on("disconnect", () => process.exit(0));
process.send({ ready: true });
// A Ctrl-C reaches the whole process group: the runner decides when the helper goes (SIGKILL, or its exit).
process.on("SIGINT", () => {});
process.on("SIGTERM", () => {});
`;

interface Reply {
  id: number;
  error: string | null;
  stdout: string;
  stderr: string;
}

// The helper process, and whether it has said it is ready: until then, and without one, commands run
// directly.
let helper: ChildProcess | null = null;
let ready = false;
let nextId = 1;
const pending = new Map<number, { resolve: (reply: Reply) => void; reject: (error: Error) => void }>();

/**
 * Starts the helper, for a command that runs many git commands (run, step, work): it takes commands
 * once it has started (about 50 ms; those before run directly). A short command does without. Once
 * stopped, or gone, it is not started again.
 */
export function useCommandHelper(): void {
  if (helper) return;
  try {
    const child = spawn(process.execPath, ["-e", HELPER], { stdio: ["ignore", "ignore", "inherit", "ipc"], serialization: "advanced" });
    helper = child;
    child.on("message", (reply: Reply | { ready: true }) => {
      if ("ready" in reply) {
        ready = helper === child;
        return;
      }
      const waiting = pending.get(reply.id);
      pending.delete(reply.id);
      waiting?.resolve(reply);
      if (pending.size === 0) idle(child);
    });
    const gone = (error: Error) => {
      if (helper === child) ready = false;
      for (const waiting of pending.values()) waiting.reject(error);
      pending.clear();
    };
    child.on("error", gone);
    child.on("exit", () => gone(new Error("the command helper exited")));
    // Stopped by its pid when the runner ends; it also exits on its own when the runner's channel closes.
    process.once("exit", () => child.kill("SIGKILL"));
    idle(child);
  } catch {
    // No helper: commands run directly.
  }
}

/** The helper's pid while it takes commands (null before it is ready, or once it is gone). */
export function helperPid(): number | null {
  return ready ? (helper?.pid ?? null) : null;
}

/** Stops the helper by its pid: commands after this run directly. The runner's exit stops it too. */
export function stopHelper(): void {
  helper?.kill("SIGKILL");
  ready = false;
}

/** While nothing is in flight, the helper does not keep the runner's event loop alive. */
function idle(child: ChildProcess): void {
  child.unref();
  child.channel?.unref();
}

function busy(child: ChildProcess): void {
  child.ref();
  child.channel?.ref();
}

/** Runs `file` with `args` and answers what it printed on stdout; rejects with an ExecFailure. */
export async function execCommand(file: string, args: readonly string[], options: ExecOptions): Promise<string> {
  const child = ready ? helper : null;
  if (child?.connected) {
    const id = nextId++;
    const reply = await new Promise<Reply>((resolve, reject) => {
      pending.set(id, { resolve, reject });
      busy(child);
      child.send({ id, file, args, options }, (error) => {
        if (!error) return;
        pending.delete(id);
        reject(error);
      });
    }).catch((error: unknown) => {
      // Whether the command ran is unknown (a commit run twice is two commits): it is not run again here.
      const message = `the command helper stopped while it ran this command, so its outcome is unknown: ${(error as Error).message}`;
      throw new ExecFailure(message, "", message);
    });
    if (reply.error !== null) throw new ExecFailure(reply.error, reply.stdout, reply.stderr);
    return reply.stdout;
  }
  try {
    const { stdout } = await execFileAsync(file, [...args], options);
    return stdout;
  } catch (error) {
    const failed = error as { message: string; stdout?: string; stderr?: string };
    throw new ExecFailure(failed.message, failed.stdout ?? "", failed.stderr ?? "");
  }
}
