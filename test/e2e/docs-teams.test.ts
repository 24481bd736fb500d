import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { freePort } from "../../runner/src/coordinator/free-port.js";
import { ROOT, gitIn, loopEvents, makeRepo, recordedLoopId, tempDir } from "../support/cli.js";
import {
  Terminal,
  killProcessesNaming,
  machineEnv,
  processesLeft,
  processesNaming,
  sectionBlocks,
  sectionLines,
  workerdPids,
  type BackgroundJob,
  type FencedBlock,
  type LineResult,
} from "../support/doc-blocks.js";
import { isAlive } from "../support/process.js";
import { twoRunnerProject } from "../support/two-runner-project.js";

// docs/teams.md, "Share a loop with your team" (with the blocks of "Teams and tokens" it relies on), run
// as written (issue 26: the docs cannot drift again). The sections' fenced blocks are read from the file
// when the test runs, in order: a ```sh block's lines are typed one by one into a reader's shell (a
// Terminal: what one line exports the next sees), each placeholder filled with what an earlier command
// printed, the way a reader copies a token or a URL from the terminal (an unknown placeholder fails the
// block: a reader could not fill it either); a ```yaml block is the contract's, merged into the project's
// loop.yaml and committed, as step 3 says. Long-running commands (`loopwarden serve`, `loopwarden work`)
// run in the background in process groups of their own and are stopped by their pids, with Ctrl-C's
// SIGINT. The few commands the section gives in its prose rather than in a block (INLINE) run too.
//
// Three machines, each with its own $HOME and coordinator state in a temporary directory: the laptop,
// which serves the coordinator (step 1's "a try on one machine"), creates the team and runs the agent;
// the GPU box, which runs `work` in a clone of the repository; and a teammate who follows along with a
// read token (from the laptop's shell). The repository is test/support/two-runner-project.ts's (its
// agent fixes calc.js over four iterations), with step 3's `evaluate.labels` in its loop.yaml.
// `loopwarden` on PATH is the compiled CLI (dist/cli, built by the e2e global setup), as an installed
// package runs it.

const TEAMS = path.join(ROOT, "docs", "teams.md");
/** The sections whose blocks run, in this order. */
const SECTIONS = ["## Teams and tokens", "## Share a loop with your team"];

/**
 * Blocks not meant to run here (deploying to Cloudflare, anything contacting a remote host), by their
 * first line, each with why; every other block runs. None today: step 2's only remote thing is the
 * deployed coordinator's URL, for which the block's own comment gives the local one.
 */
const SKIPPED = new Map<string, string>([]);

/**
 * The commands the section gives inline, in its prose rather than in a block: step 1 starts the
 * coordinator, step 5 runs the agent, and the last paragraph's teammate follows along. Each must still
 * be in the section, in backticks, as written here.
 */
const INLINE = {
  serve: "loopwarden serve",
  run: "LOOPWARDEN_TOKEN=<laptop token> loopwarden run",
};

/** The last paragraph's commands with which a teammate follows along, each in backticks there, as written here. */
const FOLLOW = ["loopwarden status LOOP", "loopwarden watch LOOP", "loopwarden explain LOOP", "loopwarden export --format candidates.jsonl LOOP"];

/** The runner labels the section's step 3 asks for and its runner claims. */
const LABELS = "gpu=h100";

/** Every fenced block of the sections, in order, with its section. */
const BLOCKS: (FencedBlock & { heading: string })[] = SECTIONS.flatMap((heading) => sectionBlocks(TEAMS, heading).map((block) => ({ ...block, heading })));

/** A block's first line (what SKIPPED is keyed by). */
const firstLine = (block: FencedBlock): string => block.text.split("\n")[0] ?? "";

/** A block's commands as a reader types them: one a line (a line ending in `\` continued), blank and comment-only lines left out. */
function commandsOf(text: string): string[] {
  const commands: string[] = [];
  let pending = "";
  for (const line of text.split("\n")) {
    if (line.endsWith("\\")) {
      pending += `${line}\n`;
      continue;
    }
    const command = pending + line;
    pending = "";
    if (command.trim() !== "" && !command.trim().startsWith("#")) commands.push(command);
  }
  if (pending) commands.push(pending.trimEnd());
  return commands;
}

