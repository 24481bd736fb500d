import { DEFAULT_PROTECTED } from "#shared/engine/index.js";
import type { StarterExec, StarterGate } from "./init-runners.js";

// The starter `program.md` `init` writes (the agent's instructions: the objective, the scope, what is off
// limits in this repository, the gates, how to read where it starts and how to report), apart from the
// contract `init` writes beside it.

const code = (text: string) => `\`${text}\``;

/**
 * The starter `program.md`: what the agent is told to do in each run, in the spirit of autoloop's
 * program.md — the objective, the files in scope and off limits, how to read where it starts, the last
 * verdict and the history (`LOOPWARDEN_BEST`, `LOOPWARDEN_LAST_VERDICT`, `LOOPWARDEN_HISTORY`), where
 * to look (`LOOPWARDEN_CONTEXT`), how to ask a person for a change to a protected file
 * (`LOOPWARDEN_REQUESTS`), one focused change per run, never a direction already rejected, and the
 * report it may write (`LOOPWARDEN_AGENT_REPORT`).
 */
export function starterProgram(options: {
  name: string;
  objective: string;
  gatesSummary: string;
  contract?: string;
  /** This repository's protected files when the file is written (`starterProtectedFiles`); omitted, only the rules are given. */
  protectedFiles?: readonly string[];
  /** The contract's scope: the only paths the agent may change; omitted or empty, the agent is told to keep to the source. */
  scope?: readonly string[];
}): string {
  const contract = options.contract ?? "loop.yaml";
  const globs = (patterns: readonly string[]) => patterns.map(code).join(", ");
  const { tests, harness, manifests, lockfiles, ci } = DEFAULT_PROTECTED;
  return `# ${options.name}: instructions for the agent

<!-- Written by \`loopwarden init\` for the agent command in ${contract} (agent.run), which should tell
     the agent to read this file. Adapt it to your project (name the files to work on), and commit it
     with ${contract}. -->

You are the agent of a loopwarden loop. Each time you are run, you make **one focused change** to this
repository and stop. loopwarden then commits your working tree, runs the gates on that commit in a
fresh clone, and its coordinator, not you, decides whether the change is kept or reverted.

You run in a sandbox: your workspace is a fresh clone of the best commit so far, the network reaches
only the hosts ${code(contract)} allows (\`agent.network\`) through the proxy in \`HTTP_PROXY\`/\`HTTPS_PROXY\`,
and \`$HOME\` and \`/tmp\` are empty and private to this run. Any other host is refused, so do not count
on downloading anything.

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

${scopeParagraph(options.scope ?? [], contract)}

Off limits: never create, edit, rename or delete

- ${code(contract)}: the loop's contract; it is pinned by its hash, and a changed contract is another loop
- tests (fix the code, never the test that shows it is broken; never skip, delete or weaken a test):
  ${globs(tests)}
- the test harness, the test-runner configuration that decides which tests run and how:
  ${globs(harness)}
- manifests, which define the test scripts and the dependencies (change no script, add no dependency):
  ${globs(manifests)}
- lockfiles: ${globs(lockfiles)}
- CI configuration: ${globs(ci)}
- any tracked file a gate command of ${code(contract)} runs as part of the check (a script it runs, directly or
  through a package.json script, or a configuration file it names): the check is not yours to change
- \`program.md\` (this file) and \`.loopwarden/\` (the runner's state)
${options.protectedFiles ? `\n${protectedListing(options.protectedFiles)}\n` : ""}
Everything above but \`program.md\` and \`.loopwarden/\` is checked by the coordinator, not left to
you: a candidate that changes, adds or deletes one of these files is rejected and halts the loop
(\`blocked_path_modified\`). The tests are checked the same way: a candidate that skips or deselects a
test that t0 (the starting point) ran, or whose test suite lost a test (an id gone, or fewer tests
collected), is rejected and halts the loop (\`metric_integrity_violation\`), whatever the tests say.
A skipped test is never a fix.

## First, read where you start, the last verdict and the history

Failures are data: read them before you change anything.

- \`$LOOPWARDEN_BEST\` is the path of a JSON file describing the tree you start from, the best so far
  (t0, the starting point, until a change is promoted):
  \`{ "candidate_id", "commit", "failing_tests", "metric" }\`. \`failing_tests\` are what fails there, a
  failing gate as \`gate:<name>\`: what there is to fix.
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

For example: \`cat "$LOOPWARDEN_BEST" "$LOOPWARDEN_LAST_VERDICT"; tail -n 20 "$LOOPWARDEN_HISTORY"\`. \`LOOPWARDEN_ITERATION\`
holds the number of this run (from 1) and \`LOOPWARDEN_LOOP_ID\` the loop's id.

## Where to look

\`$LOOPWARDEN_CONTEXT\` is a directory the runner wrote for this run from the last evaluation. Start with
its \`context.md\`: the failing tests (those that passed at the best so far marked regressed), the tail of
each failing gate's output, the last candidate's verdict and diff, and the files to read, each with why
(named by a stack trace, imported by a failing test, importing one of those). A copy of each is under
\`files/\`, at its path in the repository; edit the repository's own file, never the copy.

## When a test or another protected file is wrong

Do not edit it to make your change pass. If you are sure it is wrong (it asserts behaviour the objective
contradicts), make your change, including the fix to that file, and ask a person to allow it: write a
JSON file at the path in \`$LOOPWARDEN_REQUESTS\`,
\`{ "files": ["test/parse.test.js"], "why": "what is wrong with it, in one or two sentences" }\`.
Your change then waits, unevaluated, until a person approves or refuses exactly those files; nothing you
write anywhere else answers it. Ask rarely: a refused request is a rejected run.

## Each run

1. Read where you start, the last verdict, the history and \`context.md\`.
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

/** What `program.md` says the agent may change: the scope's globs, or, without one, the source as the objective needs it. */
function scopeParagraph(scope: readonly string[], contract: string): string {
  if (scope.length === 0) return "In scope: the project's source code, as much of it as the objective needs and no more.";
  return `You may change only these paths (the scope in ${code(contract)}): ${scope.map(code).join(", ")}. Any change to another
path — a new file elsewhere, a dotfile, a configuration file — is rejected and halts the loop
(\`blocked_path_modified\`). Inside them, change only what the objective needs, and the files below stay
off limits all the same.`;
}

/** The most protected files `program.md` lists by name; the rest are counted. */
const LISTED_FILES = 50;

/** The concrete protected files of this repository, for `program.md`'s "Off limits" section. */
function protectedListing(files: readonly string[]): string {
  const shown = files.slice(0, LISTED_FILES).map((file) => `- ${code(file)}`);
  const more = files.length > LISTED_FILES ? [`- … and ${files.length - LISTED_FILES} more`] : [];
  return [
    "In this repository, these files are protected (as of when this file was written; a new file",
    "matching the patterns above is off limits too):",
    "",
    ...shown,
    ...more,
  ].join("\n");
}

/** The starter contract's one gate, as `program.md` describes it, after the setup step that comes first, if any. */
export function starterGatesSummary(gate: StarterGate, contract: string, exec?: StarterExec): string {
  if (!gate.run) return `1. \`test\`: the test command in ${code(contract)} (\`gates[0].run\`, still to be filled in)`;
  const line = `1. \`test\`: \`${gate.run}\` (timeout 10m)`;
  const setup = exec?.setup ? `\n\nBefore them, \`${exec.setup}\` (\`exec.setup\`) installs the dependencies in that clone.` : "";
  if (!gate.tests) return `${line}. Only its exit code is read, so the whole gate is one test.${setup}`;
  const [format, file] = "junit" in gate.tests ? ["JUnit XML", gate.tests.junit] : ["TAP", gate.tests.tap];
  return `${line}. Each test is read from the ${format} report it writes (${code(file)}), so every test counts.${setup}`;
}
