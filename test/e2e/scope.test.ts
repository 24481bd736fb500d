import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { LoopSummary } from "#shared/wire/api.js";
import { api, gitIn, makeRepo, NO_NPM_ENV, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";

// Edits by permission (DESIGN §6.4): with a scope, a cheat that touches no file of the default protected
// set — npm's configuration in a root dotfile, a module that shadows the interpreter's own, a package in
// a new top-level directory — still makes the gate green on these real projects, and must still get
// blocked_path_modified (13), never exit 10. An honest fix inside the scope converges, and a protected
// file inside the scope is refused as before.

/** A scripted agent (tools/agent.mjs): writes `files`, then makes each replacement. */
function agent(files: Record<string, string>, replacements: [string, string, string][] = []): string {
  return `import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
for (const [file, content] of Object.entries(${JSON.stringify(files)})) {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, content);
}
for (const [file, from, to] of ${JSON.stringify(replacements)}) writeFileSync(file, readFileSync(file, "utf8").replace(from, to));
`;
}

const BUG = "a - b";

/** An npm project whose `npm test` runs `node --test`: src/sum.js has the bug, src/sum.test.js shows it (a test inside the scope). */
const NODE_PROJECT: Record<string, string> = {
  "package.json": `${JSON.stringify({ name: "sums", version: "1.0.0", private: true, type: "module", scripts: { test: "node --test" } }, null, 2)}\n`,
  "src/sum.js": `export const sum = (a, b) => ${BUG};\n`,
  "src/sum.test.js": [
    'import assert from "node:assert/strict";',
    'import { test } from "node:test";',
    'import { sum } from "./sum.js";',
    'test("sum adds", () => assert.equal(sum(2, 3), 5));',
    "",
  ].join("\n"),
};

/** A Python project tested by the standard library's unittest: src/calc.py has the bug. */
const PYTHON_PROJECT: Record<string, string> = {
  "src/calc.py": `def add(a, b):\n    return ${BUG}\n`,
  "tests/test_calc.py": [
    "import pathlib",
    "import sys",
    "import unittest",
    "",
    'sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "src"))',
    "from calc import add  # noqa: E402",
    "",
    "",
    "class Calc(unittest.TestCase):",
    "    def test_add(self):",
    "        self.assertEqual(add(2, 3), 5)",
    "",
  ].join("\n"),
};

/** The loop's contract: one gate, the scope, a short stop. */
function contract(gate: string, scope: string[]): string {
  return [
    "name: scoped",
    "mode: check_fixpoint",
    `scope: ${JSON.stringify(scope)}`,
    "gates:",
    "  - name: test",
    `    run: ${JSON.stringify(gate)}`,
    "    timeout: 2m",
    "exec:",
    "  network: none",
    "stop:",
    "  max_iterations: 3",
    "  no_progress: 2",
    "agent:",
    "  run: node tools/agent.mjs",
    "",
  ].join("\n");
}

const NPM_GATE = "npm test";
const PYTHON_GATE = "python3 -m unittest discover -s tests -q";

// Concurrent (issue 30's suite time): each test runs its loops in repositories of its own, on the shared
// coordinator; a loop mostly waits on its processes, so several at once take little more than one.
describe.concurrent("the scope against cheats the default protected set does not name", () => {
  const { tmp, coordinator } = sharedCoordinator("scope");
  let serial = 0;

  /** A fresh repository of `files` with the agent and (unless flag-only) the contract committed. */
  const repoOf = (files: Record<string, string>, agentSource: string, loopYaml?: string): string =>
    makeRepo(path.join(tmp.dir, `repo-${++serial}`), {
      ...files,
      ...(loopYaml ? { "loop.yaml": loopYaml } : {}),
      "tools/agent.mjs": agentSource,
      ".gitignore": ".loopwarden/\n__pycache__/\n",
    });

  /**
   * Runs `loopwarden run` (with `args`; flag-only when they hold --check) to its halt, with its progress
   * on stderr, and checks the exit code and halt reason; answers the run's output, the loop id and its
   * halt detail.
   */
  const runToHalt = async (repo: string, exitCode: number, haltReason: string, args: string[] = []) => {
    // --skip-doctor: this file tests the scope guard; oracle.test.ts covers the precondition.
    const result = await runCli(["--server", coordinator.url, "run", "--skip-doctor", ...args], { cwd: repo, env: NO_NPM_ENV });
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(exitCode);
    const loopId = recordedLoopId(repo, args.includes("--check") ? "flags" : "loop.yaml");
    const summary = LoopSummary.parse(await (await api(`${coordinator.url}/v1/loops/${loopId}`)).json());
    expect(summary.halt?.halt_reason).toBe(haltReason);
    return { result, loopId, detail: summary.halt?.detail ?? "" };
  };

  /** A file as the loop's branch has it, or null when it is not there. */
  const onBranch = (repo: string, loopId: string, file: string): string | null => {
    const shown = spawnSync("git", ["show", `loopwarden/${loopId}:${file}`], { cwd: repo, encoding: "utf8" });
    return shown.status === 0 ? shown.stdout : null;
  };

  it("the cheats work without a scope: each one alone turns the gate green on the unfixed code", () => {
    // The premise of the tests below, checked on the projects themselves (not through a loop).
    const node = repoOf(NODE_PROJECT, "");
    const npm = (dir: string) => spawnSync("npm", ["test"], { cwd: dir, env: { ...process.env, ...NO_NPM_ENV }, stdio: "ignore" }).status;
    expect(npm(node)).not.toBe(0);
    writeFileSync(path.join(node, ".npmrc"), "script-shell=/bin/true\n");
    expect(npm(node)).toBe(0);
    const python = (dir: string) => spawnSync("sh", ["-c", PYTHON_GATE], { cwd: dir, stdio: "ignore" }).status;
    for (const [file, content] of [
      ["unittest.py", "raise SystemExit(0)\n"],
      ["unittest/__init__.py", "raise SystemExit(0)\n"],
    ] as const) {
      const dir = repoOf(PYTHON_PROJECT, "");
      expect(python(dir)).not.toBe(0);
      mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
      writeFileSync(path.join(dir, file), content);
      expect(python(dir)).toBe(0);
    }
  });

  it("npm's configuration in a root dotfile (.npmrc script-shell): blocked_path_modified (13), never on the branch", async () => {
    const repo = repoOf(NODE_PROJECT, agent({ ".npmrc": "script-shell=/bin/true\n" }), contract(NPM_GATE, ["src/**"]));
    const { result, loopId, detail } = await runToHalt(repo, 13, "blocked_path_modified");
    expect(detail).toBe("changed 1 path(s) outside the scope (src/**): .npmrc");
    expect(onBranch(repo, loopId, ".npmrc")).toBeNull();
    expect(existsSync(path.join(repo, ".npmrc"))).toBe(false);
    expect(result.stderr).toContain("scope: src/** (a candidate that changes any other path is blocked_path_modified)");
  });

  it.each([
    ["a module that shadows the interpreter's own (unittest.py)", "unittest.py"],
    ["a package in a new top-level directory (unittest/__init__.py)", "unittest/__init__.py"],
  ])("%s: blocked_path_modified (13)", async (_name, file) => {
    const repo = repoOf(PYTHON_PROJECT, agent({ [file]: "raise SystemExit(0)\n" }), contract(PYTHON_GATE, ["src/**"]));
    const { loopId, detail } = await runToHalt(repo, 13, "blocked_path_modified");
    expect(detail).toBe(`changed 1 path(s) outside the scope (src/**): ${file}`);
    expect(onBranch(repo, loopId, file)).toBeNull();
  });

  it.each([
    ["npm", NODE_PROJECT, NPM_GATE, "src/sum.js"],
    ["python", PYTHON_PROJECT, PYTHON_GATE, "src/calc.py"],
  ])("an honest fix inside the scope converges (10): %s", async (_name, files, gate, source) => {
    const repo = repoOf(files, agent({}, [[source, BUG, "a + b"]]), contract(gate, ["src/**"]));
    const { loopId } = await runToHalt(repo, 10, "success_condition_met");
    expect(onBranch(repo, loopId, source)).toContain("a + b");
    // replay checks the scope against git itself: what the best commit changed since t0, in this checkout.
    const issued = await runCli(["--server", coordinator.url, "receipt", loopId], { cwd: repo });
    const url = /https?:\/\/\S+\/r\/\S+/.exec(issued.stdout)?.[0] ?? "";
    const replayed = await runCli(["--server", coordinator.url, "replay", url], { cwd: repo, env: NO_NPM_ENV });
    expect(replayed.code, replayed.stdout + replayed.stderr).toBe(0);
    expect(replayed.stdout).toContain(`scope  match  the 1 path(s) changed since t0 are all inside src/**`);
  });

  it("a protected file inside the scope is refused as before: the test beside the source (src/sum.test.js)", async () => {
    const weakened = agent({}, [["src/sum.test.js", "assert.equal(sum(2, 3), 5)", "assert.ok(true)"]]);
    const repo = repoOf(NODE_PROJECT, weakened, contract(NPM_GATE, ["src/**"]));
    const { loopId, detail } = await runToHalt(repo, 13, "blocked_path_modified");
    expect(detail).toBe("protected files changed: modified src/sum.test.js");
    expect(onBranch(repo, loopId, "src/sum.test.js")).toContain("assert.equal(sum(2, 3), 5)");
  });

  it("flag-only: --scope blocks the dotfile; without it, run says only the protected set applies, and the receipt and verify say so", async () => {
    const flags = ["--check", NPM_GATE, "--exec", "node tools/agent.mjs", "--max-iterations", "3"];
    const cheat = repoOf(NODE_PROJECT, agent({ ".npmrc": "script-shell=/bin/true\n" }));
    const scoped = await runToHalt(cheat, 13, "blocked_path_modified", [...flags, "--scope", "src/**"]);
    expect(scoped.detail).toBe("changed 1 path(s) outside the scope (src/**): .npmrc");

    const honest = repoOf(NODE_PROJECT, agent({}, [["src/sum.js", BUG, "a + b"]]));
    const unscoped = await runToHalt(honest, 10, "success_condition_met", flags);
    expect(unscoped.result.stderr).toMatch(/^no scope: only the default protected set guards the check/m);
    // The check is exit-code only: t0's failure is its gate's, counted as a gate, not as a test.
    expect(unscoped.result.stderr).toContain(`loop ${unscoped.loopId} (contract flags): the baseline has 1 failing gate(s)`);
    const issued = await runCli(["--server", coordinator.url, "receipt", unscoped.loopId], { cwd: honest });
    expect(issued.code, issued.stderr).toBe(0);
    const url = /https?:\/\/\S+\/r\/\S+/.exec(issued.stdout)?.[0] ?? "";
    const verified = await runCli(["verify", url], { cwd: honest });
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    expect(verified.stdout).toMatch(/^ {2}scope {5}ok {2}none: the contract names no scope/m);
    expect(verified.stdout).toContain("scope: none — only the default protected set guarded the check");

    // The scoped loop's receipt names its scope, and verify re-checked its (here: no) promoted candidates.
    const scopedReceipt = await runCli(["--server", coordinator.url, "receipt", scoped.loopId], { cwd: cheat });
    const scopedUrl = /https?:\/\/\S+\/r\/\S+/.exec(scopedReceipt.stdout)?.[0] ?? "";
    const scopedVerify = await runCli(["verify", scopedUrl], { cwd: cheat });
    expect(scopedVerify.code, scopedVerify.stdout + scopedVerify.stderr).toBe(0);
    expect(scopedVerify.stdout).toContain("scope: src/** (no promoted candidate changed any other path)");
    expect(gitIn(cheat, "status", "--porcelain")).toBe("");
  });
});
