import { createHash } from "node:crypto";
import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { useSha256 } from "#shared/hash.js";
import { VERSION } from "#shared/version.js";
// Only what every command needs: the commands, the client and their schemas load lazily.
import { CoordinatorError, UserError } from "./errors.js";
import { emitResult, type OutputMode } from "./output.js";
import { surviveClosedPipes } from "./process/shutdown.js";
import { registerTenancyCommands, type GlobalOptions } from "./cli-tenancy.js";

// Commands are loaded lazily, so `--version` and `--help` never load the worker tooling.

// The engine hashes (event chains, digests) with Node's native SHA-256 here: eight times the portable one's speed.
useSha256((input) => createHash("sha256").update(input).digest("hex"));

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
  .option("--contract <file>", "the loop contract (default loop.yaml in the repository)")
  .option("--json", "print exactly one JSON object on stdout", false)
  .option("--quiet", "no progress output on stderr", false)
  .addHelpText(
    "after",
    "\nA request to the coordinator or storage is abandoned (then retried for a minute) when nothing moves for LOOPWARDEN_HTTP_IDLE_TIMEOUT\n(default 60s): no byte sent, no answer begun, no byte received. Uploads and downloads are never timed whole.",
  )
  .showHelpAfterError()
  .exitOverride()
  .hook("preAction", async (_program, action) => {
    if (action.opts<{ unconfined?: boolean }>().unconfined) (await import("./zones/isolation.js")).runUnconfined();
    // Another local user (or an agent running as you, unconfined) reads a command line from /proc.
    if (globals().token !== undefined && !globals().quiet) {
      process.stderr.write(
        "loopwarden: warning: --token puts the token on the command line, where other local processes can read it; prefer LOOPWARDEN_TOKEN\n",
      );
    }
  });

function globals(): GlobalOptions {
  return program.opts<GlobalOptions>();
}

let exitCode = 0;

program
  .command("serve")
  .description(
    "run the local coordinator (workerd) in the foreground on 127.0.0.1; prints its URL and a one-time link that opens the dashboard logged in. --stop stops the one serving the state directory",
  )
  .addOption(new Option("--port <port>", "port to listen on (default 8787)").argParser(port))
  .option("--stop", "stop the local coordinator serving the state directory (a warm one, or another serve), by its pid", false)
  .addOption(new Option("--daemon", "run as a warm coordinator a command started: stop after --idle without use").hideHelp())
  .addOption(new Option("--idle <ms>", "with --daemon: idle period in milliseconds").argParser(positiveInt).hideHelp())
  .action(async (options: { port?: number; stop: boolean; daemon?: boolean; idle?: number }) => {
    const { serveCommand } = await import("./commands/serve.js");
    exitCode = await serveCommand({ ...globals(), ...options, port: options.port ?? (options.daemon ? undefined : 8787) });
  });

/** The contract flags (flag-only mode, DESIGN §5): every command that loads the contract takes them. */
const contractOptions = (command: Command) =>
  command
    .option("--check <cmd>", "flag-only mode: the check, one command whose exit code is the one test")
    .option("--exec <cmd>", "flag-only mode: the agent command, run once per iteration in a workspace (a clone of the best so far), confined")
    .option("--max-iterations <n>", "stop after N iterations (overrides the contract; default 50)", positiveInt)
    .option("--name <name>", "flag-only mode: loop name (default: the repository's directory name)")
    .option("--check-timeout <duration>", "flag-only mode: time limit of the check, e.g. 90s, 10m (default 10m)")
    .option("--agent-timeout <duration>", "flag-only mode: time limit of one agent run (default 20m)")
    .option("--junit <path>", "flag-only mode: the JUnit XML report the check writes (relative to the repository); its test ids make each fixed test count")
    .option("--tap <path>", "flag-only mode: the TAP report the check writes, instead of --junit")
    .option(
      "--scope <glob...>",
      "flag-only mode: the paths a candidate may change, e.g. --scope 'src/**' 'lib/**' (any other path is blocked_path_modified; without it, only the default protected set applies)",
    )
    .option(
      "--unconfined",
      "run the agent and the gates without their zones (DESIGN §6.7: no sandbox, the host's network), as `isolation: none` does; the log and the receipt record it",
    );

/** This machine's runner labels (DESIGN §11), for commands that evaluate. */
const labelsOption = (command: Command, what: string) => command.option("--labels <k=v,...>", `this machine's runner labels, e.g. gpu=h100,os=linux: ${what}`);

