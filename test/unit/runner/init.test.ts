import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import fc from "fast-check";
import * as prettier from "prettier";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { Lexer, parse as parseYaml } from "yaml";
import { DEFAULT_PROTECTED_GLOBS, inScope } from "#shared/engine/index.js";
import { AgentReportFile } from "#shared/wire/agent-report.js";
import { ReviewRequest } from "#shared/wire/review.js";
import { AGENT_PRESET_NAMES, AGENT_PRESETS, agentPreset } from "../../../runner/src/commands/agent-presets.js";
import { initCommand, starterContract, starterExec, starterProtectedFiles, yamlString } from "../../../runner/src/commands/init.js";
import { starterProgram } from "../../../runner/src/commands/init-program.js";
import { detectTestGate, nextestJunit, nodeTestArgs, toolsOnPath, type ProjectFacts, type StarterGate } from "../../../runner/src/commands/init-runners.js";
import { inferScope } from "../../../runner/src/commands/init-scope.js";
import { loadContractFile, validateContract } from "../../../runner/src/contract/contract-file.js";
import { protectedFiles } from "../../../runner/src/evaluation/protected-files.js";

const JUNIT = ".loopwarden/out/junit.xml";
const TAP = ".loopwarden/out/tests.tap";

/** Facts about a project: no files, no package.json, no nextest configuration, no optional tools. */
function facts(overrides: Partial<{ files: string[]; packageJson: object | string; nextestConfig: string; onPath: string[] }> = {}): ProjectFacts {
  const { packageJson } = overrides;
  return {
    files: overrides.files ?? [],
    packageJson: packageJson === undefined ? null : typeof packageJson === "string" ? packageJson : JSON.stringify(packageJson),
    nextestConfig: overrides.nextestConfig ?? null,
    onPath: new Set(overrides.onPath ?? []),
  };
}

const NEXTEST_CI = '[profile.ci]\nfail-fast = false\n\n[profile.ci.junit]\npath = "junit.xml"\n';

// Every kind of project init recognises, with the gate it writes: the command, and the report it reads.
const PROJECTS: { project: string; facts: ProjectFacts; runner: StarterGate["runner"]; run: string; tests?: StarterGate["tests"] }[] = [
  {
    project: "vitest in devDependencies, with a lockfile",
    facts: facts({ files: ["package.json", "package-lock.json"], packageJson: { scripts: { test: "vitest run" }, devDependencies: { vitest: "^4.1.0" } } }),
    runner: "vitest",
    run: `npm ci --no-audit --no-fund && npx vitest run --reporter=default --reporter=junit --outputFile.junit=${JUNIT}`,
    tests: { junit: JUNIT },
  },
  {
    project: "a test script that runs vitest, no lockfile",
    facts: facts({ files: ["package.json"], packageJson: { scripts: { test: "vitest --run" } } }),
    runner: "vitest",
    run: `npm install --no-audit --no-fund && npx vitest run --reporter=default --reporter=junit --outputFile.junit=${JUNIT}`,
    tests: { junit: JUNIT },
  },
  {
    project: "jest with jest-junit",
    facts: facts({ files: ["package-lock.json"], packageJson: { scripts: { test: "jest" }, devDependencies: { jest: "^30.0.0", "jest-junit": "^16.0.0" } } }),
    runner: "jest",
    run: `npm ci --no-audit --no-fund && JEST_JUNIT_OUTPUT_FILE=${JUNIT} npx jest --ci --reporters=default --reporters=jest-junit`,
    tests: { junit: JUNIT },
  },
  {
    project: "jest without jest-junit (no report of its own: exit code only)",
    facts: facts({ files: ["package-lock.json"], packageJson: { scripts: { test: "jest --coverage" }, devDependencies: { jest: "^30.0.0" } } }),
    runner: "jest",
    run: "npm ci --no-audit --no-fund && npm test",
  },
  {
    project: "node's test runner",
    facts: facts({ packageJson: { scripts: { test: "node --test" } } }),
    runner: "node --test",
    run: `npm install --no-audit --no-fund && node --test --test-reporter=spec --test-reporter-destination=stdout --test-reporter=tap --test-reporter-destination=${TAP}`,
    tests: { tap: TAP },
  },
  {
    project: "node's test runner on named files, with a reporter of its own",
    facts: facts({ packageJson: { scripts: { test: "node --test --test-reporter dot 'test/**/*.test.js' lib/" } } }),
    runner: "node --test",
    run: `npm install --no-audit --no-fund && node --test --test-reporter=spec --test-reporter-destination=stdout --test-reporter=tap --test-reporter-destination=${TAP} 'test/**/*.test.js' lib/`,
    tests: { tap: TAP },
  },
  {
    project: "node's test runner followed by another command (cannot be rewritten: exit code only)",
    facts: facts({ packageJson: { scripts: { test: "node --test && eslint ." } } }),
    runner: "npm test",
    run: "npm install --no-audit --no-fund && npm test",
  },
  {
    project: "a test script init does not know",
    facts: facts({ files: ["package-lock.json"], packageJson: { scripts: { test: "mocha" } } }),
    runner: "npm test",
    run: "npm ci --no-audit --no-fund && npm test",
  },
  {
    project: "pytest, by pyproject.toml",
    facts: facts({ files: ["pyproject.toml", "src/pkg/__init__.py"] }),
    runner: "pytest",
    run: `python3 -m pytest -q --junitxml=${JUNIT}`,
    tests: { junit: JUNIT },
  },
  ...["pytest.ini", "setup.cfg", "tox.ini", "conftest.py", "tests/test_parse.py", "tests/unit/test_parse.py"].map((file) => ({
    project: `pytest, by ${file}`,
    facts: facts({ files: [file] }),
    runner: "pytest" as const,
    run: `python3 -m pytest -q --junitxml=${JUNIT}`,
    tests: { junit: JUNIT },
  })),
  {
    project: "package.json without a test script or runner, next to pyproject.toml",
    facts: facts({ files: ["package.json", "pyproject.toml"], packageJson: { scripts: { build: "tsc" } } }),
    runner: "pytest",
    run: `python3 -m pytest -q --junitxml=${JUNIT}`,
    tests: { junit: JUNIT },
  },
  {
    project: "go, with gotestsum on PATH",
    facts: facts({ files: ["go.mod", "go.sum"], onPath: ["gotestsum"] }),
    runner: "gotestsum",
    run: `gotestsum --junitfile ${JUNIT} -- ./...`,
    tests: { junit: JUNIT },
  },
  { project: "go, without gotestsum (exit code only)", facts: facts({ files: ["go.mod"] }), runner: "go test", run: "go test ./..." },
  {
    project: "cargo, with cargo-nextest and a JUnit profile",
    facts: facts({ files: ["Cargo.toml", ".config/nextest.toml"], nextestConfig: NEXTEST_CI, onPath: ["cargo-nextest", "gotestsum"] }),
    runner: "cargo nextest",
    run: "cargo nextest run --config-file .config/nextest.toml --profile ci --no-fail-fast",
    tests: { junit: "target/nextest/ci/junit.xml" },
  },
  {
    project: "cargo, with cargo-nextest but no JUnit profile (exit code only)",
    facts: facts({ files: ["Cargo.toml"], onPath: ["cargo-nextest"] }),
    runner: "cargo nextest",
    run: "cargo nextest run --no-fail-fast",
  },
  {
    project: "cargo, without cargo-nextest (exit code only)",
    facts: facts({ files: ["Cargo.toml"], nextestConfig: NEXTEST_CI }),
    runner: "cargo test",
    run: "cargo test",
  },
  { project: "nothing init knows", facts: facts({ files: ["README.md", "main.c"] }), runner: null, run: "" },
  {
    project: "npm init's placeholder test script",
    facts: facts({ packageJson: { scripts: { test: 'echo "Error: no test specified" && exit 1' } } }),
    runner: null,
    run: "",
  },
  { project: "a package.json that is not JSON", facts: facts({ packageJson: "{ not json" }), runner: null, run: "" },
  { project: "python files outside tests/", facts: facts({ files: ["tests/helpers.py", "test_x.py"] }), runner: null, run: "" },
];

