import { readdir, readFile, realpath } from "node:fs/promises";
import path from "node:path";
import type { TestReportSource } from "#shared/wire/contract.js";
import { isWithin } from "../evaluation/environment.js";
import { executableIn } from "../process/processes.js";
import { trackedFiles } from "../evaluation/protected-files.js";

// Which test runner a project uses, and the starter gate `loopwarden init` writes for it. A gate with a
// test report makes every fixed test count and turns the collected-set guard on, so init writes one
// for every runner it can get a report out of, and says honestly when it cannot (jest without
// jest-junit, `go test` without gotestsum, cargo without a nextest JUnit profile).
//
// Gates run in a fresh clone outside the repository, holding only what git tracks, with an environment
// that names no path inside the working tree: no node_modules/, no .venv/, no binary found through a
// PATH entry inside the tree. So every command installs its dependencies itself, and the report path
// is relative to the clone (the runner makes its directory and removes a stale one before the gate).

/** Where a starter gate's report goes, relative to the clone: under the runner's own ignored directory. */
export const REPORT_DIR = ".loopwarden/out";

const JUNIT = `${REPORT_DIR}/junit.xml`;
const TAP = `${REPORT_DIR}/tests.tap`;

/** The test runners init recognises, as its output names them. */
export type TestRunner = "vitest" | "jest" | "node --test" | "npm test" | "pytest" | "gotestsum" | "go test" | "cargo nextest" | "cargo test";

/** What init knows about a project when it guesses the gate: all `detectTestGate` looks at. */
export interface ProjectFacts {
  /** Paths relative to the repository root (tracked files, and the files at the root and in tests/). */
  files: readonly string[];
  /** The text of the root package.json, or null when there is none. */
  packageJson: string | null;
  /** The text of .config/nextest.toml, or null when there is none. */
  nextestConfig: string | null;
  /** The optional tools found on PATH outside the working tree (`gotestsum`, `cargo-nextest`). */
  onPath: ReadonlySet<string>;
}

/** The starter gate for a project: its command, the report it writes, and what to say about it. */
export interface StarterGate {
  /** The runner recognised, or null when there is no telling (`run` is then empty). */
  runner: TestRunner | null;
  /** The gate's command; empty when the user must fill it in. */
  run: string;
  /** The report the command writes, when it writes one init can name. */
  tests?: TestReportSource;
  /** Comment lines for loop.yaml: what the command assumes, or, without a report, how to get one. */
  advice: string[];
}

/** The optional tools init looks for on PATH. */
export const OPTIONAL_TOOLS = ["gotestsum", "cargo-nextest"] as const;

interface Manifest {
  scripts?: Record<string, unknown>;
  dependencies?: Record<string, unknown>;
  devDependencies?: Record<string, unknown>;
}

