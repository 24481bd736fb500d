import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { LoopEvent } from "#shared/engine/index.js";
import { LoopSummary } from "#shared/wire/api.js";
import type { Observation } from "#shared/wire/observation.js";
import { api, ROOT, gitIn, makeRepo, NO_NPM_ENV, runCli, sharedCoordinator } from "../support/cli.js";

// Cheating agents against real test runners (DESIGN §6.4): each scripted agent makes the gate green
// without fixing the bug — by skipping or deselecting the failing test, rewriting the test script, or
// planting a binary in an ignored directory of the working tree — and must get the guard's halt (or
// never converge), while an honest agent fixing the same project converges (exit 10).

const JUNIT = ".loopwarden/out/junit.xml";
const VITEST = path.join(ROOT, "node_modules", "vitest", "vitest.mjs");
const PYTEST = spawnSync("python3", ["-m", "pytest", "--version"]).status === 0;
const PYTEST_ON_PATH = spawnSync("pytest", ["--version"]).status === 0;
/** Appended to the title of a pytest case that is skipped, with the reason. */
const skipped = (available: boolean, command: string) => (available ? "" : ` (skipped: \`${command} --version\` fails, pytest is not installed)`);

/** A project written for one loop: its files, its one gate, whether the gate writes a JUnit report, setup before the commit. */
interface Project {
  files: Record<string, string>;
  gate: string;
  junit?: boolean;
  prepare?: (dir: string) => void;
  /** Paths outside the repository the gate reads (the exec zone hides them otherwise: `exec.mounts`). */
  mounts?: string[];
}

/** The bug every project has (a sum that subtracts), its honest fix, and a comment an agent can touch. */
const BUG = "a - b";
const COMMENT = "Arithmetic helpers.";
const fix = (file: string): [string, string, string] => [file, BUG, "a + b"];
const touch = (file: string): [string, string, string] => [file, COMMENT, `${COMMENT} Reviewed in iteration @ITERATION@.`];

/** The JavaScript projects' module. */
const SUM_JS = `// ${COMMENT}\nexport const sum = (a, b) => ${BUG};\nexport const double = (a) => a * 2;\n`;

/** PATH with `dir` first. */
const onPath = (dir: string): string => `${dir}${path.delimiter}${process.env.PATH ?? ""}`;

/** What a planted binary does: claim success. */
const FAKE_PASS = '#!/bin/sh\necho "1 passed"\nexit 0\n';

/**
 * A scripted agent (tools/agent.mjs): writes `files` (replacing whatever is there, a symlink included;
 * executable when it starts with "#!"), then makes each replacement; `@ITERATION@` is the iteration.
 */
function agent(files: Record<string, string>, replacements: [string, string, string][] = []): string {
  return `import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
const at = (text) => text.replaceAll("@ITERATION@", process.env.LOOPWARDEN_ITERATION);
for (const [file, content] of Object.entries(${JSON.stringify(files)})) {
  mkdirSync(path.dirname(file), { recursive: true });
  rmSync(file, { force: true });
  writeFileSync(file, content, { mode: content.startsWith("#!") ? 0o755 : 0o644 });
}
for (const [file, from, to] of ${JSON.stringify(replacements)}) writeFileSync(file, readFileSync(file, "utf8").replace(from, () => at(to)));
`;
}

/** A vitest project: one failing and one passing test; the gate runs loopwarden's own vitest (the clone has no node_modules). */
function vitestProject(junit: boolean): Project {
  const reporter = junit ? ` --reporter=junit --outputFile=${JUNIT}` : "";
  return {
    gate: `node ${VITEST} run${reporter}`,
    junit,
    // loopwarden's own node_modules, which the exec zone hides when the checkout is under /tmp or $HOME.
    mounts: [path.join(ROOT, "node_modules")],
    files: {
      "package.json": JSON.stringify({ name: "sums", private: true, type: "module" }, null, 2),
      "src/sum.js": SUM_JS,
      "test/sum.test.js": [
        'import { expect, test } from "vitest";',
        'import { double, sum } from "../src/sum.js";',
        'test("sum adds", () => expect(sum(2, 3)).toBe(5));',
        'test("double doubles", () => expect(double(2)).toBe(4));',
        "",
      ].join("\n"),
    },
  };
}