/** What `run` and `step` add: a new loop on request, and the labels this machine evaluates with. */
const loopOptions = (command: Command) =>
  labelsOption(
    contractOptions(command)
      .option("--new", "start another loop even when one is recorded for this contract (t0 at HEAD, which must be a commit you made)", false)
      .option(
        "--skip-doctor",
        "start a new loop without its precondition (the check run again in fresh clones and in one clone, and on the contract's doctor.mutate tree, before the first agent run); the loop's receipt records that it was skipped",
        false,
      ),
    "this command evaluates its own candidates only when they satisfy the contract's evaluate.labels (else `loopwarden work` runners do)",
  );

interface ContractFlags {
  check?: string;
  exec?: string;
  maxIterations?: number;
  name?: string;
  checkTimeout?: string;
  agentTimeout?: string;
  junit?: string;
  tap?: string;
  scope?: string[];
  new?: boolean;
  skipDoctor?: boolean;
  labels?: string;
}

program
  .command("init")
  .description(
    "write a commented starter loop.yaml (check_fixpoint, with a test-report gate for vitest, jest+jest-junit, node --test, pytest, gotestsum or cargo nextest, and a scope: the only paths the agent may change, inferred from what the project declares as its source — package.json main/bin/exports/files and src/ or lib/, Python import packages, Cargo's src/, Go packages — to review; commented out, with a warning, when none is found) and program.md (the agent's instructions, its scope and this project's protected files), and add .loopwarden/ to .gitignore",
  )
  .option("--mode <mode>", "loop mode of the starter (init writes check_fixpoint starters; edit loop.yaml for optimize or task_list)", "check_fixpoint")
  .option(
    "--agent <name|cmd>",
    "the agent: a preset (claude, codex, gemini, aider, opencode) writes its headless command, its model hosts (agent.network.allow) and its API-key variable (agent.env); anything else is the command to put in agent.run, with no network",
  )
  .action(async (options: { mode: string; agent?: string }) => {
    const { initCommand } = await import("./commands/init.js");
    exitCode = await initCommand({ ...globals(), ...options, cwd: process.cwd() });
  });

loopOptions(
  program
    .command("run")
    .description(
      "create or resume this repository's loop for its contract, capture t0 (with evaluate.labels this runner lacks, a runner that has them measures it: run waits for one and says so), then iterate agent → candidate → evaluate → verdict → keep/revert until a halt; exits with the halt's class. A running loop resumes whatever the flags (flags that would change its pinned contract are refused); a halted one is reported with its exit class; --new starts another. On the local coordinator it prints a one-time link to the loop's dashboard page",
    )
    .option("--once", "run one iteration, then exit (0 unless the loop halted)", false),
).action(async (options: ContractFlags & { once: boolean }) => {
  const { runLoop } = await import("./commands/run.js");
  exitCode = await runLoop({ ...globals(), ...options, cwd: process.cwd() });
});

loopOptions(
  program
    .command("step")
    .description("evaluate the current working tree as one candidate, apply the verdict, exit (for agents that drive the loop themselves)"),
).action(async (options: ContractFlags) => {
  const { stepLoop } = await import("./commands/step.js");
  exitCode = await stepLoop({ ...globals(), ...options, cwd: process.cwd() });
});

function concurrency(value: string): number {
  const parsed = positiveInt(value);
  if (parsed > 16) throw new InvalidArgumentError("at most 16 jobs at a time");
  return parsed;
}

labelsOption(
  contractOptions(
    program
      .command("work")
      .description(
        "serve as a runner for shared loops: lease jobs from the loops pinned to this checkout's contract (or --loop) — a new loop's baseline first, measured here and reported so the loop is created from it — evaluate each candidate in a clean clone of the candidate commit (fetched from its bundle when this checkout lacks it), report, and go on. A job whose loop halted meanwhile just ends; a job this checkout can never run (another contract hash, a commit it lacks with no bundle) is given back and its loop served no more (with --loop: exit 1); any other failed job is printed with its label and given back, and the runner goes on. The first Ctrl-C finishes the jobs in hand; the second stops them at once and gives their leases back, so their jobs are queued again at once",
      )
      .option("--loop <id>", "serve only this loop, and stop when it halts (exit 0, saying so)")
      .option("--concurrency <n>", "jobs at a time (default 1, at most 16)", concurrency),
  ),
  "it takes only jobs whose contract's evaluate.labels they satisfy",
).action(async (options: ContractFlags & { loop?: string; concurrency?: number }) => {
  const { workCommand } = await import("./commands/work.js");
  exitCode = await workCommand({ ...globals(), ...options, cwd: process.cwd() });
});

