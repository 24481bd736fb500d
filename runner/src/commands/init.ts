import { existsSync } from "node:fs";
import { appendFile, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { DEFAULT_PROTECTED_GLOBS } from "../../../shared/engine/index.js";
import { UserError } from "../errors.js";
import { repoRoot } from "../git.js";
import { emitResult, type OutputMode } from "../output.js";

/** A guess at the project's test command, for the starter contract; empty when there is no telling. */
async function guessTestCommand(repo: string): Promise<string> {
  const manifest = await readFile(path.join(repo, "package.json"), "utf8").catch(() => null);
  if (manifest) {
    const scripts = (JSON.parse(manifest) as { scripts?: Record<string, string> }).scripts ?? {};
    if (scripts.test) {
      // The clone holds only what git tracks, so dependencies are installed there first.
      return existsSync(path.join(repo, "package-lock.json")) ? "npm ci --no-audit --no-fund && npm test" : "npm install --no-audit --no-fund && npm test";
    }
  }
  if (existsSync(path.join(repo, "pyproject.toml")) || existsSync(path.join(repo, "pytest.ini"))) return "python3 -m pytest -q";
  if (existsSync(path.join(repo, "Cargo.toml"))) return "cargo test";
  if (existsSync(path.join(repo, "go.mod"))) return "go test ./...";
  return "";
}

const yamlString = (text: string) => (text === "" ? '""' : JSON.stringify(text));

/** The starter contract's objective, also the objective `program.md` gives the agent. */
const STARTER_OBJECTIVE = "make every test pass without weakening any test";

/** The commented starter contract for check_fixpoint mode. */
export function starterContract(options: { name: string; test: string; agent: string }): string {
  return `# loopwarden contract (DESIGN §5). Validated strictly: an unknown key is an error, never ignored.
# Keep it committed: its hash is pinned when a loop starts, and a changed contract is a new loop.
name: ${yamlString(options.name)}
mode: check_fixpoint        # the loop succeeds when every gate passes, with no passing test lost on the way
objective: ${STARTER_OBJECTIVE}

gates:                      # run in order in a fresh clone of each candidate; the first hard failure stops the rest
  - name: test
    run: ${yamlString(options.test)}${options.test ? "" : "   # your test command, e.g. npm ci && npm test"}
    timeout: 10m
    # With per-test ids, fixing some of several failing tests counts as progress:
    # tests: { junit: .loopwarden/out/junit.xml }    # or { tap: PATH }, written by the command above
  # - name: lint            # a soft gate is judged on a METRIC line its command prints ("METRIC lint_errors=0"),
  #   run: ./scripts/lint-count.sh        # not on its exit code, and never stops the gates after it
  #   soft: { metric: lint_errors, max: 0 }

stop:
  max_iterations: 50        # one iteration = one agent run and the verdict on its change
  no_progress: 10           # halt after this many iterations in a row without a promotion

agent:                      # runs in your working tree once per iteration; make one change, then exit
  run: ${yamlString(options.agent)}${options.agent ? "" : "   # e.g. claude -p \"Read program.md, make one focused change, then stop.\" --dangerously-skip-permissions"}
  timeout: 20m
`;
}

const code = (text: string) => `\`${text}\``;

/**
 * The starter `program.md`: what the agent is told to do in each run, in the spirit of autoloop's
 * program.md — the objective, the files in scope and off limits, how to read the last verdict and
 * the history (`LOOPWARDEN_LAST_VERDICT`, `LOOPWARDEN_HISTORY`), one focused change per run, never a
 * direction already rejected, and the report it may write (`LOOPWARDEN_AGENT_REPORT`).
 */
export function starterProgram(options: { name: string; objective: string; gatesSummary: string; contract?: string }): string {
  const contract = options.contract ?? "loop.yaml";
  const globs = (patterns: readonly string[]) => patterns.map(code).join(", ");
  const isTest = (glob: string) => /test|spec/.test(glob) && !glob.includes("lock");
  const isCi = (glob: string) => glob.startsWith(".github/") || glob.startsWith(".ci/");
  const tests = DEFAULT_PROTECTED_GLOBS.filter(isTest);
  const ci = DEFAULT_PROTECTED_GLOBS.filter(isCi);
  const lockfiles = DEFAULT_PROTECTED_GLOBS.filter((glob) => !isTest(glob) && !isCi(glob));
  return `# ${options.name}: instructions for the agent

<!-- Written by \`loopwarden init\` for the agent command in ${contract} (agent.run), which should tell
     the agent to read this file. Adapt it to your project (name the files to work on), and commit it
     with ${contract}. -->

You are the agent of a loopwarden loop. Each time you are run, you make **one focused change** to this
repository and stop. loopwarden then commits your working tree, runs the gates on that commit in a
fresh clone, and its coordinator, not you, decides whether the change is kept or reverted.

## Objective

${options.objective}

## How a change is judged

The gates of ${code(contract)}, in order (as they were when this file was written; ${code(contract)} is
the reference):

${options.gatesSummary}

Each gate also counts as one test. A change is **promoted** when every test that passed before it still
passes and fewer tests fail: it stays, and the next run starts from it. Otherwise it is **rejected**:
the working tree is reset to the best commit so far, and your edits live on only as a line in the
history. The loop stops when every gate passes, after \`stop.max_iterations\` runs, or after
\`stop.no_progress\` runs in a row without a promotion.

## Files

In scope: the project's source code, as much of it as the objective needs and no more.

Off limits: never create, edit, rename or delete

- ${code(contract)}: the loop's contract; it is pinned by its hash, and a changed contract is another loop
- tests: ${globs(tests)}; fix the code, never the test that shows it is broken, and never skip, delete or
  weaken a test
- CI configuration: ${globs(ci)}
- lockfiles: ${globs(lockfiles)}; add no dependencies
- \`program.md\` (this file) and \`.loopwarden/\` (the runner's state)

The contract, the tests, the CI configuration and the lockfiles are checked by the coordinator, not
left to you: a candidate that changes one of them is rejected and halts the loop
(\`blocked_path_modified\`), and so does one whose test suite lost a test
(\`metric_integrity_violation\`), whatever the tests say.

## First, read the last verdict and the history

Failures are data: read them before you change anything.

- \`$LOOPWARDEN_LAST_VERDICT\` is the path of a JSON file holding the verdict on the previous candidate
  (\`null\` before the first):
  \`{ "candidate_id", "decision", "reason", "detail", "failing_before", "failing_after", "regressed", "failing_tests" }\`.
  \`decision\` is \`promoted\` or \`rejected\`; \`reason\` says why: \`fewer_failures\`, \`no_improvement\`,
  \`regressed\` (it broke the tests listed in \`regressed\`), \`guard_violated\` (it touched a protected
  path or lost tests), \`no_change\` (it changed nothing) or \`agent_failed\` (the agent exited
  non-zero or timed out); \`failing_tests\` are the tests that failed on it.
- \`$LOOPWARDEN_HISTORY\` is the path of a JSONL file, one line per earlier candidate, oldest first:
  \`{ "candidate_id", "parent", "status", "reason", "detail", "diff_summary" }\`, where \`diff_summary\`
  names the files the change touched (e.g. \`src/parse.ts +3 -1\`), and \`description\` is what that
  run said it tried.

For example: \`cat "$LOOPWARDEN_LAST_VERDICT"; tail -n 20 "$LOOPWARDEN_HISTORY"\`. \`LOOPWARDEN_ITERATION\`
holds the number of this run (from 1) and \`LOOPWARDEN_LOOP_ID\` the loop's id.

## Each run

1. Read the last verdict and the history.
2. Choose one failing test, or one idea, to work on. **Do not retry a direction that was rejected**:
   when the history shows a rejected change like the one you have in mind (the same files in
   \`diff_summary\`, the same idea in \`description\`), try something else.
3. Make one focused change: the smallest edit that can turn a failing test green, with no refactoring,
   reformatting or renaming beyond it.
4. Run the tests yourself if that helps (and remove what they write that git would pick up); the
   verdict comes from the gates either way.
5. Leave the change in the working tree, uncommitted: do not commit, stash, reset or switch branches.
   The runner commits it.
6. Write your report (below), then stop, with exit status 0. A non-zero exit, or running past
   \`agent.timeout\`, rejects the run as \`agent_failed\`; three such runs in a row stop the loop.

## Your report

Write a JSON file at the path in \`$LOOPWARDEN_AGENT_REPORT\`; every field is optional:

\`\`\`json
{
  "agent": { "provider": "…", "model": "…", "version": "…" },
  "sampling": { "temperature": 0.2 },
  "cost": { "usd": 0.41, "input_tokens": 52000, "output_tokens": 3100 },
  "context_files": ["src/parse.ts", "program.md"],
  "description": "one line: what this change tries"
}
\`\`\`

- \`description\`: one line saying what you tried; it becomes your line in the history the next runs read.
- \`context_files\`: the files of the repository you read, relative to its root.
- \`cost\`: what this run cost, when you know it; it counts against the loop's budget.
- An unknown key (\`sampling\` takes any), or a value of the wrong type, makes the report invalid, and
  it is not recorded.
`;
}

/** The starter contract's one gate, as `program.md` describes it. */
function starterGatesSummary(test: string, contract: string): string {
  return test
    ? `1. \`test\`: \`${test}\` (timeout 10m)`
    : `1. \`test\`: the test command in ${code(contract)} (\`gates[0].run\`, still to be filled in)`;
}

/**
 * `loopwarden init`: writes a commented starter `loop.yaml` and the agent's `program.md` (unless one
 * exists: it is left as it is), and keeps `.loopwarden/` out of git.
 */
export async function initCommand(options: OutputMode & { cwd: string; mode: string; agent?: string; contract?: string }): Promise<number> {
  if (options.mode !== "check_fixpoint") {
    throw new UserError(
      `init writes check_fixpoint starters only; for ${options.mode}, run init, then set mode and add ${options.mode === "optimize" ? "metric" : "tasks"} in loop.yaml (README: The loop contract)`,
      2,
    );
  }
  const repo = await repoRoot(options.cwd);
  const file = path.resolve(repo, options.contract ?? "loop.yaml");
  const shown = path.relative(repo, file);
  if (existsSync(file)) throw new UserError(`${shown} already exists; edit it, or remove it to start over`);
  const test = await guessTestCommand(repo);
  const name = path.basename(repo);
  await writeFile(file, starterContract({ name, test, agent: options.agent ?? "" }));

  const programFile = path.join(repo, "program.md");
  const programExists = existsSync(programFile);
  if (!programExists) {
    await writeFile(
      programFile,
      starterProgram({ name, objective: STARTER_OBJECTIVE, gatesSummary: starterGatesSummary(test, shown), contract: shown }),
    );
  }
  const program = programExists ? null : "program.md";

  const gitignore = path.join(repo, ".gitignore");
  const ignored = await readFile(gitignore, "utf8").catch(() => "");
  const hasEntry = ignored.split("\n").some((line) => [".loopwarden", ".loopwarden/", "/.loopwarden/"].includes(line.trim()));
  if (!hasEntry) await appendFile(gitignore, `${ignored === "" || ignored.endsWith("\n") ? "" : "\n"}.loopwarden/\n`);

  const todo = [...(test ? [] : ["gates[0].run (your test command)"]), ...(options.agent ? [] : ["agent.run (your agent command)"])];
  const added = [shown, ...(program ? [program] : []), ".gitignore"].join(" ");
  emitResult(options, { status: "ok", contract: shown, program, todo }, [
    `wrote ${shown}${program ? ` and ${program}` : ""}${hasEntry ? "" : ", and added .loopwarden/ to .gitignore"}`,
    ...(program ? [] : ["  program.md already exists: left as it is"]),
    ...(todo.length ? [`  fill in: ${todo.join(", ")}`] : []),
    `  then commit (git add ${added} && git commit -m "Add loopwarden contract") and start: loopwarden run`,
  ]);
  return 0;
}
