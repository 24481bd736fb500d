import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { NO_NPM_ENV, ROOT, demoRepo, gitIn, recordedLoopId, tempDir } from "../support/cli.js";
import { killProcessesNaming, machineEnv, processesLeft, processesNaming, runBlock, sectionBlocks, shown, workerdPids } from "../support/doc-blocks.js";

// README.md, "Walkthrough: a loop on your own repository", run as written (issue 26: the docs cannot
// drift again). Its ```sh blocks are read from README.md when the test runs, in order, and each runs
// with `bash -euo pipefail -c` — an edit to a block changes what runs here. They run as a user's shell
// would, with the outside world replaced by temporary directories: the global npm prefix, npm's cache,
// $HOME, the coordinator's state; and the agent CLI, `claude`, by a script that fixes one of the demo
// project's bugs per run (what examples/demo/agent.mjs does) and needs no network or key. The project is
// examples/demo, committed as a fresh repository with a clean tree.

/** The walkthrough's section of README.md: from its heading to the next one of the same level. */
const SECTION = "## Walkthrough: a loop on your own repository";

/** The ```sh blocks of README.md's walkthrough, in order. */
function walkthroughBlocks(): string[] {
  return sectionBlocks(path.join(ROOT, "README.md"), SECTION)
    .filter((block) => block.lang === "sh")
    .map((block) => block.text);
}

// The stand-in for Claude Code: ignores its arguments (`-p "$(cat program.md)"
// --dangerously-skip-permissions`) and, like a coding agent given program.md, fixes one bug in src/ — the
// first of the demo's three still there, with the fixes examples/demo/agent.mjs makes.
const FAKE_CLAUDE = String.raw`#!/usr/bin/env node
const { readFileSync, writeFileSync } = require("node:fs");
const FIXES = {
  slugify: ['return text.toLowerCase().replace(/[^a-z0-9]/g, "-");', 'return text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");'],
  titleCase: ["return text.replace(/\\b\\w/, (letter) => letter.toUpperCase());", "return text.replace(/\\b\\w/g, (letter) => letter.toUpperCase());"],
  wordCount: ['return text.split(" ").length;', "return text.split(/\\s+/).filter(Boolean).length;"],
};
const file = "src/text.js";
const source = readFileSync(file, "utf8");
const name = Object.keys(FIXES).find((key) => source.includes(FIXES[key][0]));
if (name) writeFileSync(file, source.replace(FIXES[name][0], FIXES[name][1]));
console.log("fake claude: " + (name ? "fixed " + name : "nothing left to fix"));
`;

