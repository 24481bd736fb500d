import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { VERSION } from "../../shared/version.js";
import { CoordinatorError } from "./client.js";
import { UserError } from "./errors.js";
import { emitResult, type OutputMode } from "./output.js";

// Commands are loaded lazily, so `--version` and `--help` never load the worker tooling.

interface GlobalOptions {
  server?: string;
  token?: string;
  state?: string;
  json: boolean;
  quiet: boolean;
}

function positiveInt(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 1) throw new InvalidArgumentError("must be a positive whole number");
  return parsed;
}

function port(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 1 || parsed > 65_535) throw new InvalidArgumentError("must be a port number (1-65535)");
  return parsed;
}

const program = new Command()
  .name("loopwarden")
  .description("Coordinate long-running agent loops: the coordinator, never the agent, decides what is kept.")
  .version(VERSION, "-V, --version")
  .option("--server <url>", "coordinator URL (env LOOPWARDEN_SERVER); default: the local coordinator, started on demand")
  .option("--token <token>", "API token (env LOOPWARDEN_TOKEN)")
  .option("--state <dir>", "local coordinator state directory (env LOOPWARDEN_STATE; default: per-user data dir)")
  .option("--json", "print exactly one JSON object on stdout", false)
  .option("--quiet", "no progress output on stderr", false)
  .showHelpAfterError()
  .exitOverride();

function globals(): GlobalOptions {
  return program.opts<GlobalOptions>();
}

let exitCode = 0;

program
  .command("serve")
  .description("run the local coordinator (workerd) in the foreground on 127.0.0.1; prints its URL")
  .addOption(new Option("--port <port>", "port to listen on").argParser(port).default(8787))
  .action(async (options: { port: number }) => {
    const { serveCommand } = await import("./commands/serve.js");
    exitCode = await serveCommand({ ...globals(), port: options.port });
  });

program
  .command("run")
  .description("create a loop, capture t0, then iterate agent → candidate → evaluate → verdict → keep/revert until a halt; exits with the halt's class")
  .option("--check <cmd>", "the check: one command whose exit code is the one test (flag-only mode)")
  .option("--exec <cmd>", "the agent command, run in the working tree once per iteration")
  .option("--max-iterations <n>", "stop after N iterations (default 50)", positiveInt)
  .option("--name <name>", "loop name (default: the repository's directory name)")
  .option("--check-timeout <duration>", "time limit of the check, e.g. 90s, 10m (default 10m)")
  .option("--agent-timeout <duration>", "time limit of one agent run (default 20m)")
  .action(async (options: { check?: string; exec?: string; maxIterations?: number; name?: string; checkTimeout?: string; agentTimeout?: string }) => {
    const { runCommandLoop } = await import("./commands/run.js");
    exitCode = await runCommandLoop({ ...globals(), ...options, cwd: process.cwd() });
  });

program
  .command("status")
  .description("state summary of a loop (default: this repository's current loop)")
  .argument("[loop]", "loop id")
  .action(async (loop: string | undefined) => {
    const { statusCommand } = await import("./commands/status.js");
    exitCode = await statusCommand(loop, { ...globals(), cwd: process.cwd() });
  });

function fail(mode: OutputMode, message: string, code: number): void {
  if (mode.json) emitResult(mode, { status: "error", errors: [message] }, []);
  else process.stderr.write(`loopwarden: ${message}\n`);
  process.exitCode = code;
}

try {
  await program.parseAsync(process.argv);
  process.exitCode = exitCode;
} catch (error) {
  const mode = { json: Boolean(globals().json), quiet: Boolean(globals().quiet) };
  if (error instanceof CommanderError) {
    // Help and version exit 0; every other parse failure is a usage error (DESIGN §7: 2).
    process.exitCode = error.exitCode === 0 ? 0 : 2;
  } else if (error instanceof UserError) {
    fail(mode, error.message, error.exitCode);
  } else if (error instanceof CoordinatorError) {
    fail(mode, `the coordinator refused: ${error.message} (${error.code})`, 1);
  } else {
    if (mode.json) fail(mode, String(error), 1);
    else {
      process.stderr.write(`loopwarden: unexpected error — this is a bug, please report it:\n`);
      console.error(error);
      process.exitCode = 1;
    }
  }
}
