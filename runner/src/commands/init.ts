import { existsSync } from "node:fs";
import { appendFile, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { parse as parseYaml } from "yaml";
import { formatList } from "#shared/format-list.js";
import { validateContract } from "../contract/contract-file.js";
import { UserError } from "../errors.js";
import { repoRoot } from "../process/git.js";
import { emitResult, type OutputMode } from "../output.js";
import { packageJsonScripts, selectProtectedFiles, trackedFiles } from "../evaluation/protected-files.js";
import { AGENT_PRESET_NAMES, agentPreset, type AgentPreset } from "./agent-presets.js";
import { detectTestGate, projectFacts, REPORT_DIR, type ProjectFacts, type StarterExec, type StarterGate } from "./init-runners.js";
import { starterGatesSummary, starterProgram } from "./init-program.js";
import { inferScope, type InferredScope } from "./init-scope.js";

/**
 * A YAML scalar for `text`, quoted the way prettier prints it, so that the written file passes
 * `prettier --check`: double quotes, unless the text holds a double quote and nothing that needs an
 * escape, which prettier prints in single quotes.
 */
export function yamlString(text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters need an escape, so stay double-quoted
  if (text.includes('"') && !/[\\\u0000-\u001f\u007f]/.test(text)) return `'${text.replaceAll("'", "''")}'`;
  return JSON.stringify(text);
}

/** A report path as a YAML scalar: plain when it is a simple path, quoted otherwise. */
const yamlPath = (file: string) => (/^[A-Za-z0-9_./-]+$/.test(file) ? file : yamlString(file));

/** The starter contract's objective, also the objective `program.md` gives the agent. */
const STARTER_OBJECTIVE = "make every test pass without weakening any test";

/** Comment lines, indented, each line its own `#` comment. */
const comments = (lines: readonly string[], indent: string) => lines.map((line) => `${indent}# ${line}`.trimEnd() + "\n").join("");

/** The starter gate's `tests` key with what it means, or, without a report, why it matters and how to get one. */
function reportLines(gate: StarterGate): string {
  if (gate.tests) {
    const [format, file] = "junit" in gate.tests ? ["JUnit XML", gate.tests.junit] : ["TAP", gate.tests.tap];
    const explained = comments(
      [
        `Per-test results: the ${format} report the command above writes, relative to the clone. Fixing`,
        "some of several failing tests counts as progress, and a candidate that loses or skips a test",
        "that t0 ran halts the loop (metric_integrity_violation).",
      ],
      "    ",
    );
    return `${explained}    tests: { ${"junit" in gate.tests ? "junit" : "tap"}: ${yamlPath(file)} }\n`;
  }
  const howTo =
    gate.advice.length > 0
      ? gate.advice
      : [
          "For per-test progress, have the command write a JUnit XML or TAP report and name it:",
          `tests: { junit: ${REPORT_DIR}/junit.xml }   (or { tap: PATH })`,
        ];
  return comments(["Exit code only: the gate is one test, so only a candidate that turns all of it green is progress.", ...howTo], "    ");
}

/** A gate command that installs the node dependencies first, as `detectTestGate` writes it: the install, then the rest. */
const NODE_INSTALL = /^(npm (?:ci|install) --no-audit --no-fund) && ([\s\S]+)$/;

/** Whether package.json declares any dependency, so that `npm install` has something to download. */
function hasDependencies(packageJson: string | null): boolean {
  try {
    const manifest = JSON.parse(packageJson ?? "null") as { dependencies?: unknown; devDependencies?: unknown } | null;
    const count = (field: unknown) => (typeof field === "object" && field !== null ? Object.keys(field).length : 0);
    return manifest !== null && count(manifest.dependencies) + count(manifest.devDependencies) > 0;
  } catch {
    return false;
  }
}

/**
 * The exec zone of a starter, and its gate as it runs there. The gates get no network by default. A
 * node project that obviously needs an install (a lockfile, or any dependency) gets it as `setup`,
 * which runs with network before the gates, and its gate (and the advice about it) loses the install
 * step it began with; an install with nothing to download stays in the gate. Cargo, and go with a
 * go.sum, download what they build with as they build, so their gates keep the host's network.
 */
export function starterExec(gate: StarterGate, facts: ProjectFacts): { gate: StarterGate; exec: StarterExec } {
  const install = NODE_INSTALL.exec(gate.run);
  if (install) {
    const [, step = "", rest = ""] = install;
    const lockfile = ["package-lock.json", "npm-shrinkwrap.json"].some((file) => facts.files.includes(file));
    if (!lockfile && !hasDependencies(facts.packageJson)) return { gate, exec: { network: "none" } };
    const advice = gate.advice.map((line) => line.replaceAll(`${step} && `, ""));
    return { gate: { ...gate, run: rest, advice }, exec: { network: "none", setup: step } };
  }
  const downloads =
    gate.runner === "cargo test" || gate.runner === "cargo nextest" || (gate.runner?.startsWith("go") === true && facts.files.includes("go.sum"));
  return { gate, exec: { network: downloads ? "host" : "none" } };
}

/** The starter's `exec` section, with what it means; empty without one (the gates then get the host's network). */
function execLines(exec: StarterExec | undefined, gate: StarterGate): string {
  if (!exec) return "";
  let explained: string[];
  if (exec.setup) {
    explained = [
      "Each evaluation's clone is confined like the agent. setup runs there first, with network, to",
      "install the dependencies; then the gates run without network (network: none), so no test",
      "reaches the outside.",
    ];
  } else if (exec.network === "host") {
    const [tool, what, vendor] = gate.runner?.startsWith("cargo") ? ["cargo", "crates", "cargo vendor"] : ["go", "modules", "go mod vendor"];
    explained = [
      `The gates run with network (network: host): ${tool} downloads the ${what} it builds with. For gates`,
      `without network, vendor them (${vendor}), commit them, and set network: none.`,
    ];
  } else {
    explained = [
      "The gates run without network (network: none), so no test reaches the outside. A gate that must",
      "download something first (dependencies, a toolchain) needs it in a setup step: a command that",
      "runs with network in each evaluation's clone before the gates.",
    ];
  }
  const setup = exec.setup ? `  setup: ${yamlString(exec.setup)}\n` : "";
  return `\n${comments(explained, "")}exec:\n  network: ${exec.network}\n${setup}`;
}

/**
 * The starter's `scope` (DESIGN §6.4), every glob quoted, with how init found it and what it means; or,
 * when none was found, the key commented out with why that matters.
 */
function scopeLines(scope: InferredScope): string {
  if (scope.globs.length === 0) {
    const found =
      scope.how.length > 0
        ? [`No scope: ${scope.how.join("; ")}.`]
        : [
            "No scope: loopwarden init found no source that the project's own tooling declares (package.json",
            "main/bin/exports/files, src/ or lib/, Python import packages, Cargo's src/, Go packages).",
          ];
    return comments(
      [
        ...found,
        "Until you write one, only the default protected set guards the check, so a change to any other",
        "file (a dotfile, a tool's configuration) can be kept. List the only paths the agent may change:",
        "scope:",
        '  - "src/**"',
      ],
      "",
    );
  }
  const explained = comments(
    [
      "The scope: the only paths the agent may change (add, edit or delete), found by loopwarden init from:",
      ...scope.how.map((line) => `- ${line}`),
      "A candidate that changes any other path (a dotfile, a tool's configuration, a new top-level",
      "directory) halts the loop with blocked_path_modified. Tests inside the scope stay protected: the",
      "protected files are checked as well. Review it, and widen it only by your own decision (a changed",
      "contract is a new loop).",
    ],
    "",
  );
  return `${explained}scope:\n${scope.globs.map((glob) => `  - ${yamlString(glob)}\n`).join("")}`;
}

/** The starter's `agent` section: a preset's command, allowlist and variables, or a raw command with no network. */
function agentLines(agent: string | AgentPreset): string {
  const intro = comments(["The agent runs once per iteration, confined, in a fresh clone of the best commit so far: it", "makes one change, then exits."], "");
  if (typeof agent !== "string") {
    const about = comments(
      [
        `Preset "${agent.name}" (${agent.title}), from loopwarden init --agent ${agent.name}.`,
        "It runs confined: its network reaches only the hosts in network.allow, through loopwarden's",
        "proxy, and it gets only the variables named in env, from the runner's environment (set them",
        "there; never write a key here).",
        ...agent.notes,
      ],
      "  ",
    );
    const list = (items: readonly string[], indent: string) => items.map((item) => `${indent}- ${item}\n`).join("");
    return `${intro}agent:
${about}  run: ${yamlString(agent.run)}
  timeout: 20m
  network:
    allow:
${list(agent.allow, "      ")}  env:
${list(agent.env, "    ")}`;
  }
  const example = agent ? [] : ['e.g. claude -p "Read program.md, make one focused change, then stop." --dangerously-skip-permissions'];
  const network = comments(
    [
      "No network: agent.network is none when absent. For a model's API, allow its host and pass its",
      "key by name, e.g. network: { allow: [api.anthropic.com:443] } and env: [ANTHROPIC_API_KEY].",
      `loopwarden init --agent NAME writes all three for ${AGENT_PRESET_NAMES.slice(0, -1).join(", ")} and ${AGENT_PRESET_NAMES.at(-1) ?? ""}.`,
    ],
    "  ",
  );
  return `${intro}agent:
${comments(example, "  ")}  run: ${yamlString(agent)}
  timeout: 20m
${network}`;
}

/**
 * The commented starter contract for check_fixpoint mode. Every comment is on a line of its own, above
 * what it explains, so that formatters (prettier) leave the file as it is. `agent` is a preset or a raw
 * command (empty: left for the user to fill in); without `exec`, no exec section is written; without
 * `scope` (or with no globs in it), the scope is written commented out, with why it matters.
 */
export function starterContract(options: { name: string; gate: StarterGate; agent: string | AgentPreset; exec?: StarterExec; scope?: InferredScope }): string {
  const { gate } = options;
  const runComment = gate.run ? [] : ["Your test command, e.g. npm ci && npm test."];
  // With a report, the advice is about the command (above `run`); without one, it says how to get a report.
  const before = gate.tests ? comments(gate.advice, "    ") : "";
  const clone = options.exec?.setup
    ? ["git tracks (no node_modules/, no .venv/): exec.setup below installs the dependencies. The first", "hard failure stops the rest."]
    : ["git tracks (no node_modules/, no .venv/): each command installs what it needs. The first hard", "failure stops the rest."];
  return `# loopwarden contract (DESIGN §5). Validated strictly: an unknown key is an error, never ignored.
# Keep it committed: its hash is pinned when a loop starts, and a changed contract is a new loop.
name: ${yamlString(options.name)}
# The loop succeeds when every gate passes, with no passing test lost on the way.
mode: check_fixpoint
objective: ${STARTER_OBJECTIVE}

${scopeLines(options.scope ?? { globs: [], how: [] })}
# Gates run in order in a fresh clone of each candidate, outside this repository, that holds only what
${comments(clone, "")}gates:
  - name: test
${comments(runComment, "    ")}${before}    run: ${yamlString(gate.run)}
    timeout: 10m
${reportLines(gate)}  # A soft gate is judged on a METRIC line its command prints ("METRIC lint_errors=0"), not on
  # its exit code, and never stops the gates after it:
  # - name: lint
  #   run: ./scripts/lint-count.sh
  #   soft: { metric: lint_errors, max: 0 }
${execLines(options.exec, gate)}
stop:
  # One iteration = one agent run and the verdict on its change.
  max_iterations: 50
  # Halt after this many iterations in a row without a promotion.
  no_progress: 10

${agentLines(options.agent)}`;
}

/** A non-empty stand-in for a command the starter leaves for the user to fill in, so it validates. */
const PLACEHOLDER = "loopwarden-init-placeholder";

/**
 * The protected files of a starter contract in a repository whose tracked files are `tracked` and whose
 * tracked root package.json has `scripts` (`selectProtectedFiles`, with the contract file counted as
 * tracked: it is about to be committed). The contract is validated first, so a starter that would not
 * load is an error here and now; an empty gate command names no file, and only the default globs and
 * the contract file count for it.
 */
export function starterProtectedFiles(
  contractText: string,
  contractFile: string,
  tracked: readonly string[],
  scripts: Readonly<Record<string, string>> = {},
): string[] {
  const input = parseYaml(contractText) as { gates?: { run?: string }[]; agent?: { run?: string } };
  const blanks = new Set<number>();
  input.gates?.forEach((gate, index) => {
    if (gate.run === "") {
      blanks.add(index);
      gate.run = PLACEHOLDER;
    }
  });
  if (input.agent?.run === "") input.agent.run = PLACEHOLDER;
  const { contract } = validateContract(input, contractFile);
  const judged = { ...contract, gates: contract.gates.filter((_, index) => !blanks.has(index)) };
  return selectProtectedFiles(judged, contractFile, [...new Set([...tracked, contractFile])], scripts);
}

/** A few of `files` for one line of output: the first three, then an ellipsis. */
function preview(files: readonly string[]): string {
  return files.length <= 3 ? files.join(", ") : `${files.slice(0, 3).join(", ")}, …`;
}

/** What init says about the gate it wrote: the runner, and where per-test results come from, if anywhere. */
function gateLine(gate: StarterGate, contract: string): string | null {
  if (gate.runner === null) return null;
  if (!gate.tests) return `  test gate: ${gate.runner}, exit code only (${contract} says how to get per-test results)`;
  return `  test gate: ${gate.runner}, per-test results from ${"junit" in gate.tests ? gate.tests.junit : gate.tests.tap}`;
}

/** What init says about the agent preset it wrote: the tool, the hosts it may reach, and the variables it needs. */
function presetLine(preset: AgentPreset): string {
  const unset = preset.env.filter((name) => !process.env[name]);
  const needs = `give the runner ${preset.env.join(", ")}${unset.length ? ` (not set in this shell: ${unset.join(", ")})` : ""}`;
  return `  agent: ${preset.title} (preset ${preset.name}), confined to ${preset.allow.join(", ")}; ${needs}`;
}

/**
 * `loopwarden init`: writes a commented starter `loop.yaml` with a gate for the project's test runner
 * (with a test report when the runner can write one) that runs without network, after a setup step
 * when the project has dependencies to install (`starterExec`), and a scope, the paths the project's
 * own tooling declares as its source (`inferScope`; commented out, with a warning, when none is
 * found); writes the agent's `program.md` (unless one exists: it is left as it is), naming the scope
 * and listing the files the guards protect; keeps `.loopwarden/` out of git. `agent` is a preset's
 * name (`agent-presets.ts`: its command, allowlist and variables) or a raw command, which gets no
 * network.
 */
export async function initCommand(options: OutputMode & { cwd: string; mode: string; agent?: string; contract?: string }): Promise<number> {
  if (options.mode !== "check_fixpoint") {
    throw new UserError(
      `init writes check_fixpoint starters only; for ${options.mode}, run init, then set mode and add ${options.mode === "optimize" ? "metric" : "tasks"} in loop.yaml (docs/contract.md)`,
      2,
    );
  }
  const repo = await repoRoot(options.cwd);
  const file = path.resolve(repo, options.contract ?? "loop.yaml");
  const shown = path.relative(repo, file);
  if (existsSync(file)) throw new UserError(`${shown} already exists; edit it, or remove it to start over`);
  const facts = await projectFacts(repo);
  const { gate, exec } = starterExec(detectTestGate(facts), facts);
  const name = path.basename(repo);
  const preset = options.agent === undefined ? undefined : agentPreset(options.agent);
  // The scope comes from what git tracks, as the clones the candidates are judged in hold nothing else.
  const tracked = await trackedFiles(repo);
  const pyproject = tracked.includes("pyproject.toml") ? await readFile(path.join(repo, "pyproject.toml"), "utf8").catch(() => null) : null;
  const scope = inferScope({ tracked, packageJson: tracked.includes("package.json") ? facts.packageJson : null, pyproject });
  const contractText = starterContract({ name, gate, agent: preset ?? options.agent ?? "", exec, scope });
  // Computed before anything is written: a starter that does not validate leaves nothing behind. The
  // guard follows `npm test` into package.json's scripts only when git tracks package.json; so does this.
  const scripts = tracked.includes("package.json") ? packageJsonScripts(facts.packageJson) : {};
  const protectedList = starterProtectedFiles(contractText, shown, tracked, scripts);
  await writeFile(file, contractText);

  const programFile = path.join(repo, "program.md");
  const programExists = existsSync(programFile);
  if (!programExists) {
    await writeFile(
      programFile,
      starterProgram({
        name,
        objective: STARTER_OBJECTIVE,
        gatesSummary: starterGatesSummary(gate, shown, exec),
        contract: shown,
        protectedFiles: protectedList,
        scope: scope.globs,
      }),
    );
  }
  const program = programExists ? null : "program.md";

  const gitignore = path.join(repo, ".gitignore");
  const ignored = await readFile(gitignore, "utf8").catch(() => "");
  const hasEntry = ignored.split("\n").some((line) => [".loopwarden", ".loopwarden/", "/.loopwarden/"].includes(line.trim()));
  if (!hasEntry) await appendFile(gitignore, `${ignored === "" || ignored.endsWith("\n") ? "" : "\n"}.loopwarden/\n`);

  const todo = [...(gate.run ? [] : ["gates[0].run (your test command)"]), ...(options.agent ? [] : ["agent.run (your agent command)"])];
  const added = [shown, ...(program ? [program] : []), ".gitignore"].join(" ");
  const count = `${protectedList.length} file${protectedList.length === 1 ? "" : "s"}`;
  const where = program ? "see program.md" : "program.md was left as it is: tell the agent they are off limits";
  const gateSaid = gateLine(gate, shown);
  const scopeSaid =
    scope.globs.length > 0
      ? `  scope: ${formatList(scope.globs)} (from ${scope.how.join("; ")}) — review it in ${shown}${program ? "" : ", and tell the agent in program.md"}`
      : `  warning: no scope found${scope.how.length > 0 ? ` (${scope.how.join("; ")})` : ""}: until you write one in ${shown}, only the default protected set guards the check, and a change to any other file can be kept`;
  emitResult(options, { status: "ok", contract: shown, program, todo, protected: protectedList, scope: scope.globs.length > 0 ? scope.globs : null }, [
    `wrote ${shown}${program ? ` and ${program}` : ""}${hasEntry ? "" : ", and added .loopwarden/ to .gitignore"}`,
    ...(program ? [] : ["  program.md already exists: left as it is"]),
    ...(gateSaid ? [gateSaid] : []),
    ...(exec.setup ? [`  setup: ${exec.setup}, with network, before the gates (which run without)`] : []),
    ...(preset ? [presetLine(preset)] : []),
    scopeSaid,
    `  protected: ${count} (${preview(protectedList)}) — ${where}`,
    ...(todo.length ? [`  fill in: ${todo.join(", ")}`] : []),
    `  then commit (git add ${added} && git commit -m "Add loopwarden contract") and start: loopwarden run`,
  ]);
  return 0;
}