describe("detectTestGate", () => {
  it.each(PROJECTS)("$project: $runner", ({ facts: projectFacts, runner, run, tests }) => {
    const gate = detectTestGate(projectFacts);
    expect(gate.runner).toBe(runner);
    expect(gate.run).toBe(run);
    expect(gate.tests).toEqual(tests);
  });

  it("says how to get per-test results when the runner writes no report, naming the tool to add", () => {
    const advice = (projectFacts: ProjectFacts) => detectTestGate(projectFacts).advice.join("\n");
    expect(advice(facts({ packageJson: { scripts: { test: "jest" }, devDependencies: { jest: "1" } } }))).toMatch(
      /jest-junit[\s\S]*--reporters=jest-junit[\s\S]*tests: \{ junit: /,
    );
    expect(advice(facts({ files: ["go.mod"] }))).toContain("go install gotest.tools/gotestsum@latest");
    expect(advice(facts({ files: ["Cargo.toml"] }))).toMatch(/cargo install cargo-nextest[\s\S]*\[profile\.ci\.junit\][\s\S]*target\/nextest\/ci\/junit\.xml/);
    expect(advice(facts({ files: ["Cargo.toml"], onPath: ["cargo-nextest"] }))).toContain("nextest writes JUnit only when a profile asks for it");
    expect(advice(facts({ packageJson: { scripts: { test: "mocha" } } }))).toContain("JUnit XML or TAP report to .loopwarden/out/");
  });
});

describe("nodeTestArgs", () => {
  it.each([
    ["node --test", []],
    ["node --test test/", ["test/"]],
    ['node --test --experimental-strip-types "test/**/*.test.ts"', ["--experimental-strip-types", '"test/**/*.test.ts"']],
    ["node --test --test-reporter=spec --test-reporter-destination=stdout test/", ["test/"]],
    ["node --test | tee out.txt", null],
    ["node test.js", null],
    ["nodemon --test", null],
  ])("%s → %j", (script, args) => {
    expect(nodeTestArgs(script)).toEqual(args);
  });
});

describe("nextestJunit", () => {
  it.each([
    ["a [profile.ci.junit] table", NEXTEST_CI, { profile: "ci", report: "target/nextest/ci/junit.xml" }],
    ["a dotted key", '[profile.ci]\njunit.path = "reports/junit.xml" # for CI\n', { profile: "ci", report: "target/nextest/ci/reports/junit.xml" }],
    [
      "an inline table",
      "[profile.nightly]\njunit = { path = 'junit.xml', store-success-output = true }\n",
      { profile: "nightly", report: "target/nextest/nightly/junit.xml" },
    ],
    [
      "several profiles (ci wins)",
      '[profile.default.junit]\npath = "d.xml"\n[profile.ci.junit]\npath = "c.xml"\n',
      { profile: "ci", report: "target/nextest/ci/c.xml" },
    ],
    [
      "a store directory of its own",
      '[store]\ndir = "build/nextest"\n[profile.ci.junit]\npath = "junit.xml"\n',
      { profile: "ci", report: "build/nextest/ci/junit.xml" },
    ],
    ["a store directory outside the workspace", '[store]\ndir = "/var/nextest"\n[profile.ci.junit]\npath = "junit.xml"\n', null],
    ["no JUnit section", '[profile.ci]\nfail-fast = false\n# [profile.ci.junit]\n# path = "junit.xml"\n', null],
  ])("%s", (_name, config, expected) => {
    expect(nextestJunit(config)).toEqual(expected);
  });
});

describe("toolsOnPath", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lw-init-path-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const tool = (where: string, name: string) => {
    mkdirSync(where, { recursive: true });
    writeFileSync(path.join(where, name), "#!/bin/sh\n");
    chmodSync(path.join(where, name), 0o755);
  };

  it("finds a tool on PATH outside the working tree, never one inside it (a gate's PATH drops those entries)", async () => {
    const repo = path.join(dir, "repo");
    tool(path.join(dir, "bin"), "gotestsum");
    tool(path.join(repo, "bin"), "cargo-nextest");
    const found = await toolsOnPath(repo, [path.join(dir, "bin"), path.join(repo, "bin"), "bin", path.join(dir, "missing")].join(path.delimiter));
    expect([...found]).toEqual(["gotestsum"]);
  });
});

/** The contract a starter describes, as the runner would load it once its blanks are filled in. */
function loadStarter(text: string) {
  const input = parseYaml(text) as { gates: { run: string }[]; agent: { run: string } };
  for (const gate of input.gates) if (gate.run === "") gate.run = "true";
  if (input.agent.run === "") input.agent.run = "true";
  return input;
}