/** Whether a command keeps running until stopped: a coordinator or a runner, started in the background. */
const longRunning = (command: string): boolean => /\bloopwarden (serve|work)\b/.test(command);

/** A line's result, for an assertion's message. */
function said(result: LineResult, terminal: Terminal): string {
  return `\n$ ${result.command}\n[exit ${result.status} after ${result.ms} ms]\n--- stdout ---\n${result.stdout}\n--- stderr ---\n${result.stderr}${terminal.transcript()}`;
}

describe("docs/teams.md's team section, run as written", () => {
  const tmp = tempDir("docs-teams");
  const bin = path.join(tmp.dir, "bin");
  const project = path.join(tmp.dir, "laptop", "calc");
  const checkout = path.join(tmp.dir, "gpu-box", "calc");
  const teammateCheckout = path.join(tmp.dir, "teammate", "calc");

  /** A machine's environment: a user's shell with its own $HOME and state, no coordinator or token of the developer's. */
  const machine = (name: string): NodeJS.ProcessEnv => {
    const home = path.join(tmp.dir, name, "home");
    mkdirSync(home, { recursive: true });
    return {
      ...machineEnv(path.join(tmp.dir, name), path.join(tmp.dir, name, "state")),
      PATH: [bin, process.env.PATH ?? ""].join(path.delimiter),
    };
  };
  let fifos = 0;
  const terminal = (name: string, env: NodeJS.ProcessEnv, cwd: string): Terminal =>
    Terminal.open(name, { cwd, env, fifo: path.join(tmp.dir, `terminal-${++fifos}.fifo`) });

  let workerdBefore: number[] = [];
  /** The laptop's two terminals (the coordinator's and the admin's, who also runs the agent) and the GPU box's. */
  const shells: Partial<Record<"serve" | "laptop" | "gpuBox", Terminal>> = {};
  const shell = (name: keyof typeof shells): Terminal => {
    const opened = shells[name];
    if (!opened) throw new Error(`the ${name} terminal opens in beforeAll`);
    return opened;
  };
  const jobs: { terminal: Terminal; job: BackgroundJob }[] = [];
  /** What a reader has copied from the terminal so far: placeholder → value. */
  const copied = new Map<string, string>();
  /** The tokens the blocks created, with the command that created each. */
  const tokens: { command: string; secret: string }[] = [];
  let url = "";
  let loopId = "";
  let cloned = false;

  /** A command with its placeholders filled from what was copied; fails naming one nothing printed. */
  const fill = (command: string): string => {
    const need = (placeholder: string, value: string | undefined): string => {
      if (value === undefined) throw new Error(`\`${command}\` needs ${placeholder}, which no command before it printed: a reader cannot fill it`);
      return value;
    };
    return command
      .replace(/https?:\/\/\S*<you>\S*/g, (placeholder) => need(placeholder, url || undefined))
      .replace(/<[a-z][a-z0-9 -]*>/gi, (placeholder) => need(placeholder, copied.get(placeholder)));
  };

  /** Copies what a command printed that a later one needs, as a reader would: tokens, by what the docs call them. */
  const copy = (command: string, stdout: string): void => {
    if (/\bloopwarden team create\b/.test(command)) {
      const admin = /its first admin token .*shown this once.*\n\s*(\S+)/.exec(stdout)?.[1];
      expect(admin, `team create printed no admin token:\n${stdout}`).toBeDefined();
      copied.set("<admin token>", admin ?? "");
    }
    if (/\bloopwarden token create\b/.test(command)) {
      const secret = /secret, shown this once: (\S+)/.exec(stdout)?.[1];
      expect(secret, `token create printed no secret:\n${stdout}`).toBeDefined();
      tokens.push({ command, secret: secret ?? "" });
      const name = /--name[= ](?:"([^"]*)"|'([^']*)'|(\S+))/.exec(command);
      if (name) copied.set(`<${name[1] ?? name[2] ?? name[3]} token>`, secret ?? "");
    }
  };

  /** Types a command (filled) into a terminal: in the background if it keeps running, else to its end, which must be exit 0. */
  const type = async (into: Terminal, written: string): Promise<void> => {
    const command = fill(written).replace(/\bloopwarden serve\b(?!.*--port)/, `$& --port ${await freePort()}`);
    if (longRunning(command)) {
      const job = await into.start(command);
      jobs.push({ terminal: into, job });
      // Up when it says where it listens (serve) or what it works for (work); a failure to start ends it.
      const ready = /listening on|working for/;
      const deadline = Date.now() + 60_000;
      while (!ready.test(job.output()) && isAlive(job.pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
      // A runner refused by the coordinator says so at its first request, just after starting.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(isAlive(job.pid) && ready.test(job.output()), `\`${command}\` did not start:\n${job.output()}${into.transcript()}`).toBe(true);
      return;
    }
    const result = await into.run(command, 120_000);
    expect(result.status, said(result, into)).toBe(0);
    copy(command, result.stdout);
  };

  beforeAll(() => {
    workerdBefore = workerdPids();
    // `loopwarden` as an installed package runs it: the compiled CLI.
    mkdirSync(bin, { recursive: true });
    writeFileSync(path.join(bin, "loopwarden"), `#!/bin/sh\nexec '${process.execPath}' '${path.join(ROOT, "dist", "cli", "main.js")}' "$@"\n`);
    chmodSync(path.join(bin, "loopwarden"), 0o755);
    const laptopEnv = machine("laptop");
    shells.serve = terminal("laptop: the coordinator", laptopEnv, laptopEnv.HOME ?? tmp.dir);
    shells.laptop = terminal("laptop", laptopEnv, laptopEnv.HOME ?? tmp.dir);
    const gpuBoxEnv = machine("gpu-box");
    shells.gpuBox = terminal("gpu box", gpuBoxEnv, gpuBoxEnv.HOME ?? tmp.dir);
    makeRepo(project, twoRunnerProject());
  });
  afterAll(async () => {
    // The last test stops everything by its pid; whatever is still there (a test failed first) is stopped here.
    for (const { terminal: into, job } of jobs) if (isAlive(job.pid)) await into.stop(job, "SIGKILL", 2_000);
    for (const into of Object.values(shells)) await into.close();
    await killProcessesNaming(tmp.dir);
    tmp.cleanup();
  });

  it("has the blocks the walkthrough relies on (one makes the team and its tokens, one starts a runner) and its inline commands", () => {
    const texts = BLOCKS.map((block) => block.text).join("\n");
    expect(texts).toMatch(/\bloopwarden team create\b/);
    expect(texts).toMatch(/\bloopwarden token create\b/);
    expect(texts).toMatch(/\bloopwarden work\b/);
    const section = sectionLines(TEAMS, "## Share a loop with your team").join("\n");
    for (const command of [...Object.values(INLINE), ...FOLLOW])
      expect(section, "docs/teams.md's team section gives this command inline").toContain(`\`${command}\``);
    // A skipped block that no longer exists is a stale entry: the list stays true.
    for (const first of SKIPPED.keys()) expect(BLOCKS.map(firstLine), "SKIPPED names a block docs/teams.md no longer has").toContain(first);
  });

  it(`1. \`${INLINE.serve}\` (step 1) starts the coordinator on a free port, printing its URL and the owner token it made`, async () => {
    await type(shell("serve"), INLINE.serve);
    const output = jobs[0]?.job.output() ?? "";
    url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1] ?? "";
    expect(url, output).not.toBe("");
    const owner = /owner token \(shown once; kept in (\S+), mode 0600\): (\S+)/.exec(output);
    expect(owner, output).not.toBeNull();
    // The file step 1 names holds what serve printed.
    expect(owner?.[1]).toBe(path.join(tmp.dir, "laptop", "state", "owner-token"));
    expect(readFileSync(owner?.[1] ?? "", "utf8").trim()).toBe(owner?.[2]);
    copied.set("<owner token>", owner?.[2] ?? "");
  });

  for (const [index, block] of BLOCKS.entries()) {
    const title = `${block.heading.slice(3)}, block ${index + 1} (${block.lang}): ${firstLine(block)}`;
    const skipped = SKIPPED.get(firstLine(block));
    if (skipped !== undefined) {
      it.skip(`${title} — skipped: ${skipped}`, () => {});
      continue;
    }
    if (block.lang === "yaml") {
      it(`${title} — the contract's: merged into loop.yaml and committed`, () => {
        const contract = parseYaml(readFileSync(path.join(project, "loop.yaml"), "utf8")) as Record<string, unknown>;
        writeFileSync(path.join(project, "loop.yaml"), stringifyYaml({ ...contract, ...(parseYaml(block.text) as Record<string, unknown>) }));
        gitIn(project, "commit", "-q", "-am", "evaluate where docs/teams.md step 3 says");
        expect(gitIn(project, "status", "--porcelain")).toBe("");
      });
      continue;
    }
    it(`${title} — runs as written`, async () => {
      expect(block.lang, `docs/teams.md has a \`\`\`${block.lang} block this test does not know how to run`).toBe("sh");
      expect(url, "step 1 started no coordinator").not.toBe("");
      // A runner's block runs on the GPU box, in a clone of the repository ("a git clone is enough").
      const onRunner = /\bloopwarden work\b/.test(block.text);
      const into = shell(onRunner ? "gpuBox" : "laptop");
      if (onRunner && !cloned) {
        cloned = true;
        for (const command of [`git clone -q '${project}' '${checkout}'`, `cd '${checkout}'`]) {
          const result = await into.run(command);
          expect(result.status, said(result, into)).toBe(0);
        }
      }
      for (const command of commandsOf(block.text)) await type(into, command);
    });
  }

  it(`5. \`${INLINE.run}\` (step 5) converges (exit 10), every candidate evaluated by the labelled runner`, async () => {
    const laptop = shell("laptop");
    const runner = jobs.find(({ job }) => /\bloopwarden work\b/.test(job.command));
    expect(runner, "no block started a runner").toBeDefined();
    const cd = await laptop.run(`cd '${project}'`);
    expect(cd.status).toBe(0);
    // The run waits for a runner as long as it takes: if the runner has stopped, Ctrl-C ends the wait.
    const watch = setInterval(() => {
      if (runner && !isAlive(runner.job.pid)) laptop.kill("SIGINT");
    }, 500);
    const result = await laptop.run(fill(INLINE.run), 150_000).finally(() => clearInterval(watch));
    const work = runner?.job.output() ?? "";
    expect(result.status, `${said(result, laptop)}\n--- the runner ---\n${work}`).toBe(10);
    loopId = recordedLoopId(project, "loop.yaml");
    copied.set("LOOP", loopId);
    expect(result.stdout, said(result, laptop)).toContain(`loop ${loopId} halted: success_condition_met (exit 10)`);
    // Without a terminal, the run says what it waits for: the labelled runner, or the runner that has the job.
    expect(result.stderr).toMatch(
      new RegExp(`^\\[1\\] c1 (is being evaluated by runner \\S+|waiting for a runner with ${LABELS} to evaluate c1) \\(\\d+ s so far\\)$`, "m"),
    );

    // Every evaluation was the GPU box's: each lease went to one of its runner ids, none to the laptop's.
    const readToken = tokens.find(({ command }) => /--scopes[= ]read(\s|$)/.test(command))?.secret ?? "";
    expect(readToken, "the blocks make no read token for the teammate the section mentions").not.toBe("");
    const events = await loopEvents(url, loopId, readToken);
    const leases = events.flatMap((event) => (event.type === "lease_granted" ? [event.data.runner_id] : []));
    const workRunners = new Set([...work.matchAll(/^\[(\S+)\] c\d+ /gm)].map((match) => match[1]));
    const laptopRunner = (JSON.parse(readFileSync(path.join(project, ".loopwarden", "state.json"), "utf8")) as { loops: Record<string, { runner_id: string }> })
      .loops["loop.yaml"]?.runner_id;
    // (c2 changes nothing: an empty candidate is rejected without an evaluation.)
    expect(leases.length, work).toBeGreaterThanOrEqual(3);
    expect(
      leases.filter((id) => !workRunners.has(id)),
      `leases not the runner's (${[...workRunners].join(", ")}):\n${work}`,
    ).toEqual([]);
    expect(laptopRunner).toBeDefined();
    expect(leases).not.toContain(laptopRunner);
    expect(work).toContain(`with labels ${LABELS}`);
    // The GPU box's clone had only t0: the candidates came as bundles through the coordinator.
    expect(work).toContain("from its bundle");
    const verdicts = events.flatMap((event) => (event.type === "verdict" ? [`${event.data.candidate_id} ${event.data.decision}`] : []));
    expect(verdicts).toEqual(["c1 promoted", "c2 rejected", "c3 rejected", "c4 promoted"]);
  });

  it(`a teammate with the read token follows along (status, watch, explain, export) and can propose nothing`, async () => {
    expect(loopId, "step 5 recorded no loop").not.toBe("");
    const laptop = shell("laptop");
    const readToken = tokens.find(({ command }) => /--scopes[= ]read(\s|$)/.test(command))?.secret ?? "";
    const eventsBefore = (await loopEvents(url, loopId, readToken)).length;
    const outputs: Record<string, string> = {};
    for (const command of FOLLOW) {
      const verb = command.split(" ")[1] ?? "";
      const result = await laptop.run(`LOOPWARDEN_TOKEN=${readToken} ${command.replace(/ LOOP$/, ` ${loopId}`)}`, 30_000);
      expect(result.status, said(result, laptop)).toBe(0);
      outputs[verb] = result.stdout;
    }
    expect(outputs.status).toContain(loopId);
    expect(outputs.watch).toMatch(/c1 leased to \S+/);
    expect(outputs.export?.trim().split("\n")).toHaveLength(4);

    // The read token proposes nothing: not a loop of its own (in a clone of main), not a receipt.
    for (const command of [`git clone -q --branch main '${project}' '${teammateCheckout}'`, `cd '${teammateCheckout}'`])
      expect((await laptop.run(command)).status).toBe(0);
    const run = await laptop.run(`LOOPWARDEN_TOKEN=${readToken} loopwarden run`, 60_000);
    expect(run.status, said(run, laptop)).toBe(1);
    expect(run.stdout + run.stderr).toContain("forbidden");
    const receipt = await laptop.run(`LOOPWARDEN_TOKEN=${readToken} loopwarden receipt ${loopId}`, 30_000);
    expect(receipt.status, said(receipt, laptop)).toBe(1);
    expect(receipt.stderr).toContain("forbidden");
    expect(await loopEvents(url, loopId, readToken)).toHaveLength(eventsBefore);
  });

  it("Ctrl-C stops the runner and then the coordinator (exit 0 each), and nothing of theirs is left running", async () => {
    // The runner first (it would otherwise retry an unreachable coordinator), then the coordinator.
    for (const { terminal: into, job } of [...jobs].reverse()) expect(await into.stop(job), `${job.command}:\n${job.output()}`).toBe(0);
    for (const into of Object.values(shells)) expect(await into.close(), into.transcript()).toBe(0);
    expect(await processesLeft(tmp.dir)).toEqual([]);
    // `pgrep -af workerd` before and after: a workerd that is new was started by another test on this
    // machine, never by this one (a workerd inherits its command's environment, which names tmp.dir).
    const ours = processesNaming(tmp.dir).map(({ pid }) => pid);
    expect(workerdPids().filter((pid) => !workerdBefore.includes(pid) && ours.includes(pid))).toEqual([]);
  });
});