/** A read-only command about one loop (default: this repository's current loop), loaded lazily. */
type LoopCommand = (loop: string | undefined, options: GlobalOptions & { cwd: string }) => Promise<number>;

function loopCommand(name: string, description: string, load: () => Promise<LoopCommand>): void {
  program
    .command(name)
    .description(`${description} (default: this repository's current loop)`)
    .argument("[loop]", "loop id")
    .action(async (loop: string | undefined) => {
      exitCode = await (await load())(loop, { ...globals(), cwd: process.cwd() });
    });
}

loopCommand(
  "status",
  "state summary of a loop (awaiting_baseline, with what it waits for, before a runner has measured its t0)",
  async () => (await import("./commands/status.js")).statusCommand,
);
loopCommand("watch", "print the loop's event log live until it halts", async () => (await import("./commands/watch.js")).watchCommand);
loopCommand(
  "explain",
  "why the loop halted, in plain words: the evidence, and whether to raise a limit or not retry",
  async () => (await import("./commands/explain.js")).explainCommand,
);

program
  .command("cancel")
  .description(
    "stop a running loop on purpose: it halts with cancelled (exit class 11), recorded with who asked and why and signed like any halt; its runners stop at their next heartbeat (default: this repository's current loop; needs the propose scope)",
  )
  .argument("[loop]", "loop id")
  .option("--reason <text>", "why, shown with the halt and in the receipt's log (at most 500 characters)")
  .action(async (loop: string | undefined, options: { reason?: string }) => {
    const { cancelCommand } = await import("./commands/cancel.js");
    exitCode = await cancelCommand(loop, { ...globals(), ...options, cwd: process.cwd() });
  });

program
  .command("review")
  .description(
    "show the candidates whose agent asked to change protected files: which files, why, until when the request waits (stop.review_timeout), and the diff; then answer with ack or reject (default: this repository's current loop)",
  )
  .argument("[loop]", "loop id")
  .action(async (loop: string | undefined) => {
    const { reviewCommand } = await import("./commands/review.js");
    exitCode = await reviewCommand(loop, { ...globals(), cwd: process.cwd() });
  });

for (const decision of ["ack", "reject"] as const) {
  program
    .command(decision)
    .description(
      decision === "ack"
        ? "approve a candidate's request to change protected files: exactly those files may change for it, and it is evaluated and judged; recorded with who approved (needs the admin or review scope, which no runner's token should have)"
        : "refuse a candidate's request to change protected files: it is rejected (review_rejected) and the loop goes on; recorded with who refused (needs the admin or review scope)",
    )
    .argument("<candidate>", "candidate id (c3), as review lists it")
    .requiredOption("--note <text>", "why, recorded in the signed log and shown in the receipt")
    .option("--loop <id>", "the loop (default: this repository's current loop)")
    .action(async (candidate: string, options: { note: string; loop?: string }) => {
      const { answerReview } = await import("./commands/review.js");
      exitCode = await answerReview(decision, candidate, { ...globals(), ...options, cwd: process.cwd() });
    });
}

program
  .command("logs")
  .description(
    "print the stored output of a candidate's (or t0's) gate: by default the latest evaluated candidate's first failing gate, a hard one before a soft one, or its last gate when every gate passed (default loop: this repository's)",
  )
  .argument("[candidate]", "candidate id (c1, c2, …), or t0 for the baseline")
  .argument("[loop]", "loop id")
  .option("--gate <name>", "this gate's output")
  .option("--metric", "the metric command's output (optimize loops)")
  .action(async (candidate: string | undefined, loop: string | undefined, options: { gate?: string; metric?: boolean }) => {
    const { logsCommand } = await import("./commands/logs.js");
    exitCode = await logsCommand(candidate, loop, { ...globals(), ...options, cwd: process.cwd() });
  });

program
  .command("artifacts")
  .description(
    "list the files a candidate's (or t0's) evaluation stored (gate logs, metric output, the contract's artifacts) and what it could not store, and why; --download writes them, digests checked",
  )
  .argument("[candidate]", "candidate id, or t0 for the baseline (default: the latest evaluated candidate)")
  .argument("[loop]", "loop id (default: this repository's)")
  .option("--download <dir>", "write every file to DIR")
  .action(async (candidate: string | undefined, loop: string | undefined, options: { download?: string }) => {
    const { artifactsCommand } = await import("./commands/logs.js");
    exitCode = await artifactsCommand(candidate, loop, { ...globals(), ...options, cwd: process.cwd() });
  });