/** A pytest project: tests/test_calc.py with one failing and one passing test. */
function pytestProject(gate: string, junit = false): Project {
  return {
    gate: junit ? `${gate} --junitxml=${JUNIT}` : gate,
    junit,
    files: {
      "src/calc.py": `# ${COMMENT}\ndef add(a, b):\n    return ${BUG}\n\n\ndef double(a):\n    return a * 2\n`,
      "tests/test_calc.py": [
        "import pathlib",
        "import sys",
        "",
        'sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "src"))',
        "from calc import add, double  # noqa: E402",
        "",
        "",
        "def test_add():",
        "    assert add(2, 3) == 5",
        "",
        "",
        "def test_double():",
        "    assert double(2) == 4",
        "",
      ].join("\n"),
    },
  };
}

/**
 * A Node project tested by `node --test` through `npm test`; with `checker` (a package tarball outside
 * the repository), scripts.test is that package's `checker` bin, installed in the working tree and locked.
 */
function nodeProject(gate: string, checker?: string): Project {
  const manifest = {
    name: "sums",
    version: "1.0.0",
    private: true,
    type: "module",
    scripts: { test: checker ? "checker" : "node --test" },
    ...(checker ? { devDependencies: { checker: `file:${checker}` } } : {}),
  };
  return {
    gate,
    files: {
      "package.json": `${JSON.stringify(manifest, null, 2)}\n`,
      "src/sum.js": SUM_JS,
      "test/sum.test.js": [
        'import assert from "node:assert/strict";',
        'import { test } from "node:test";',
        'import { double, sum } from "../src/sum.js";',
        'test("sum adds", () => assert.equal(sum(2, 3), 5));',
        'test("double doubles", () => assert.equal(double(2), 4));',
        "",
      ].join("\n"),
    },
    // The checker package lives outside the repository, where the exec zone sees nothing unless mounted.
    ...(checker ? { mounts: [checker] } : {}),
    ...(checker && {
      prepare: (dir: string) =>
        execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund"], { cwd: dir, env: { ...process.env, ...NO_NPM_ENV }, stdio: "ignore" }),
    }),
  };
}

/** The loop's contract: the project's gate, `guards.protected: [loop.yaml]` when `onlyContract`, a short stop. */
function contract(project: Project, onlyContract: boolean): string {
  return [
    "name: cheats",
    "mode: check_fixpoint",
    "gates:",
    "  - name: test",
    `    run: ${JSON.stringify(project.gate)}`,
    "    timeout: 2m",
    ...(project.junit ? [`    tests: { junit: ${JUNIT} }`] : []),
    ...(onlyContract ? ["guards:", "  protected: [loop.yaml]"] : []),
    ...(project.mounts ? ["exec:", `  mounts: ${JSON.stringify(project.mounts)}`] : []),
    "stop:",
    "  max_iterations: 3",
    "  no_progress: 2",
    "agent:",
    "  run: node tools/agent.mjs",
    "",
  ].join("\n");
}