describe("README.md's walkthrough, run as written", () => {
  const tmp = tempDir("readme");
  const project = path.join(tmp.dir, "project");
  const prefix = path.join(tmp.dir, "npm-prefix");
  const fakeBin = path.join(tmp.dir, "agent-bin");
  const home = path.join(tmp.dir, "home");
  const state = path.join(tmp.dir, "state");
  const env: NodeJS.ProcessEnv = {
    // A user's machine (machineEnv): its own $HOME, the README's local coordinator started per command,
    // `npm install --global` into a temporary prefix (whose bin/ comes first on PATH).
    ...machineEnv(tmp.dir, state),
    // The README's own `npm install --global .` runs, no shim: a global install of a folder only links it
    // (measured here: about 0.5 s, no network). It would also run the package's `prepare` (build:worker
    // and build:cli), which `npm ci` ran already, rebuilding dist/ under the other tests of this checkout;
    // the link needs none of it (runner/bin runs a checkout's sources, and the coordinator rebuilds a
    // stale worker bundle itself).
    npm_config_ignore_scripts: "true",
    PATH: [path.join(prefix, "bin"), fakeBin, process.env.PATH ?? ""].join(path.delimiter),
    // Named by the claude preset's agent.env, passed into the agent's zone; the fake never sends it anywhere.
    ANTHROPIC_API_KEY: "sk-ant-readme-test-not-a-key",
  };
  let blocks: string[] = [];
  let workerdBefore: number[] = [];
  let loopId = "";

  beforeAll(() => {
    workerdBefore = workerdPids();
    blocks = walkthroughBlocks();
    for (const dir of [prefix, fakeBin, home, state]) mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(fakeBin, "claude"), FAKE_CLAUDE);
    chmodSync(path.join(fakeBin, "claude"), 0o755);
    demoRepo(project);
  });
  afterAll(async () => {
    // Nothing of ours should be left (the last test says so); whatever is, is stopped by its pid.
    await killProcessesNaming(tmp.dir);
    tmp.cleanup();
  });

  /** Block `index` of the walkthrough, which must be the step `step` (what its first command is). */
  const block = (index: number, step: string, first: RegExp): string => {
    const script = blocks[index];
    expect(script, `README.md's walkthrough has ${blocks.length} sh blocks; block ${index + 1} should be ${step}`).toBeDefined();
    const command = (script ?? "").split("\n").find((line) => line.trim() !== "" && !line.trim().startsWith("#")) ?? "";
    expect(command, `block ${index + 1} of README.md's walkthrough should be ${step}:\n${script}`).toMatch(first);
    return script ?? "";
  };

  it("has the five sh blocks of steps 1, 2, 3, 4 and 6, in that order", () => {
    const firsts = blocks.map((script) => script.split("\n")[0]);
    expect(firsts, "the first line of each sh block of README.md's walkthrough").toHaveLength(5);
  });

  it("1. installs the CLI globally from the checkout: `loopwarden` on PATH is the link to it", async () => {
    const written = block(0, "step 1 (install the CLI)", /^npm ci\b/);
    // `npm ci` has been run in this checkout (the tests run from its node_modules); running it again
    // would replace node_modules under the other tests. Only that line is left out.
    const lines = written.split("\n");
    const script = lines.filter((line) => !/^npm ci(\s|$)/.test(line)).join("\n");
    expect(lines.length - script.split("\n").length).toBe(1);
    expect(script).toMatch(/^npm install --global \.(\s|$)/m);
    const result = await runBlock(script, { cwd: ROOT, env, timeoutMs: 60_000 });
    expect(result.code, shown(script, result)).toBe(0);
    const found = await runBlock("command -v loopwarden && loopwarden --version", { cwd: tmp.dir, env, timeoutMs: 10_000 });
    expect(found.stdout.split("\n")[0], shown("command -v loopwarden", found)).toBe(path.join(prefix, "bin", "loopwarden"));
    const manifest = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { version: string };
    expect(found.stdout.split("\n")[1]).toBe(manifest.version);
  }, 90_000);

  it("2. init --agent claude writes loop.yaml, program.md and .gitignore, with a scope and an agent command that finds `claude`", async () => {
    const script = block(1, "step 2 (write the contract)", /^loopwarden init --agent claude(\s|$)/);
    const result = await runBlock(script, { cwd: project, env, timeoutMs: 30_000 });
    expect(result.code, shown(script, result)).toBe(0);
    expect(gitIn(project, "status", "--porcelain").split("\n").filter(Boolean).sort()).toEqual(["?? .gitignore", "?? loop.yaml", "?? program.md"]);
    expect(readFileSync(path.join(project, ".gitignore"), "utf8").split("\n")).toContain(".loopwarden/");
    expect(readFileSync(path.join(project, "program.md"), "utf8")).not.toBe("");
    const contract = parseYaml(readFileSync(path.join(project, "loop.yaml"), "utf8")) as {
      scope?: string[];
      agent?: { run?: string; env?: string[]; network?: { allow?: string[] } };
    };
    // The demo declares its sources the npm way, in src/: the scope init infers and prints for review.
    expect(contract.scope).toEqual(["src/**"]);
    expect(result.stdout + result.stderr).toMatch(/scope: src\/\*\*/);
    // The agent is the claude preset, run by name from PATH (so, here, the fake), its key named, not written.
    const run = contract.agent?.run ?? "";
    expect(run.replace(/^(\w+=\S*\s+)*/, "").split(/\s/)[0]).toBe("claude");
    expect(contract.agent?.env).toEqual(["ANTHROPIC_API_KEY"]);
    expect(readFileSync(path.join(project, "loop.yaml"), "utf8")).not.toContain(env.ANTHROPIC_API_KEY);
    const which = await runBlock("command -v claude", { cwd: project, env, timeoutMs: 10_000 });
    expect(which.stdout.trim()).toBe(path.join(fakeBin, "claude"));
  });

  it("3. commits the contract: the tree is clean again", async () => {
    const script = block(2, "step 3 (commit the contract)", /^git add loop\.yaml program\.md \.gitignore/);
    const result = await runBlock(script, { cwd: project, env, timeoutMs: 30_000 });
    expect(result.code, shown(script, result)).toBe(0);
    expect(gitIn(project, "status", "--porcelain")).toBe("");
    expect(gitIn(project, "ls-files", "loop.yaml", "program.md", ".gitignore").split("\n").filter(Boolean).sort()).toEqual([
      ".gitignore",
      "loop.yaml",
      "program.md",
    ]);
  });

  it("4. `loopwarden run` converges: exit 10, every gate passes, the working tree on loopwarden/<loop-id>", async () => {
    const script = block(3, "step 4 (run the loop)", /^loopwarden run(\s|$)/);
    const result = await runBlock(script, { cwd: project, env, timeoutMs: 120_000 });
    // 10 is the halt's code when every gate passes: under `bash -e` the block's own exit status.
    expect(result.code, shown(script, result)).toBe(10);
    const output = result.stdout + result.stderr;
    expect(output, shown(script, result)).toMatch(/halted: success_condition_met \(exit 10\)/);
    expect(output).toContain("every gate passes");
    // One line per verdict, as the README shows one; the fake fixes one bug per run, so each is promoted.
    const verdicts = output.split("\n").filter((line) => /^\[\d+\] c\d+ (promoted|rejected)/.test(line));
    expect(verdicts, shown(script, result)).toEqual([
      "[1] c1 promoted (fewer_failures): failing tests 3 → 2, gates 1 → 1",
      "[2] c2 promoted (fewer_failures): failing tests 2 → 1, gates 1 → 1",
      "[3] c3 promoted (fewer_failures): failing tests 1 → 0, gates 1 → 0",
    ]);
    expect(output.match(/fake claude: fixed \w+/g)).toEqual(["fake claude: fixed slugify", "fake claude: fixed titleCase", "fake claude: fixed wordCount"]);
    loopId = recordedLoopId(project, "loop.yaml");
    expect(loopId).toMatch(/^lp_[0-9a-f]{24}$/);
    expect(gitIn(project, "branch", "--show-current").trim()).toBe(`loopwarden/${loopId}`);
    // The coordinator kept its state in the temporary directory, never the developer's.
    expect(existsSync(path.join(state, "owner-token"))).toBe(true);
  });

  it("6. the review block, with <loop-id> the recorded loop: log, diff and merge into main", async () => {
    const written = block(4, "step 6 (review and merge)", /^git log --oneline main\.\.loopwarden\/<loop-id>/);
    expect(loopId, "step 4 recorded no loop").not.toBe("");
    const script = written.replaceAll("<loop-id>", loopId);
    const result = await runBlock(script, { cwd: project, env, timeoutMs: 30_000 });
    expect(result.code, shown(script, result)).toBe(0);
    // `git log`: the three promoted candidates, what was kept.
    expect(result.stdout.match(/^[0-9a-f]{7,} loopwarden: candidate of iteration \d+$/gm), shown(script, result)).toHaveLength(3);
    // `git diff`: the whole change, in src/ only.
    expect(result.stdout).toContain("diff --git a/src/text.js b/src/text.js");
    expect(result.stdout.match(/^diff --git /gm)).toHaveLength(1);
    // The merge: main is the loop's best commit, and its tests pass.
    expect(gitIn(project, "branch", "--show-current").trim()).toBe("main");
    expect(gitIn(project, "rev-parse", "main")).toBe(gitIn(project, "rev-parse", `loopwarden/${loopId}`));
    expect(gitIn(project, "status", "--porcelain")).toBe("");
    execFileSync(process.execPath, ["--test"], { cwd: project, stdio: "pipe", env: { ...process.env, ...NO_NPM_ENV } });
  });

  it("leaves no process behind: each command's local coordinator (workerd) stopped with it", async () => {
    expect(await processesLeft(tmp.dir)).toEqual([]);
    // `pgrep -af workerd` before and after: a workerd that is new was started by another test on this
    // machine, never by this one (a workerd inherits its command's environment, which names tmp.dir).
    const newWorkerd = workerdPids().filter((pid) => !workerdBefore.includes(pid));
    const ours = processesNaming(tmp.dir).map(({ pid }) => pid);
    expect(newWorkerd.filter((pid) => ours.includes(pid))).toEqual([]);
  });
});