program
  .command("receipt")
  .description("issue a signed interim receipt over the loop's event log as it is now and print its public URL (default: this repository's current loop)")
  .argument("[loop]", "loop id")
  .option("--save <dir>", "also write the receipt, its log and the key set to DIR, for verifying offline")
  .action(async (loop: string | undefined, options: { save?: string }) => {
    const { receiptCommand } = await import("./commands/receipt.js");
    exitCode = await receiptCommand(loop, { ...globals(), ...options, cwd: process.cwd() });
  });

program
  .command("verify")
  .description(
    "verify a receipt: the signature against the published (or --key) key, the hash chain up to the signed head, every verdict and the halt re-derived, the attested figures; exit 0 valid, 13 invalid",
  )
  .argument("<receipt>", "a receipt URL (…/r/<id>) or a saved envelope file")
  .option("--events <file>", "the log the receipt file signs (JSONL), for a receipt file")
  .option("--key <file>", "verify against this public key (a JWK) or key set instead of the coordinator's published keys")
  .option("--key-fingerprint <kid>", "accept only a signature by the key with this RFC 7638 thumbprint (the kid verify prints), wherever the key set came from")
  .action(async (receipt: string, options: { events?: string; key?: string; keyFingerprint?: string }) => {
    const { verifyCommand } = await import("./commands/verify.js");
    exitCode = await verifyCommand(receipt, { ...globals(), ...options });
  });

contractOptions(
  program
    .command("replay")
    .description(
      "verify a receipt, then re-run its loop's gates (and metric) on the best commit in a clean clone of this repository and compare the fingerprint (gate exit codes, collected and failing test sets, the metric within the recorded precision); exit 0 match, 13 differs",
    )
    .argument("<receipt>", "a receipt URL (…/r/<id>) or a saved envelope file")
    .option("--events <file>", "the log the receipt file signs (JSONL), for a receipt file")
    .option("--key <file>", "verify against this public key (a JWK) or key set instead of the coordinator's published keys")
    .option(
      "--key-fingerprint <kid>",
      "accept only a signature by the key with this RFC 7638 thumbprint (the kid verify prints), wherever the key set came from",
    ),
).action(async (receipt: string, options: ContractFlags & { events?: string; key?: string; keyFingerprint?: string }) => {
  const { replayCommand } = await import("./commands/replay.js");
  exitCode = await replayCommand(receipt, { ...globals(), ...options, cwd: process.cwd() });
});

labelsOption(
  contractOptions(
    program
      .command("reexecute")
      .description(
        "verify a receipt, then RE-RUN its loop: the live agent loop again from the receipt's t0, with its contract (this checkout's at t0, or the flags given, hashing to the receipt's) and its agent, as a new loop with its own receipt, in a fresh clone of this repository; compares the outcomes, never bytes (an agent is not deterministic): the halt reason, the final failing set, the metric within the original's interval, the iterations shown; exit 0 match, 13 differs. replay only re-checks the recorded best, with no agent; reexecute spends the agent's budget again (max_iterations agent runs at most), so it runs only with --confirm (without it: prints what it would run, exit 2)",
      )
      .argument("<receipt>", "a receipt URL (…/r/<id>) or a saved envelope file")
      .option("--confirm", "run it: the agent runs again and spends its budget", false)
      .option("--events <file>", "the log the receipt file signs (JSONL), for a receipt file")
      .option("--key <file>", "verify against this public key (a JWK) or key set instead of the coordinator's published keys")
      .option(
        "--key-fingerprint <kid>",
        "accept only a signature by the key with this RFC 7638 thumbprint (the kid verify prints), wherever the key set came from",
      ),
  ),
  "passed to the re-run's `run`",
).action(
  async (receipt: string, options: ContractFlags & { confirm: boolean; unconfined?: boolean; events?: string; key?: string; keyFingerprint?: string }) => {
    const { reexecuteCommand } = await import("./commands/reexecute.js");
    exitCode = await reexecuteCommand(receipt, { ...globals(), ...options, cwd: process.cwd() });
  },
);

function flakeRate(value: string): number {
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed <= 0 || parsed >= 1) throw new InvalidArgumentError("must be a fraction between 0 and 1, e.g. 0.05 for 5%");
  return parsed;
}