describe("starterContract", () => {
  const AGENTS = [
    "",
    `claude -p "Read program.md, make one focused change, then stop." --dangerously-skip-permissions`,
    "claude -p 'Read program.md, make one focused change, then stop.' --dangerously-skip-permissions",
    `sh -c 'echo "it'"'"'s done"' # a comment`,
  ];
  const variants = PROJECTS.flatMap(({ project, facts: projectFacts }) =>
    AGENTS.map((agent) => ({
      project,
      agent,
      gate: detectTestGate(projectFacts),
      text: starterContract({ name: "textkit", gate: detectTestGate(projectFacts), agent }),
    })),
  );

  it("passes prettier --check as written, for every project and agent command", async () => {
    for (const { project, agent, text } of variants) {
      const formatted = await prettier.format(text, { parser: "yaml" });
      expect(formatted, `${project}, agent ${JSON.stringify(agent)}`).toBe(text);
      expect(await prettier.check(text, { parser: "yaml" })).toBe(true);
    }
    // Prettier's first load and a format per variant: past vitest's 5 s default on a loaded 2-core machine.
  }, 60_000);

  it("says, above a gate without a report, that only a fully green suite is progress, and how to get per-test results", () => {
    for (const { gate, text } of variants) {
      if (gate.tests) expect(text).not.toContain("Exit code only");
      else expect(text).toContain("# Exit code only: the gate is one test, so only a candidate that turns all of it green is progress.");
    }
  });

  it("puts every comment on a line of its own, never aligned after a value", () => {
    for (const { text } of variants) {
      // YAML's own tokens, so a # inside a quoted command is not taken for a comment.
      let lineHasContent = false;
      for (const token of new Lexer().lex(text)) {
        if (token === "\n") lineHasContent = false;
        else if (token.startsWith("#")) expect(lineHasContent, token).toBe(false);
        else if (token.trim() !== "" && !(token.length === 1 && token.charCodeAt(0) < 0x20)) lineHasContent = true;
      }
    }
  });

  it("parses to a valid contract holding the detected gate, its report and the agent command", () => {
    for (const { gate, agent, text } of variants) {
      const input = parseYaml(text) as { gates: { run: string; tests?: unknown }[]; agent: { run: string } };
      expect(input.gates[0]?.run).toBe(gate.run);
      expect(input.gates[0]?.tests).toEqual(gate.tests);
      expect(input.agent.run).toBe(agent);
      const { contract } = validateContract(loadStarter(text), "loop.yaml");
      expect(contract.mode).toBe("check_fixpoint");
    }
  });

  it("quotes any name or command so that prettier keeps it and YAML reads it back unchanged", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.string({ unit: "grapheme" }), fc.string({ unit: fc.constantFrom('"', "'", " ", "\\", "#", ":", "\n", "\t", "a") })),
        async (text) => {
          const yaml = `agent:\n  run: ${yamlString(text)}\n`;
          expect(await prettier.check(yaml, { parser: "yaml" })).toBe(true);
          expect((parseYaml(yaml) as { agent: { run: string } }).agent.run).toBe(text);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("starterExec", () => {
  const zoned = PROJECTS.map(({ project, facts: projectFacts }) => {
    const detected = detectTestGate(projectFacts);
    return { project, projectFacts, detected, ...starterExec(detected, projectFacts) };
  });

  it("gives the gates no network, unless they download what they build with (cargo, go with a go.sum)", () => {
    for (const { project, projectFacts, detected, exec } of zoned) {
      const downloads = detected.runner?.startsWith("cargo") === true || (detected.runner?.startsWith("go") === true && projectFacts.files.includes("go.sum"));
      expect(exec.network, project).toBe(downloads ? "host" : "none");
    }
  });

  it("moves the install of a project with a lockfile or dependencies into setup, and keeps the rest of the gate as it was", () => {
    for (const { project, projectFacts, detected, gate, exec } of zoned) {
      const lockfile = projectFacts.files.includes("package-lock.json");
      if (lockfile && detected.run.startsWith("npm ")) expect(exec.setup, project).toBe("npm ci --no-audit --no-fund");
      if (exec.setup) {
        expect(exec.network).toBe("none");
        expect(`${exec.setup} && ${gate.run}`, project).toBe(detected.run);
        expect(gate.advice.join("\n"), project).not.toContain(exec.setup);
      } else {
        expect(gate, project).toEqual(detected);
      }
    }
    // With dependencies but no lockfile, the install is npm install; without either, nothing needs one.
    const withDependencies = facts({ files: ["package.json"], packageJson: { scripts: { test: "vitest run" }, devDependencies: { vitest: "^4.1.0" } } });
    expect(starterExec(detectTestGate(withDependencies), withDependencies).exec).toEqual({ network: "none", setup: "npm install --no-audit --no-fund" });
    const bare = facts({ files: ["package.json"], packageJson: { scripts: { test: "node --test" } } });
    expect(starterExec(detectTestGate(bare), bare)).toEqual({ gate: detectTestGate(bare), exec: { network: "none" } });
  });

  it("writes an exec section that prettier keeps, that loads, and that says setup runs with network before the gates", async () => {
    for (const { project, gate, exec } of zoned) {
      const text = starterContract({ name: "textkit", gate, agent: "node agent.mjs", exec });
      expect(await prettier.format(text, { parser: "yaml" }), project).toBe(text);
      const { contract } = validateContract(loadStarter(text), "loop.yaml");
      expect(contract.exec, project).toEqual(exec);
      // loadStarter fills in a blank gate command with `true`.
      expect(contract.gates[0]?.run, project).toBe(gate.run || "true");
      if (exec.setup) {
        expect(text).toContain("# Each evaluation's clone is confined like the agent. setup runs there first, with network, to\n# install the dependencies;");
        expect(text).toContain("exec.setup below installs the dependencies");
      } else {
        expect(text).not.toContain("setup:");
      }
    }
  }, 60_000);
});

describe("agent presets", () => {
  it("knows the common coding-agent CLIs, each a headless run of program.md", () => {
    expect(AGENT_PRESET_NAMES).toEqual(["claude", "codex", "gemini", "aider", "opencode"]);
    for (const preset of AGENT_PRESETS) {
      expect(agentPreset(preset.name)).toBe(preset);
      expect(preset.run, preset.name).toContain("program.md");
      for (const host of preset.allow) expect(host, preset.name).toMatch(/^[a-z0-9.-]+:443$/);
      for (const name of preset.env) expect(name, preset.name).toMatch(/^[A-Z][A-Z0-9_]*_API_KEY$/);
      // A key comes by name from the environment, never from a credential directory or the command line.
      expect(preset.run, preset.name).not.toMatch(/~\/|\$HOME|\.claude|\.codex|\.gemini|sk-/);
    }
    expect(agentPreset("claude")?.run).toContain('claude -p "$(cat program.md)" --dangerously-skip-permissions');
    expect(agentPreset("codex")?.run).toContain('codex exec --full-auto "$(cat program.md)"');
    expect(agentPreset("gemini")?.run).toContain('gemini -p "$(cat program.md)" --yolo');
    expect(agentPreset("aider")?.run).toMatch(/^aider .*--message-file program\.md --yes-always --no-auto-commits/);
    expect(agentPreset("opencode")?.run).toMatch(/^opencode run .*"\$\(cat program\.md\)"$/);
    for (const name of ["Claude", "claude -p hi", "", "toString", "__proto__"]) expect(agentPreset(name), name).toBeUndefined();
  });

  it("writes a contract that prettier keeps, whose every comment is on a line of its own, and that loads with the preset", async () => {
    for (const preset of AGENT_PRESETS) {
      const gate = detectTestGate(PROJECTS[0]?.facts ?? facts());
      const text = starterContract({ name: "textkit", gate, agent: preset });
      expect(await prettier.format(text, { parser: "yaml" }), preset.name).toBe(text);
      let lineHasContent = false;
      for (const token of new Lexer().lex(text)) {
        if (token === "\n") lineHasContent = false;
        else if (token.startsWith("#")) expect(lineHasContent, token).toBe(false);
        else if (token.trim() !== "" && !(token.length === 1 && token.charCodeAt(0) < 0x20)) lineHasContent = true;
      }
      const { contract } = validateContract(loadStarter(text), "loop.yaml");
      expect(contract.agent, preset.name).toEqual({ run: preset.run, timeout: "20m", network: { allow: preset.allow }, env: preset.env });
      expect(text).toContain(`  # Preset "${preset.name}" (${preset.title}), from loopwarden init --agent ${preset.name}.\n`);
      expect(text).toContain("  # It runs confined: its network reaches only the hosts in network.allow");
    }
  }, 60_000);

  it("leaves a raw command without network, and says how to allow a model's host", () => {
    const text = starterContract({ name: "textkit", gate: detectTestGate(facts()), agent: "node agent.mjs" });
    const input = loadStarter(text) as { agent: Record<string, unknown> };
    expect(input.agent).toEqual({ run: "node agent.mjs", timeout: "20m" });
    expect(text).toContain("  # No network: agent.network is none when absent.");
    expect(text).toContain("  # loopwarden init --agent NAME writes all three for claude, codex, gemini, aider and opencode.\n");
  });

  it("are the ones init --help names", () => {
    const main = readFileSync(path.join(import.meta.dirname, "../../../runner/src/main.ts"), "utf8");
    const help = /\.option\(\s*"--agent <name\|cmd>",\s*"([^"]*)"/.exec(main)?.[1];
    expect(help).toBeDefined();
    expect(help).toContain(`a preset (${AGENT_PRESET_NAMES.join(", ")})`);
  });
});

describe("starterProtectedFiles", () => {
  const tracked = [
    "package.json",
    "package-lock.json",
    "src/index.js",
    "test/a.test.js",
    "scripts/check.sh",
    "vitest.config.ts",
    ".github/workflows/ci.yml",
    "README.md",
  ];
  const gate = (run: string): StarterGate => ({ runner: run ? "npm test" : null, run, advice: [] });

  it("lists the contract file (not committed yet), the default globs' files and the files the gate names", () => {
    const text = starterContract({ name: "x", gate: gate("npm ci && bash scripts/check.sh"), agent: "" });
    expect(starterProtectedFiles(text, "loop.yaml", tracked)).toEqual([
      ".github/workflows/ci.yml",
      "loop.yaml",
      "package-lock.json",
      "package.json",
      "scripts/check.sh",
      "test/a.test.js",
      "vitest.config.ts",
    ]);
  });

  it("follows npm test into package.json's test script, as the guard does", () => {
    const text = starterContract({ name: "x", gate: gate("npm ci --no-audit --no-fund && npm test"), agent: "" });
    const files = starterProtectedFiles(text, "loop.yaml", [...tracked, "tools/run-tests.js"], { test: "node tools/run-tests.js" });
    expect(files).toContain("tools/run-tests.js");
    expect(files).not.toContain("src/index.js");
  });

  it("lists only the default globs' files and the contract file while the gate command is still empty", () => {
    const text = starterContract({ name: "x", gate: gate(""), agent: "" });
    const files = starterProtectedFiles(text, "ci/loop.yaml", tracked);
    expect(files).toContain("ci/loop.yaml");
    expect(files).not.toContain("scripts/check.sh");
    expect(files).not.toContain("src/index.js");
  });
});

describe("starterProgram", () => {
  const program = starterProgram({
    name: "textkit",
    objective: "make every test pass without weakening any test",
    gatesSummary: "1. `test`: `npm test` (timeout 10m)",
    contract: "ci/loop.yaml",
  });
  const offLimits = (text: string) => text.slice(text.indexOf("Off limits"), text.indexOf("## First"));

  it("gives the agent the objective, the gates, and the files it must not touch", () => {
    expect(program).toMatch(/^# textkit: instructions for the agent\n/);
    expect(program).toContain("## Objective\n\nmake every test pass without weakening any test\n");
    expect(program).toContain("1. `test`: `npm test` (timeout 10m)");
    expect(offLimits(program)).toContain("`ci/loop.yaml`");
    // The default protected globs of DESIGN §6.4, exactly as the guards define them.
    for (const glob of DEFAULT_PROTECTED_GLOBS) expect(offLimits(program)).toContain(`\`${glob}\``);
    expect(offLimits(program)).toContain("the test harness");
    expect(offLimits(program)).toContain("manifests");
  });

  it("says what happens to a candidate that touches a protected file, or skips or loses a test", () => {
    const section = offLimits(program);
    expect(section).toContain("halts the loop\n(`blocked_path_modified`)");
    expect(section).toContain("skips or deselects a\ntest that t0");
    expect(section).toContain("(`metric_integrity_violation`)");
    expect(section).toContain("A skipped test is never a fix.");
  });

  it("lists this repository's protected files, at most 50 of them, and counts the rest", () => {
    const files = Array.from({ length: 62 }, (_, index) => `test/t${String(index).padStart(2, "0")}.test.js`);
    const listed = offLimits(starterProgram({ name: "x", objective: "o", gatesSummary: "g", protectedFiles: files }));
    expect(listed).toContain("- `test/t00.test.js`\n");
    expect(listed).toContain("- `test/t49.test.js`\n- … and 12 more\n");
    expect(listed).not.toContain("t50.test.js");
    const few = offLimits(starterProgram({ name: "x", objective: "o", gatesSummary: "g", protectedFiles: ["loop.yaml", "package.json"] }));
    expect(few).toContain("- `loop.yaml`\n- `package.json`\n");
    expect(few).not.toContain("more");
  });

  it("names the environment variables the runner sets, and the fields of the files they point at", () => {
    for (const name of ["LOOPWARDEN_BEST", "LOOPWARDEN_LAST_VERDICT", "LOOPWARDEN_HISTORY", "LOOPWARDEN_AGENT_REPORT"]) expect(program).toContain(`$${name}`);
    for (const field of ["candidate_id", "decision", "reason", "detail", "failing_before", "failing_after", "regressed", "failing_tests"]) {
      expect(program).toContain(`"${field}"`);
    }
    for (const field of ["parent", "status", "diff_summary", "description"]) expect(program).toContain(field);
    expect(program).toContain("make **one focused change**");
    expect(program).toContain("**Do not retry a direction that was rejected**");
  });

  it("tells the agent it runs in a sandbox: a fresh clone, only allowlisted hosts through the proxy, an empty private $HOME and /tmp", () => {
    const intro = program.slice(0, program.indexOf("## Objective"));
    expect(intro).toContain("You run in a sandbox: your workspace is a fresh clone of the best commit so far");
    expect(intro).toContain("only the hosts `ci/loop.yaml` allows (`agent.network`) through the proxy in `HTTP_PROXY`/`HTTPS_PROXY`");
    expect(intro).toContain("`$HOME` and `/tmp` are empty and private to this run");
  });

  it("points the agent at its context, and shows a request to change a protected file that the runner accepts", () => {
    expect(program).toContain("`$LOOPWARDEN_CONTEXT` is a directory");
    expect(program).toContain("`context.md`");
    const request = /`(\{ "files": .*? \})`/.exec(program)?.[1];
    expect(request, "the request example").toBeDefined();
    const parsed = ReviewRequest.safeParse(JSON.parse(request ?? ""));
    expect(parsed.success, parsed.error?.message).toBe(true);
    expect(program).toContain("path in `$LOOPWARDEN_REQUESTS`");
  });

  it("shows a report example that the runner accepts", () => {
    const example = /```json\n([\s\S]*?)```/.exec(program)?.[1];
    expect(example).toBeDefined();
    const parsed = AgentReportFile.safeParse(JSON.parse(example ?? ""));
    expect(parsed.success, parsed.error?.message).toBe(true);
    expect(Object.keys(parsed.data ?? {})).toEqual(["agent", "sampling", "cost", "context_files", "description"]);
  });
});

describe("inferScope", () => {
  const scopeOf = (tracked: string[], packageJson?: object, pyproject?: string) =>
    inferScope({ tracked, packageJson: packageJson === undefined ? null : JSON.stringify(packageJson), pyproject: pyproject ?? null });

  it.each([
    {
      rule: "npm: a declared directory that git does not track (a build's dist/) is left out; the conventional src/ is in",
      tracked: ["package.json", "src/index.ts", "tsconfig.json"],
      packageJson: { main: "./dist/index.js", types: "dist/index.d.ts", files: ["dist"] },
      globs: ["src/**"],
      how: ["src/, by the npm convention for a package's sources"],
    },
    {
      rule: "npm: exports' nested values and files' globs give their top-level directory; a negation, a test directory, a dotfile, a README and package.json itself give nothing",
      tracked: ["package.json", "lib/index.js", "features/a.js", "test/a.test.js", ".npmignore", "README.md", "types/index.d.ts"],
      packageJson: {
        exports: { ".": { import: "./lib/index.js", types: ["./types/index.d.ts"] }, "./features/*": "./features/*.js", "./package.json": "./package.json" },
        files: ["lib/**/*.js", "!lib/**/*.test.js", "test", ".npmignore", "README.md"],
      },
      globs: ["features/**", "lib/**", "types/**"],
      how: ["package.json exports, files name lib/", "package.json exports names types/", "package.json exports names features/"],
    },
    {
      rule: "npm: a root entry point is the file itself, found as node finds a main without an extension; a tool's configuration never is",
      tracked: ["package.json", "index.js", "cli.mjs", "webpack.config.js"],
      packageJson: { main: "index", bin: { tool: "./cli.mjs" }, files: ["index.js", "cli.mjs", "webpack.config.js"] },
      globs: ["cli.mjs", "index.js"],
      how: ["package.json main, files name index.js", "package.json bin, files name cli.mjs"],
    },
    {
      rule: "Python: import packages at the root and under src/, never a test package",
      tracked: ["pyproject.toml", "alpha/__init__.py", "src/beta/__init__.py", "src/beta/x.py", "tests/__init__.py", "tests/test_x.py", "tool.py"],
      globs: ["alpha/**", "src/beta/**"],
      how: ["Python import package alpha (alpha/__init__.py)", "Python import package beta (src/beta/__init__.py)"],
    },
    {
      rule: "Python: without an import package, the root modules, less tests and tooling",
      tracked: ["setup.py", "noxfile.py", "conftest.py", "test_core.py", "core_test.py", "core.py", "helpers.py", "scripts/x.py"],
      globs: ["core.py", "helpers.py"],
      how: ["Python root modules (no import package)"],
    },
    {
      rule: "Python: pyproject's [tool.setuptools] py-modules names the root modules",
      tracked: ["pyproject.toml", "core.py", "make_release.py"],
      pyproject: '[tool.setuptools]\npy-modules = ["core"]\n',
      globs: ["core.py"],
      how: ["pyproject.toml [tool.setuptools] py-modules"],
    },
    {
      rule: "Cargo: the src/ of every crate of a workspace that has one; a fixture crate under tests/ is not source",
      tracked: [
        "Cargo.toml",
        "crates/a/Cargo.toml",
        "crates/a/src/lib.rs",
        "crates/a/tests/it.rs",
        "crates/b/Cargo.toml",
        "tests/fixture/Cargo.toml",
        "tests/fixture/src/lib.rs",
      ],
      globs: ["crates/a/src/**"],
      how: ["Cargo's src/ of the crate at crates/a"],
    },
    {
      rule: "Go: each package, one by one, under a directory whose testdata/ holds .go fixtures; never vendor/",
      tracked: ["go.mod", "cmd/tool/main.go", "pkg/parse/parse.go", "pkg/parse/testdata/case.go", "pkg/lex/lex.go", "vendor/x/x.go", "pkg/lex/lex_test.go"],
      globs: ["cmd/**/*.go", "pkg/lex/*.go", "pkg/parse/*.go"],
      how: ["Go packages under cmd/", "Go packages under pkg/, one by one (a testdata/ or vendor/ below holds .go files)"],
    },
    { rule: "Go: no go.mod, no Go scope", tracked: ["main.go"], globs: [], how: [] },
    { rule: "nothing declared: no scope", tracked: ["main.c", "Makefile", "tests/run.sh"], globs: [], how: [] },
  ])("$rule", ({ tracked, packageJson, pyproject, globs, how }) => {
    const scope = scopeOf(tracked, packageJson, pyproject);
    expect(scope).toEqual({ globs, how });
    // Every glob admits a tracked file.
    for (const glob of scope.globs)
      expect(
        tracked.some((file) => inScope([glob], file)),
        glob,
      ).toBe(true);
  });

  it("writes no scope larger than a contract holds, and says why", () => {
    const tracked = Array.from({ length: 201 }, (_, index) => [`crates/c${index}/Cargo.toml`, `crates/c${index}/src/lib.rs`]).flat();
    expect(scopeOf(tracked)).toEqual({ globs: [], how: ["201 globs found, more than a scope holds (200): write one by hand"] });
  });
});

describe("initCommand", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lw-init-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  afterEach(() => vi.restoreAllMocks());
  let serial = 0;

  const git = (cwd: string, ...args: string[]) => {
    const env = { ...process.env };
    delete env.GIT_DIR;
    return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@localhost", ...args], { cwd, encoding: "utf8", env });
  };
  const repoWith = (files: Record<string, string>) => {
    const repo = path.join(dir, `repo-${++serial}`);
    for (const [name, content] of Object.entries(files)) {
      mkdirSync(path.dirname(path.join(repo, name)), { recursive: true });
      writeFileSync(path.join(repo, name), content);
    }
    git(dir, "init", "-q", "-b", "main", repo);
    git(repo, "add", "-A");
    git(repo, "commit", "-q", "-m", "initial");
    return repo;
  };
  const init = async (repo: string, json: boolean, agent?: string) => {
    const out: string[] = [];
    vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
      out.push(String(chunk));
      return true;
    });
    const code = await initCommand({ json, quiet: false, cwd: repo, mode: "check_fixpoint", ...(agent === undefined ? {} : { agent }) });
    vi.restoreAllMocks();
    return { code, out: out.join("") };
  };

  const VITEST_PROJECT = {
    "package.json": JSON.stringify({ name: "kit", scripts: { test: "vitest run" }, devDependencies: { vitest: "^4.1.0" } }),
    "package-lock.json": "{}\n",
    "vitest.config.ts": "export default {};\n",
    "src/index.ts": "export const x = 1;\n",
    "test/index.test.ts": "import { it } from 'vitest';\nit('x', () => {});\n",
    ".github/workflows/ci.yml": "on: push\n",
  };

  it("writes a vitest gate with a JUnit report, and lists the files the guard will protect once it is committed", async () => {
    const repo = repoWith(VITEST_PROJECT);
    const { code, out } = await init(repo, true, `claude -p "Read program.md, make one focused change, then stop."`);
    expect(code).toBe(0);
    const result = JSON.parse(out) as { status: string; protected: string[]; todo: string[] };
    expect(result.status).toBe("ok");
    expect(result.todo).toEqual([]);
    expect(result.protected).toEqual([".github/workflows/ci.yml", "loop.yaml", "package-lock.json", "package.json", "test/index.test.ts", "vitest.config.ts"]);

    const written = readFileSync(path.join(repo, "loop.yaml"), "utf8");
    expect(await prettier.check(written, { parser: "yaml" })).toBe(true);
    const loaded = await loadContractFile(repo, "loop.yaml");
    expect(loaded.contract.gates[0]?.tests).toEqual({ junit: JUNIT });
    expect(loaded.contract.gates[0]?.run).toContain("npx vitest run --reporter=default --reporter=junit");

    const program = readFileSync(path.join(repo, "program.md"), "utf8");
    for (const file of result.protected) expect(program).toContain(`- \`${file}\`\n`);
    expect(program).not.toContain("- `src/index.ts`");
    expect(program).toContain("Each test is read from the JUnit XML report it writes (`.loopwarden/out/junit.xml`)");

    // What init listed is what the guard hashes once the starter is committed.
    git(repo, "add", "-A");
    git(repo, "commit", "-q", "-m", "contract");
    expect(await protectedFiles(repo, loaded.contract, "loop.yaml")).toEqual(result.protected);
  });

  it("lists the file that the test script runs, exactly as the guard will once the starter is committed", async () => {
    const repo = repoWith({
      "package.json": JSON.stringify({ scripts: { test: "node tools/run-tests.js" } }),
      "tools/run-tests.js": "process.exit(0);\n",
      "src/index.js": "export const x = 1;\n",
    });
    const { out } = await init(repo, true, "node agent.mjs");
    const result = JSON.parse(out) as { protected: string[] };
    expect(result.protected).toEqual(["loop.yaml", "package.json", "tools/run-tests.js"]);
    git(repo, "add", "-A");
    git(repo, "commit", "-q", "-m", "contract");
    const loaded = await loadContractFile(repo, "loop.yaml");
    expect(loaded.contract.gates[0]?.run).toBe("npm install --no-audit --no-fund && npm test");
    expect(await protectedFiles(repo, loaded.contract, "loop.yaml")).toEqual(result.protected);
  });

  it("says in one line how many files are protected, and which test gate it wrote", async () => {
    const repo = repoWith(VITEST_PROJECT);
    const { out } = await init(repo, false);
    expect(out).toContain("  test gate: vitest, per-test results from .loopwarden/out/junit.xml\n");
    expect(out).toContain("  protected: 6 files (.github/workflows/ci.yml, loop.yaml, package-lock.json, …) — see program.md\n");
    expect(out).toContain("  fill in: agent.run (your agent command)\n");
  });

  it("with no test command to guess, lists the files the default globs protect, and the contract", async () => {
    const repo = repoWith({ "main.c": "int main(void) { return 0; }\n", Makefile: "test:\n\t./run-tests\n", "tests/run.sh": "#!/bin/sh\n" });
    const { out } = await init(repo, true);
    const result = JSON.parse(out) as { protected: string[]; todo: string[] };
    expect(result.todo).toEqual(["gates[0].run (your test command)", "agent.run (your agent command)"]);
    expect(result.protected).toEqual(["Makefile", "loop.yaml", "tests/run.sh"]);
    expect(await prettier.check(readFileSync(path.join(repo, "loop.yaml"), "utf8"), { parser: "yaml" })).toBe(true);
  });

  it("with a lockfile, installs in exec.setup (with network) and runs the gates without network", async () => {
    const repo = repoWith(VITEST_PROJECT);
    await init(repo, true, "node agent.mjs");
    const written = readFileSync(path.join(repo, "loop.yaml"), "utf8");
    expect(written).toContain("# Each evaluation's clone is confined like the agent. setup runs there first, with network, to");
    const loaded = await loadContractFile(repo, "loop.yaml");
    expect(loaded.contract.exec).toEqual({ network: "none", setup: "npm ci --no-audit --no-fund" });
    expect(loaded.contract.gates[0]?.run).toBe(`npx vitest run --reporter=default --reporter=junit --outputFile.junit=${JUNIT}`);
    const program = readFileSync(path.join(repo, "program.md"), "utf8");
    expect(program).toContain("Before them, `npm ci --no-audit --no-fund` (`exec.setup`) installs the dependencies in that clone.");
  });

  it("without anything to install, gives the gates no network and no setup", async () => {
    const repo = repoWith({ "package.json": JSON.stringify({ scripts: { test: "node --test" } }), "test/a.test.js": "import 'node:test';\n" });
    await init(repo, true, "node agent.mjs");
    const loaded = await loadContractFile(repo, "loop.yaml");
    expect(loaded.contract.exec).toEqual({ network: "none" });
    expect(readFileSync(path.join(repo, "loop.yaml"), "utf8")).toContain("# The gates run without network (network: none), so no test reaches the outside.");
  });

  it.each(AGENT_PRESETS.map((preset) => [preset.name, preset] as const))(
    "--agent %s writes the preset's command, allowlist and variables, and the contract loads",
    async (name, preset) => {
      const repo = repoWith(VITEST_PROJECT);
      const { code, out } = await init(repo, true, name);
      expect(code).toBe(0);
      expect((JSON.parse(out) as { todo: string[] }).todo).toEqual([]);
      const written = readFileSync(path.join(repo, "loop.yaml"), "utf8");
      expect(await prettier.check(written, { parser: "yaml" })).toBe(true);
      expect(written).toContain(`# Preset "${name}" (${preset.title}), from loopwarden init --agent ${name}.`);
      expect(written).toContain("only the hosts in network.allow");
      const { contract } = await loadContractFile(repo, "loop.yaml");
      expect(contract.agent.run).toBe(preset.run);
      expect(contract.agent.network).toEqual({ allow: [...preset.allow] });
      expect(contract.agent.env).toEqual([...preset.env]);
      expect(contract.agent.mounts).toBeUndefined();
      expect(contract.agent.credentials).toBeUndefined();
      expect(contract.exec).toEqual({ network: "none", setup: "npm ci --no-audit --no-fund" });
    },
  );

  it("says which preset it wrote, the hosts it may reach, and the key the runner must have", async () => {
    vi.stubEnv("ANTHROPIC_API_KEY", "");
    try {
      const { out } = await init(repoWith(VITEST_PROJECT), false, "claude");
      expect(out).toContain(
        "  agent: Claude Code (preset claude), confined to api.anthropic.com:443; give the runner ANTHROPIC_API_KEY (not set in this shell: ANTHROPIC_API_KEY)\n",
      );
      expect(out).toContain("  setup: npm ci --no-audit --no-fund, with network, before the gates (which run without)\n");
      expect(out).not.toContain("fill in:");
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it("writes any other --agent value as the raw command, with no network and no variables", async () => {
    for (const agent of ["claude --model opus -p 'Read program.md'", "Codex", "./my-agent.sh"]) {
      const repo = repoWith(VITEST_PROJECT);
      await init(repo, true, agent);
      const { contract } = await loadContractFile(repo, "loop.yaml");
      expect(contract.agent.run, agent).toBe(agent);
      expect(contract.agent.network, agent).toBeUndefined();
      expect(contract.agent.env, agent).toBeUndefined();
      expect(readFileSync(path.join(repo, "loop.yaml"), "utf8")).toContain("# No network: agent.network is none when absent.");
    }
  });

  // Four shapes of project, each with its sources, the files outside its scope (tests, configuration,
  // manifests, dotfiles) and the tests inside it, which stay protected.
  const SHAPES: { shape: string; files: Record<string, string>; scope: string[]; from: string; sources: string[]; testsInside: string[] }[] = [
    {
      shape: "an npm library",
      files: {
        "package.json": JSON.stringify({
          name: "strkit",
          main: "lib/index.js",
          bin: { strkit: "./cli.js" },
          files: ["lib/", "cli.js"],
          scripts: { test: "vitest run" },
          devDependencies: { vitest: "^4.1.0" },
        }),
        "package-lock.json": "{}\n",
        "lib/index.js": "export * from './pad.js';\n",
        "lib/pad.js": "export const pad = (s) => s;\n",
        "lib/x.test.js": "import { it } from 'vitest';\nit('x', () => {});\n",
        "lib/.babelrc": "{}\n",
        "cli.js": "import './lib/index.js';\n",
        "test/index.test.js": "import { it } from 'vitest';\nit('y', () => {});\n",
        ".eslintrc.json": "{}\n",
        "vitest.config.ts": "export default {};\n",
        "README.md": "# strkit\n",
      },
      scope: ["cli.js", "lib/**"],
      from: "package.json main, files name lib/; package.json bin, files name cli.js",
      sources: ["cli.js", "lib/index.js", "lib/pad.js"],
      testsInside: ["lib/x.test.js"],
    },
    {
      shape: "a Python package (src layout)",
      files: {
        "pyproject.toml": '[project]\nname = "mypkg"\n',
        "src/mypkg/__init__.py": "",
        "src/mypkg/core.py": "def f():\n    return 1\n",
        "src/mypkg/sub/__init__.py": "",
        "tests/test_core.py": "def test_f():\n    pass\n",
        "tests/conftest.py": "",
        "conftest.py": "",
        "noxfile.py": "",
        "setup.py": "",
        ".flake8": "[flake8]\n",
        "README.md": "# mypkg\n",
      },
      scope: ["src/mypkg/**"],
      from: "Python import package mypkg (src/mypkg/__init__.py)",
      sources: ["src/mypkg/__init__.py", "src/mypkg/core.py", "src/mypkg/sub/__init__.py"],
      testsInside: [],
    },
    {
      shape: "a Cargo crate",
      files: {
        "Cargo.toml": '[package]\nname = "crab"\nversion = "0.1.0"\n',
        "Cargo.lock": "version = 3\n",
        "src/lib.rs": "pub fn f() {}\n",
        "src/main.rs": "fn main() {}\n",
        "tests/it.rs": "#[test]\nfn it() {}\n",
        "benches/b.rs": "fn main() {}\n",
        "examples/demo.rs": "fn main() {}\n",
        "build.rs": "fn main() {}\n",
        "rustfmt.toml": 'edition = "2021"\n',
        ".cargo/config.toml": "[build]\n",
      },
      scope: ["src/**"],
      from: "Cargo's src/ of the root crate",
      sources: ["src/lib.rs", "src/main.rs"],
      testsInside: [],
    },
    {
      shape: "a Go module",
      files: {
        "go.mod": "module example.com/gopher\n\ngo 1.22\n",
        "main.go": "package main\n\nfunc main() {}\n",
        "main_test.go": "package main\n",
        "internal/x/x.go": "package x\n",
        "internal/x/x_test.go": "package x\n",
        "internal/x/testdata/input.txt": "in\n",
        "testdata/golden.txt": "out\n",
        ".golangci.yml": "linters: {}\n",
      },
      scope: ["*.go", "internal/**/*.go"],
      from: "the Go package at the root; Go packages under internal/",
      sources: ["internal/x/x.go", "main.go"],
      testsInside: ["internal/x/x_test.go", "main_test.go"],
    },
  ];

  it.each(SHAPES)(
    "infers the scope of $shape: its sources, none of its tests, configuration, manifests or dotfiles, and tells the agent and the user",
    async ({ files, scope, from, sources, testsInside }) => {
      const repo = repoWith(files);
      const { code, out } = await init(repo, true, "node agent.mjs");
      expect(code).toBe(0);
      const result = JSON.parse(out) as { scope: string[] | null; protected: string[] };
      expect(result.scope).toEqual(scope);

      const written = readFileSync(path.join(repo, "loop.yaml"), "utf8");
      expect(await prettier.check(written, { parser: "yaml" })).toBe(true);
      expect((parseYaml(written) as { scope: string[] }).scope).toEqual(scope);
      expect(written).toContain(`# - ${from.split("; ").join("\n# - ")}\n`);
      expect(written).toContain("halts the loop with blocked_path_modified. Tests inside the scope stay protected");
      const { contract } = await loadContractFile(repo, "loop.yaml");
      expect(contract.scope).toEqual(scope);

      const tracked = Object.keys(files);
      for (const file of sources) expect(inScope(scope, file), file).toBe(true);
      for (const file of tracked.filter((name) => !sources.includes(name) && !testsInside.includes(name))) expect(inScope(scope, file), file).toBe(false);
      // A test inside the scope is admitted by it, and protected all the same.
      for (const file of testsInside) {
        expect(inScope(scope, file), file).toBe(true);
        expect(result.protected, file).toContain(file);
      }

      const program = readFileSync(path.join(repo, "program.md"), "utf8");
      expect(program).toContain(
        `You may change only these paths (the scope in \`loop.yaml\`): ${scope.map((glob) => `\`${glob}\``).join(", ")}. Any change to another\npath`,
      );
      expect(program).toContain("is rejected and halts the loop\n(`blocked_path_modified`)");
      expect(program).not.toContain("In scope: the project's source code");

      const human = await init(repoWith(files), false);
      expect(human.out).toContain(`  scope: ${scope.join(", ")} (from ${from}) — review it in loop.yaml\n`);
    },
  );

  it("with no source to find, writes the scope commented out, warns that only the protected set applies, and the contract still loads", async () => {
    const files = { "main.c": "int main(void) { return 0; }\n", Makefile: "test:\n\t./run-tests\n", "tests/run.sh": "#!/bin/sh\n", "README.md": "# c\n" };
    const repo = repoWith(files);
    const { out } = await init(repo, true, "node agent.mjs");
    expect((JSON.parse(out) as { scope: unknown }).scope).toBeNull();
    const written = readFileSync(path.join(repo, "loop.yaml"), "utf8");
    expect(await prettier.check(written, { parser: "yaml" })).toBe(true);
    expect(written).toContain("# No scope: loopwarden init found no source that the project's own tooling declares");
    expect(written).toContain('# scope:\n#   - "src/**"\n');
    expect(parseYaml(written)).not.toHaveProperty("scope");
    const { contract } = validateContract(loadStarter(written), "loop.yaml");
    expect(contract.scope).toBeUndefined();
    expect(readFileSync(path.join(repo, "program.md"), "utf8")).toContain(
      "In scope: the project's source code, as much of it as the objective needs and no more.",
    );

    const human = await init(repoWith(files), false);
    expect(human.out).toContain(
      "  warning: no scope found: until you write one in loop.yaml, only the default protected set guards the check, and a change to any other file can be kept\n",
    );
  });
});