// `npm init` writes this test script; it is no test command.
const NPM_PLACEHOLDER = /^echo "Error: no test specified" && exit 1$/;
// A shell operator in a test script: the script is more than one command, so it cannot be rewritten.
const SHELL_OPERATOR = /[;&|<>`]|\$\(/;

function readManifest(text: string | null): Manifest | null {
  if (text === null) return null;
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as Manifest) : null;
  } catch {
    return null;
  }
}

const names = (tool: string) => new RegExp(`(^|[\\s/])${tool}(\\s|$)`);

/** The words of a `node --test …` script after `--test`, less any reporter flags of its own; null when it is not one. */
export function nodeTestArgs(script: string): string[] | null {
  const match = /^node\s+--test(?:\s+(.*))?$/s.exec(script.trim());
  if (!match) return null;
  const rest = match[1] ?? "";
  if (SHELL_OPERATOR.test(rest)) return null;
  const words = rest.match(/(?:[^\s"']+|"[^"]*"|'[^']*')+/g) ?? [];
  const kept: string[] = [];
  for (let index = 0; index < words.length; index++) {
    const word = words[index] ?? "";
    if (/^--test-reporter(-destination)?=/.test(word)) continue;
    if (/^--test-reporter(-destination)?$/.test(word)) {
      index++;
      continue;
    }
    kept.push(word);
  }
  return kept;
}

/** The node project's gate, or null when package.json names no test command and no known runner. */
function nodeGate(manifest: Manifest, files: ReadonlySet<string>): StarterGate | null {
  const rawScript = manifest.scripts?.test;
  const script = typeof rawScript === "string" && !NPM_PLACEHOLDER.test(rawScript.trim()) ? rawScript.trim() : "";
  const dependencies = { ...manifest.dependencies, ...manifest.devDependencies };
  const has = (name: string) => Object.hasOwn(dependencies, name);
  const install = files.has("package-lock.json") || files.has("npm-shrinkwrap.json") ? "npm ci --no-audit --no-fund" : "npm install --no-audit --no-fund";

  const vitest = () => ({
    runner: "vitest" as const,
    run: `${install} && npx vitest run --reporter=default --reporter=junit --outputFile.junit=${JUNIT}`,
    tests: { junit: JUNIT },
    advice: [],
  });
  const jest = (): StarterGate =>
    has("jest-junit")
      ? {
          runner: "jest",
          run: `${install} && JEST_JUNIT_OUTPUT_FILE=${JUNIT} npx jest --ci --reporters=default --reporters=jest-junit`,
          tests: { junit: JUNIT },
          advice: [],
        }
      : {
          runner: "jest",
          run: script ? `${install} && npm test` : `${install} && npx jest --ci`,
          advice: [
            "jest writes no JUnit or TAP report of its own. For per-test progress, add jest-junit",
            "(npm install --save-dev jest-junit), then use",
            `  run: "${install} && JEST_JUNIT_OUTPUT_FILE=${JUNIT} npx jest --ci --reporters=default --reporters=jest-junit"`,
            `  tests: { junit: ${JUNIT} }`,
          ],
        };

  if (script && names("vitest").test(script)) return vitest();
  if (script && names("jest").test(script)) return jest();
  const nodeArgs = script ? nodeTestArgs(script) : null;
  if (nodeArgs) {
    // spec on stdout keeps the gate's log readable; TAP in the file gives the per-test ids.
    const run = ["node --test --test-reporter=spec --test-reporter-destination=stdout", `--test-reporter=tap --test-reporter-destination=${TAP}`, ...nodeArgs];
    return { runner: "node --test", run: `${install} && ${run.join(" ")}`, tests: { tap: TAP }, advice: [] };
  }
  if (has("vitest")) return vitest();
  if (has("jest")) return jest();
  if (!script) return null;
  return {
    runner: "npm test",
    run: `${install} && npm test`,
    advice: [
      "init does not know this test runner. For per-test progress, have the command write a",
      `JUnit XML or TAP report to ${REPORT_DIR}/ and name it here, e.g.`,
      `  tests: { junit: ${JUNIT} }`,
    ],
  };
}

const PYTEST_FILES = ["pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", "conftest.py"];

/** A bare TOML string value (`"…"` or `'…'`), or null. */
function tomlString(text: string): string | null {
  const match = /^\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)')/.exec(text);
  if (!match) return null;
  return match[2] ?? (match[1] ?? "").replace(/\\(.)/g, "$1");
}

/**
 * The JUnit report a nextest configuration (.config/nextest.toml) asks for: the profile that has one
 * (`ci` when several do) and the report's path relative to the workspace root
 * (`<store.dir>/<profile>/<junit.path>`, store.dir defaulting to target/nextest); null when no profile
 * configures JUnit. Reads the few TOML forms that can say so: `[profile.ci.junit] path = "…"`,
 * `[profile.ci] junit.path = "…"` and `junit = { path = "…" }`.
 */
export function nextestJunit(config: string): { profile: string; report: string } | null {
  const reports = new Map<string, string>();
  let storeDir = "target/nextest";
  let table: string[] = [];
  for (const raw of config.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const header = /^\[\s*([^\]]+?)\s*\]/.exec(line);
    if (header) {
      table = (header[1] ?? "").split(".").map((part) => part.trim().replace(/^["']|["']$/g, ""));
      continue;
    }
    const pair = /^([A-Za-z0-9_.\-"' ]+?)\s*=\s*(.*)$/.exec(line);
    if (!pair) continue;
    const key = [...table, ...(pair[1] ?? "").split(".").map((part) => part.trim().replace(/^["']|["']$/g, ""))];
    const value = pair[2] ?? "";
    const inline = /^\{.*\bpath\s*=\s*(.*)$/.exec(value);
    const at = (...suffix: string[]) => key.length === suffix.length + 2 && key[0] === "profile" && suffix.every((part, index) => key[index + 2] === part);
    const profile = key[1];
    if (profile !== undefined && at("junit", "path")) {
      const file = tomlString(value);
      if (file) reports.set(profile, file);
    } else if (profile !== undefined && at("junit") && inline) {
      const file = tomlString(inline[1] ?? "");
      if (file) reports.set(profile, file);
    } else if (key.length === 2 && key[0] === "store" && key[1] === "dir") {
      storeDir = tomlString(value) ?? storeDir;
    }
  }
  const profile = reports.has("ci") ? "ci" : [...reports.keys()][0];
  const file = profile === undefined ? undefined : reports.get(profile);
  if (profile === undefined || file === undefined) return null;
  const report = path.posix.normalize(path.posix.join(storeDir, profile, file));
  // A report outside the workspace (an absolute store.dir) cannot be named relative to the clone.
  if (path.posix.isAbsolute(report) || report.startsWith("../")) return null;
  return { profile, report };
}

const NEXTEST_ADVICE = [
  "add a JUnit profile to .config/nextest.toml (and commit it):",
  "  [profile.ci]",
  "  fail-fast = false",
  "  [profile.ci.junit]",
  '  path = "junit.xml"',
  "then use",
  "  run: cargo nextest run --config-file .config/nextest.toml --profile ci --no-fail-fast",
  "  tests: { junit: target/nextest/ci/junit.xml }",
];

/**
 * The starter gate for a project (pure: everything it reads is in `facts`). A package.json test script
 * or known runner comes first (vitest, jest, node's test runner, else `npm test`), then pytest, cargo
 * and go; `{ runner: null, run: "" }` when nothing is recognised.
 */
export function detectTestGate(facts: ProjectFacts): StarterGate {
  const files = new Set(facts.files);
  const manifest = readManifest(facts.packageJson);
  const node = manifest ? nodeGate(manifest, files) : null;
  if (node) return node;

  if (PYTEST_FILES.some((file) => files.has(file)) || facts.files.some((file) => /^tests\/(?:.+\/)?test_[^/]+\.py$/.test(file))) {
    return {
      runner: "pytest",
      run: `python3 -m pytest -q --junitxml=${JUNIT}`,
      tests: { junit: JUNIT },
      advice: [
        "The clone has no virtualenv of yours (no .venv/): python3 must already have pytest and the",
        "project's dependencies, or the command must install them first.",
      ],
    };
  }

  if (files.has("Cargo.toml")) {
    if (facts.onPath.has("cargo-nextest")) {
      const junit = facts.nextestConfig === null ? null : nextestJunit(facts.nextestConfig);
      if (junit) {
        // Naming the configuration file in the command makes it a protected file (a judging command's file).
        return {
          runner: "cargo nextest",
          run: `cargo nextest run --config-file .config/nextest.toml --profile ${junit.profile} --no-fail-fast`,
          tests: { junit: junit.report },
          advice: [],
        };
      }
      return {
        runner: "cargo nextest",
        run: "cargo nextest run --no-fail-fast",
        advice: ["nextest writes JUnit only when a profile asks for it. For per-test progress,", ...NEXTEST_ADVICE],
      };
    }
    return {
      runner: "cargo test",
      run: "cargo test",
      advice: [
        "cargo test writes no report. For per-test progress, install cargo-nextest",
        "(cargo install cargo-nextest --locked), " + (NEXTEST_ADVICE[0] ?? ""),
        ...NEXTEST_ADVICE.slice(1),
      ],
    };
  }

  if (files.has("go.mod")) {
    if (facts.onPath.has("gotestsum")) {
      return { runner: "gotestsum", run: `gotestsum --junitfile ${JUNIT} -- ./...`, tests: { junit: JUNIT }, advice: [] };
    }
    return {
      runner: "go test",
      run: "go test ./...",
      advice: [
        "go test writes no report. For per-test progress, install gotestsum",
        "(go install gotest.tools/gotestsum@latest), then use",
        `  run: gotestsum --junitfile ${JUNIT} -- ./...`,
        `  tests: { junit: ${JUNIT} }`,
      ],
    };
  }

  return { runner: null, run: "", advice: [] };
}

/**
 * The optional tools on `PATH` that a gate could use: only absolute entries outside the working tree
 * count, since a gate's environment keeps no PATH entry inside it.
 */
export async function toolsOnPath(repo: string, pathVariable = process.env.PATH ?? ""): Promise<Set<string>> {
  const trees = [repo, await realpath(repo).catch(() => repo)];
  const dirs = pathVariable.split(path.delimiter).filter((dir) => path.isAbsolute(dir) && !trees.some((tree) => isWithin(path.resolve(dir), tree)));
  const found = new Set<string>();
  for (const tool of OPTIONAL_TOOLS) if ((await executableIn(dirs, tool)) !== null) found.add(tool);
  return found;
}

/** The facts `detectTestGate` needs about the repository at `repo`, read from its files and PATH. */
export async function projectFacts(repo: string): Promise<ProjectFacts> {
  const listing = async (dir: string) =>
    (await readdir(path.join(repo, dir), { withFileTypes: true }).catch(() => []))
      .filter((entry) => entry.isFile())
      .map((entry) => (dir === "" ? entry.name : `${dir}/${entry.name}`));
  // Tracked files are what the clone holds; the root and tests/ listings add what is not committed yet.
  const files = [...new Set([...(await trackedFiles(repo).catch(() => [])), ...(await listing("")), ...(await listing("tests"))])];
  const read = (file: string) => readFile(path.join(repo, file), "utf8").catch(() => null);
  return {
    files,
    packageJson: await read("package.json"),
    nextestConfig: await read(".config/nextest.toml"),
    onPath: await toolsOnPath(repo),
  };
}

/**
 * Where a starter's gates run (the exec zone, DESIGN §6.7): without network unless the project's gates
 * download what they build with, and with a `setup` step, run with network before them, when the
 * project has dependencies to install.
 */
export interface StarterExec {
  network: "none" | "host";
  /** exec.setup: installs the dependencies in each evaluation's clone, with network, before the gates. */
  setup?: string;
}