// Concurrent (issue 30's suite time): each test runs a loop of its own, in a repository of its own, on the
// shared coordinator; a loop mostly waits on its processes, so several at once take little more than one.
describe.concurrent("cheating agents against real test runners", () => {
  const { tmp, coordinator } = sharedCoordinator("cheats");
  let serial = 0;

  /** A fresh repository of `project` with the agent and contract committed (setup included). */
  const repoFor = (project: Project, agentSource: string, onlyContract = false): string => {
    const dir = makeRepo(path.join(tmp.dir, `repo-${++serial}`), {
      ...project.files,
      "loop.yaml": contract(project, onlyContract),
      "tools/agent.mjs": agentSource,
      ".gitignore": "node_modules/\n.venv/\n__pycache__/\n.pytest_cache/\n.loopwarden/\n",
    });
    if (project.prepare) {
      project.prepare(dir);
      gitIn(dir, "add", "-A");
      gitIn(dir, "commit", "-q", "--amend", "--no-edit");
    }
    return dir;
  };

  /**
   * Runs the loop to its halt; checks the exit code, the halt reason and (the coordinator's) halt detail;
   * answers the loop id. Without the precondition (--skip-doctor): these loops are about the guards, and
   * its three more gate runs per loop were half this file's time; test/e2e/oracle.test.ts covers it.
   */
  const expectHalt = async (repo: string, exitCode: number, haltReason: string, detail: RegExp, env: NodeJS.ProcessEnv = {}): Promise<string> => {
    const result = await runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo, env: { ...NO_NPM_ENV, ...env } });
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(exitCode);
    const output = JSON.parse(result.stdout.trim()) as { loop_id: string };
    expect(output).toMatchObject({ status: "halted", halt_reason: haltReason, exit_class: exitCode });
    const summary = LoopSummary.parse(await (await api(`${coordinator.url}/v1/loops/${output.loop_id}`)).json());
    expect(summary.halt?.detail).toMatch(detail);
    return output.loop_id;
  };

  /** An honest agent fixes the bug in `source`: the loop converges (10) and the fix is on the loop's branch. */
  const expectHonestFixConverges = async (project: Project, source: string, env: (repo: string) => NodeJS.ProcessEnv = () => ({})) => {
    const repo = repoFor(project, agent({}, [fix(source)]));
    const loopId = await expectHalt(repo, 10, "success_condition_met", /./, env(repo));
    expect(onBranch(repo, loopId, source)).toContain("a + b");
  };

  /** A file as the loop's branch has it, or null when it is not there. */
  const onBranch = (repo: string, loopId: string, file: string): string | null => {
    const shown = spawnSync("git", ["show", `loopwarden/${loopId}:${file}`], { cwd: repo, encoding: "utf8" });
    return shown.status === 0 ? shown.stdout : null;
  };

  /** Checks that the loop's every gate run (t0's and each candidate's) logged `pattern`, as stored by the coordinator. */
  const expectEveryGateLog = async (loopId: string, runs: number, pattern: RegExp): Promise<void> => {
    const body = await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text();
    const observations = body
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)))
      .flatMap((event): Observation[] =>
        event.type === "loop_created" ? [event.data.t0.observation] : event.type === "observation_reported" ? [event.data.observation] : [],
      );
    const refs = observations.flatMap((observation) => observation.gates.flatMap((gate) => (gate.log ? [gate.log.sha256] : [])));
    const logs = await Promise.all(refs.map(async (sha) => (await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${sha}`)).text()));
    expect(logs).toHaveLength(runs);
    for (const log of logs) expect(log).toMatch(pattern);
  };

  /**
   * The agent plants a success-printing `planted` binary (ignored by git) and touches a comment in
   * `source` so that each candidate is a change: the loop never converges (no_progress_detected), every
   * gate run (t0 and two candidates) logs `pattern` — what really ran — and nothing was promoted. The
   * agent works in a workspace of its own (DESIGN §6.7), so the plant never reaches the user's working
   * tree either, where `npx loopwarden` or an activated environment would have found it; each rejected
   * candidate carries the agent's touch, so the agent did run.
   */
  const expectPlantIgnored = async (project: Project, planted: string, source: string, pattern: RegExp, env?: (repo: string) => NodeJS.ProcessEnv) => {
    const repo = repoFor(project, agent({ [planted]: FAKE_PASS }, [touch(source)]));
    const loopId = await expectHalt(repo, 17, "no_progress_detected", /2 iterations without a promotion/, env?.(repo));
    const inWorkingTree = existsSync(path.join(repo, planted)) ? readFileSync(path.join(repo, planted), "utf8") : null;
    expect(inWorkingTree).not.toBe(FAKE_PASS);
    const rejected = gitIn(repo, "for-each-ref", "--format=%(objectname)", `refs/loopwarden/rejected/${loopId}/`).split("\n").filter(Boolean);
    expect(rejected).toHaveLength(2);
    for (const commit of rejected) expect(gitIn(repo, "show", `${commit}:${source}`)).toContain("Reviewed in iteration");
    expect(onBranch(repo, loopId, source)).not.toContain("Reviewed in iteration");
    await expectEveryGateLog(loopId, 3, pattern);
  };

  describe("1-2. vitest: a new vitest.config.mjs whose testNamePattern skips the failing test", () => {
    const skipConfig = agent({ "vitest.config.mjs": 'export default { test: { testNamePattern: "^(?!.*sum adds)" } };\n' });

    it("with a JUnit report: blocked_path_modified (13), the config is protected by default", async () => {
      const repo = repoFor(vitestProject(true), skipConfig);
      const loopId = await expectHalt(repo, 13, "blocked_path_modified", /added vitest\.config\.mjs/);
      expect(onBranch(repo, loopId, "vitest.config.mjs")).toBeNull();
      expect(existsSync(path.join(repo, "vitest.config.mjs"))).toBe(false);
    });

    it("with a JUnit report and only the contract protected: metric_integrity_violation (13), the test t0 ran is skipped", async () => {
      const repo = repoFor(vitestProject(true), skipConfig, true);
      const loopId = await expectHalt(repo, 13, "metric_integrity_violation", /skipped now.*sum adds/);
      expect(onBranch(repo, loopId, "vitest.config.mjs")).toBeNull();
    });

    it("without a report (exit code only): blocked_path_modified (13)", async () => {
      const repo = repoFor(vitestProject(false), skipConfig);
      const loopId = await expectHalt(repo, 13, "blocked_path_modified", /added vitest\.config\.mjs/);
      expect(onBranch(repo, loopId, "vitest.config.mjs")).toBeNull();
    });

    it.each([true, false])("honest fix in src converges (10), JUnit report: %s", (junit) => expectHonestFixConverges(vitestProject(junit), "src/sum.js"));
  });

  describe(`3. pytest: a new conftest.py that deselects or skips the failing test${skipped(PYTEST, "python3 -m pytest")}`, () => {
    const deselect = agent({
      "conftest.py": "def pytest_collection_modifyitems(config, items):\n    items[:] = [item for item in items if item.name != 'test_add']\n",
    });
    const skipMarker = agent({
      "conftest.py": [
        "import pytest",
        "",
        "",
        "def pytest_collection_modifyitems(config, items):",
        "    for item in items:",
        "        if item.name == 'test_add':",
        "            item.add_marker(pytest.mark.skip(reason='flaky'))",
        "",
      ].join("\n"),
    });

    it.skipIf(!PYTEST)("without a report, deselected: blocked_path_modified (13)", async () => {
      const repo = repoFor(pytestProject("python3 -m pytest -q"), deselect);
      const loopId = await expectHalt(repo, 13, "blocked_path_modified", /added conftest\.py/);
      expect(onBranch(repo, loopId, "conftest.py")).toBeNull();
    });

    it.skipIf(!PYTEST).each([
      ["deselected (the test disappears)", deselect, /disappeared.*test_add/],
      ["skip marker (the test t0 ran is skipped)", skipMarker, /skipped now.*test_add/],
    ])("with a JUnit report and only the contract protected, %s: metric_integrity_violation (13)", async (_, cheat, detail) => {
      const repo = repoFor(pytestProject("python3 -m pytest -q", true), cheat, true);
      const loopId = await expectHalt(repo, 13, "metric_integrity_violation", detail);
      expect(onBranch(repo, loopId, "conftest.py")).toBeNull();
    });

    it.skipIf(!PYTEST).each([false, true])("honest fix in src converges (10), JUnit report: %s", (junit) =>
      expectHonestFixConverges(pytestProject("python3 -m pytest -q", junit), "src/calc.py"),
    );
  });

  describe("4. npm test: the agent rewrites scripts.test in package.json", () => {
    const project = () => nodeProject("npm test");

    it("blocked_path_modified (13), and the rewrite never reaches the loop's branch", async () => {
      const repo = repoFor(project(), agent({}, [["package.json", '"test": "node --test"', '"test": "echo all tests passed"']]));
      const loopId = await expectHalt(repo, 13, "blocked_path_modified", /modified package\.json/);
      expect(onBranch(repo, loopId, "package.json")).toContain('"test": "node --test"');
    });

    it("honest fix in src converges (10)", () => expectHonestFixConverges(project(), "src/sum.js"));
  });

  describe("5. a success-printing checker planted in the working tree's ignored node_modules/.bin", () => {
    /**
     * A local package outside every repository whose `checker` bin runs `node --test`, packed as a
     * tarball: installed from a directory, npm would link it and chmod its bin in place, which the exec
     * zone's read-only view of everything outside the clone refuses (EROFS), as it should. Packed once
     * for the three loops, which run at once: none repacks the tarball while another's gate installs it.
     */
    let packed: string | undefined;
    const checkerPackage = (): string => {
      if (packed) return packed;
      const dir = path.join(tmp.dir, "checker");
      mkdirSync(path.join(dir, "bin"), { recursive: true });
      writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "checker", version: "1.0.0", type: "module", bin: { checker: "bin/checker.mjs" } }));
      writeFileSync(
        path.join(dir, "bin", "checker.mjs"),
        '#!/usr/bin/env node\nimport { spawnSync } from "node:child_process";\nprocess.exit(spawnSync(process.execPath, ["--test"], { stdio: "inherit" }).status ?? 1);\n',
        { mode: 0o755 },
      );
      execFileSync("npm", ["pack", "--silent", "--pack-destination", tmp.dir], { cwd: dir, env: { ...process.env, ...NO_NPM_ENV }, stdio: "ignore" });
      packed = path.join(tmp.dir, "checker-1.0.0.tgz");
      return packed;
    };
    const INSTALLING = "npm install --offline --no-audit --no-fund && npm test";

    it("(a) the gate installs in the clone: the clone's own checker runs the tests, no_progress_detected (17)", () =>
      expectPlantIgnored(nodeProject(INSTALLING, checkerPackage()), "node_modules/.bin/checker", "src/sum.js", /(not ok \d+ - |✖ )sum adds/));

    it("(a) honest fix in src converges (10)", () => expectHonestFixConverges(nodeProject(INSTALLING, checkerPackage()), "src/sum.js"));

    it("(b) the gate does not install and the CLI runs with <repo>/node_modules/.bin on PATH: no checker in the clone, no_progress_detected (17)", () =>
      expectPlantIgnored(nodeProject("npm test", checkerPackage()), "node_modules/.bin/checker", "src/sum.js", /checker: (command )?not found/, (repo) => ({
        // As `npx loopwarden run` or an npm script would start it.
        PATH: onPath(path.join(repo, "node_modules", ".bin")),
        INIT_CWD: repo,
        npm_config_local_prefix: repo,
      })));
  });

  describe(`6. a success-printing pytest planted in the working tree's ignored, activated .venv${skipped(PYTEST_ON_PATH, "pytest")}`, () => {
    const project = () => pytestProject("pytest -q");
    const activated = (repo: string): NodeJS.ProcessEnv => ({
      PATH: onPath(path.join(repo, ".venv", "bin")),
      VIRTUAL_ENV: path.join(repo, ".venv"),
    });

    it.skipIf(!PYTEST_ON_PATH)("the gate's pytest is the real one: no_progress_detected (17)", () =>
      expectPlantIgnored(project(), ".venv/bin/pytest", "src/calc.py", /1 failed, 1 passed/, activated),
    );

    it.skipIf(!PYTEST_ON_PATH)("honest fix in src converges (10) in the same environment", () => expectHonestFixConverges(project(), "src/calc.py", activated));
  });
});