program
  .command("probe")
  .description("run the gates N times on HEAD, each in a fresh clone; report the flake-rate upper bound and the tests that flipped (exit 14 check_flaky)")
  .option("--runs <n>", "runs of the gates (default 10, at most 1000)", positiveInt)
  .option("--max-flake-rate <r>", "run enough times (⌈3/R⌉, the rule of three) to bound the flake rate by R with no flip", flakeRate)
  .option("--unconfined", "run the gates without their zone (DESIGN §6.7), as `isolation: none` does")
  .action(async (options: { runs?: number; maxFlakeRate?: number }) => {
    const { probeCommand } = await import("./commands/probe.js");
    exitCode = await probeCommand({ ...globals(), ...options, cwd: process.cwd() });
  });

program
  .command("doctor")
  .description(
    "check contract, the zones (sandbox, the agent's network, variables and mounts), git, working tree, coordinator (with --server), and that the gates are deterministic, free of side effects and (with --mutate) adequate",
  )
  .option(
    "--mutate <cmd>",
    "a command that breaks the code: the gates must turn red on the tree it leaves (else exit 15 check_inadequate); default: the contract's doctor.mutate",
  )
  .option("--unconfined", "check and run the gates without their zone (DESIGN §6.7), as `isolation: none` does")
  .option("--runs <n>", "runs of the determinism probe (default: the contract's doctor.runs, or ⌈3/R⌉ for its doctor.max_flake_rate R, else 3)", positiveInt)
  .action(async (options: { mutate?: string; runs?: number }) => {
    const { doctorCommand } = await import("./commands/doctor.js");
    exitCode = await doctorCommand({ ...globals(), ...options, cwd: process.cwd() });
  });

program
  .command("export")
  .description("export a loop's history as candidates.jsonl, benchmark.csv or results.tsv (default: this repository's current loop)")
  .argument("[loop]", "loop id")
  .addOption(new Option("--format <format>", "the export format").choices(["candidates.jsonl", "benchmark.csv", "results.tsv"]).makeOptionMandatory())
  .option("--output <file>", "write to FILE instead of stdout (required with --json)")
  .action(async (loop: string | undefined, options: { format: string; output?: string }) => {
    const { exportCommand } = await import("./commands/export.js");
    exitCode = await exportCommand(loop, { ...globals(), ...options, cwd: process.cwd() });
  });

registerTenancyCommands(program, {
  globals,
  done: (code) => {
    exitCode = code;
  },
});

/** What to do about a refusal of the token itself (DESIGN §11). */
function tokenHint(error: CoordinatorError): string {
  if (error.status === 401) {
    // A team's token given, no coordinator named: the command reached (or started) the local one, where
    // the token was never made.
    const named = globals().server ?? process.env.LOOPWARDEN_SERVER;
    if (!named && (globals().token ?? process.env.LOOPWARDEN_TOKEN)) {
      return "; a token is valid only on the coordinator that made it, and this command used the local one: name yours with --server or LOOPWARDEN_SERVER";
    }
    return "; pass a token with --token or LOOPWARDEN_TOKEN (a team admin makes one with `loopwarden token create`)";
  }
  if (error.status === 403) return "; ask a team admin for a token that may do this";
  return "";
}

function fail(mode: OutputMode, message: string, code: number): void {
  if (mode.json) emitResult(mode, { status: "error", errors: [message] }, []);
  else process.stderr.write(`loopwarden: ${message}\n`);
  process.exitCode = code;
}

// `loopwarden status | head -1`: a reader that stops early is no error of the command's, never a stack trace.
surviveClosedPipes();

try {
  await program.parseAsync(process.argv);
  process.exitCode = exitCode;
} catch (error) {
  const mode = { json: Boolean(globals().json), quiet: Boolean(globals().quiet) };
  if (error instanceof CommanderError) {
    // Help and version exit 0; every other parse failure is a usage error (DESIGN §7: 2), already
    // explained on stderr by commander, and with --json also as the one JSON object.
    process.exitCode = error.exitCode === 0 ? 0 : 2;
    if (error.exitCode !== 0 && process.argv.includes("--json")) {
      emitResult(mode, { status: "error", errors: [error.message.replace(/^error: /, "")] }, []);
    }
  } else if (error instanceof UserError) {
    fail(mode, error.message, error.exitCode);
  } else if (error instanceof CoordinatorError) {
    // A 5xx that outlasted the retries is a failure on the coordinator's side; anything else a refusal.
    const what = error.status >= 500 && error.status <= 504 ? `failed (HTTP ${error.status})` : "refused";
    fail(mode, `the coordinator ${what}: ${error.message} (${error.code})${tokenHint(error)}`, 1);
  } else {
    if (mode.json) fail(mode, String(error), 1);
    else {
      process.stderr.write(`loopwarden: unexpected error — this is a bug, please report it:\n`);
      console.error(error);
      process.exitCode = 1;
    }
  }
}
