import { readFile } from "node:fs/promises";
import path from "node:path";
import picomatch from "picomatch";
import { parse as parseShell } from "shell-quote";
import { protectedGlobs } from "#shared/engine/guards.js";
import type { Contract } from "#shared/wire/contract.js";
import { git, OBJECT_ID } from "../process/git.js";
import { RecentPromises } from "../process/recent-promises.js";
import type { PathChange } from "../process/git-commits.js";

// Which tracked files the protected-files guard hashes (DESIGN §6.4). With the defaults, that is the
// default globs, the contract file, and every tracked file a gate, metric or task command names as
// part of the check: a script the check runs is part of the check, so `bash scripts/check.sh` makes
// scripts/check.sh as off limits as the tests — and so does `"test": "node scripts/run-tests.js"` when
// the gate is `npm test`. A file the check is run *on* is not: `node --check src/app.js` and
// `eslint src/app.js` name the code under test, which is the agent's to change.

/** Every command of the contract that judges a candidate — the setup run before the gates, the gates, the metric, task checks — with what to call it. */
export function judgingCommands(contract: Contract): { what: string; command: string }[] {
  return [
    ...(contract.exec?.setup ? [{ what: "exec.setup", command: contract.exec.setup }] : []),
    ...contract.gates.map((gate) => ({ what: `gate ${gate.name}`, command: gate.run })),
    ...(contract.metric ? [{ what: "the metric", command: contract.metric.run }] : []),
    ...(contract.tasks ?? []).flatMap((task) => (task.check === undefined ? [] : [{ what: `task ${task.id}`, command: task.check }])),
  ];
}

/** A word as a path relative to the repository, or null when it cannot be one (absolute, `..`, empty, `$VAR/…`). */
function asRepoPath(word: string): string | null {
  if (word === "" || word.startsWith("-") || word.includes("$") || path.posix.isAbsolute(word)) return null;
  const normal = path.posix.normalize(word);
  if (normal === "." || normal.startsWith("../") || normal === "..") return null;
  return normal.replace(/\/$/, "");
}

const SHELLS = new Set(["sh", "bash", "dash", "zsh", "ksh"]);
// Interpreters whose first operand is the program they run, and the options after which it is not.
const INTERPRETERS: Record<string, Set<string>> = {
  node: new Set(["-c", "--check", "-e", "--eval", "-p", "--print", "--test"]),
  bun: new Set(["-e", "--eval", "-p", "--print", "test", "install", "add", "x"]),
  deno: new Set(["eval", "test", "fmt", "lint", "check"]),
  tsx: new Set(["-e", "--eval", "-p", "--print"]),
  "ts-node": new Set(["-e", "--eval", "-p", "--print"]),
  python: new Set(["-c", "-m"]),
  python3: new Set(["-c", "-m"]),
  ruby: new Set(["-e"]),
  perl: new Set(["-e", "-E"]),
  php: new Set(["-r"]),
  ...Object.fromEntries([...SHELLS].map((shell) => [shell, new Set(["-c"])])),
};
// Words that only wrap the command after them (their own options and values are skipped).
const WRAPPERS = new Set(["env", "time", "exec", "nice", "nohup", "command", "timeout", "npx", "pnpx", "xvfb-run", "stdbuf"]);
// Options whose value configures the check (a config file is part of it), with or without `=`.
const CONFIG_OPTION = /^--?(c|config|config-file|configfile|rcfile|rc|settings|setup|setup-file|setupfiles|makefile|file|justfile|f)$/;

/** One simple command's words (between `&&`, `||`, `;`, `|`, `&`, parentheses), redirection targets left out. */
function simpleCommands(command: string): string[][] {
  let entries: ReturnType<typeof parseShell>;
  try {
    entries = parseShell(command, (name) => `$${name}`);
  } catch {
    return [];
  }
  const commands: string[][] = [[]];
  let redirect = false;
  for (const entry of entries) {
    if (typeof entry === "string") {
      if (redirect) redirect = false;
      else commands[commands.length - 1]?.push(entry);
    } else if ("op" in entry && entry.op === "glob") {
      if (redirect) redirect = false;
      else commands[commands.length - 1]?.push(entry.pattern);
    } else if ("op" in entry && /[<>]/.test(entry.op)) {
      // `2>&1` keeps its fd as a word before the operator: drop it, and the target after it.
      const words = commands[commands.length - 1];
      if (words && /^\d$/.test(words[words.length - 1] ?? "")) words.pop();
      redirect = true;
    } else {
      commands.push([]);
    }
  }
  return commands.filter((words) => words.length > 0);
}

/**
 * What a shell command runs as part of the check: the program of each simple command when it is a
 * file (`./scripts/check.sh`), the program an interpreter runs (`node bench/run.mjs`, `python3 tools/t.py`,
 * `bash scripts/x.sh`; not `node --check src/a.js` nor `python3 -m pytest`), the script of `sh -c '…'`
 * read as a command of its own, and the value of a configuration option (`--config vitest.ci.ts`,
 * `-c pytest-ci.ini`, `make -f ci.mk`). Also the words of each simple command, for package-manager
 * scripts (`npm test`). Variables are not expanded, so `$HOME/x` names nothing in the repository.
 */
export function commandParts(command: string): { files: string[]; commands: string[][] } {
  const files: string[] = [];
  const commands = simpleCommands(command);
  const nested: string[][] = [];
  for (const words of commands) {
    let index = 0;
    // Leading assignments and wrappers (`FOO=1 env BAR=2 timeout 60 npx tsx x.ts`) are skipped.
    for (;;) {
      const word = words[index];
      if (word === undefined) break;
      if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(word)) index++;
      else if (WRAPPERS.has(path.posix.basename(word))) {
        index++;
        while ((words[index] ?? "").startsWith("-") || /^\d+[smhd]?$/.test(words[index] ?? "")) index++;
      } else break;
    }
    const program = words[index];
    if (program === undefined) continue;
    files.push(program);
    const interpreter = INTERPRETERS[path.posix.basename(program).replace(/\.exe$/, "")];
    const rest = words.slice(index + 1);
    rest.forEach((word, position) => {
      const equals = word.indexOf("=");
      const option = equals > 0 ? word.slice(0, equals) : word;
      const value = equals > 0 ? word.slice(equals + 1) : rest[position + 1];
      if (!interpreter && CONFIG_OPTION.test(option) && value !== undefined) files.push(value);
    });
    if (interpreter) {
      const operands = rest.filter((word) => !word.startsWith("-") || interpreter.has(word));
      // `deno run x.ts`, `bun run x.ts`: the program comes after the subcommand.
      const operand = operands[0] === "run" ? operands[1] : operands[0];
      const denied = rest.slice(0, operand === undefined ? rest.length : rest.indexOf(operand)).some((word) => interpreter.has(word));
      if (operand !== undefined && !denied && !interpreter.has(operand)) files.push(operand);
      const script = rest[rest.indexOf("-c") + 1];
      if (SHELLS.has(path.posix.basename(program)) && rest.includes("-c") && script !== undefined) {
        const inner = commandParts(script);
        files.push(...inner.files);
        nested.push(...inner.commands);
      }
    }
  }
  return { files, commands: [...commands, ...nested] };
}

// Package managers' ways of running a package.json script: `npm test`, `npm run NAME`, `yarn NAME`, ….
const RUNS_SCRIPT: Record<string, { direct: Set<string>; run: Set<string>; anyName: boolean }> = {
  npm: { direct: new Set(["test", "t", "start", "stop", "restart"]), run: new Set(["run", "run-script", "rum", "urn"]), anyName: false },
  pnpm: { direct: new Set(["test", "t", "start"]), run: new Set(["run", "run-script"]), anyName: true },
  yarn: { direct: new Set(["test", "start"]), run: new Set(["run"]), anyName: true },
  bun: { direct: new Set(), run: new Set(["run"]), anyName: false },
};

/**
 * The package.json scripts a simple command runs through a package manager (`npm test` → scripts.test,
 * with its pre/post scripts; `yarn build` → scripts.build): a script the check runs is part of the check.
 */
function scriptsRun(words: readonly string[], scripts: Readonly<Record<string, string>>): string[] {
  const [program, next, after] = words;
  const manager = program === undefined ? undefined : RUNS_SCRIPT[path.posix.basename(program)];
  if (!manager || next === undefined) return [];
  const name = manager.run.has(next) ? after : manager.direct.has(next) || manager.anyName ? next : undefined;
  const script = name === "t" ? "test" : name;
  if (script === undefined) return [];
  return [`pre${script}`, script, `post${script}`].flatMap((key) => (scripts[key] === undefined ? [] : [scripts[key]]));
}

/**
 * The tracked files (of `tracked`) that a gate, metric or task command of the contract runs as part of
 * the check (`commandParts`), directly or through a package.json script it runs (`scripts`: the root
 * package.json's, when tracked). Globs among them match tracked files.
 */
export function commandNamedFiles(contract: Contract, tracked: readonly string[], scripts: Readonly<Record<string, string>> = {}): string[] {
  const trackedSet = new Set(tracked);
  const named = new Set<string>();
  const pending = judgingCommands(contract).map(({ command }) => command);
  const seen = new Set<string>();
  // Scripts may run scripts (`"test": "npm run lint && npm run unit"`); each is read once.
  for (let command = pending.pop(); command !== undefined; command = pending.pop()) {
    if (seen.has(command)) continue;
    seen.add(command);
    const parts = commandParts(command);
    for (const words of parts.commands) pending.push(...scriptsRun(words, scripts));
    for (const file of parts.files.map(asRepoPath)) {
      if (file === null) continue;
      if (trackedSet.has(file)) named.add(file);
      else if (picomatch.scan(file).isGlob) {
        const matches = picomatch(file, { dot: true });
        for (const candidate of tracked) if (matches(candidate)) named.add(candidate);
      }
    }
  }
  return [...named].sort();
}

/**
 * The protected files among `tracked`, sorted: the contract's own `guards.protected` globs when it names
 * them (`[]`: none); otherwise the default globs, the contract file, and the files the judging commands
 * run as part of the check, directly or through the package.json `scripts` they run.
 */
export function selectProtectedFiles(
  contract: Contract,
  contractFile: string | null,
  tracked: readonly string[],
  scripts: Readonly<Record<string, string>> = {},
): string[] {
  const globs = protectedGlobs(contract, contractFile);
  const isProtected = globs.length > 0 ? picomatch(globs, { dot: true }) : () => false;
  const files = new Set(tracked.filter((file) => isProtected(file)));
  if (contract.guards?.protected === undefined) for (const file of commandNamedFiles(contract, tracked, scripts)) files.add(file);
  return [...files].sort();
}

/** The tracked files of the checkout at `dir` (a clone, or the working tree's index). */
export async function trackedFiles(dir: string): Promise<string[]> {
  return (await git(dir, ["ls-files", "-z"])).split("\0").filter(Boolean);
}

/** The string-valued scripts of a package.json text (none when it is missing or not a JSON object). */
export function packageJsonScripts(text: string | null): Record<string, string> {
  if (text === null) return {};
  try {
    const scripts = (JSON.parse(text) as { scripts?: unknown } | null)?.scripts;
    if (typeof scripts !== "object" || scripts === null) return {};
    return Object.fromEntries(Object.entries(scripts).filter((entry): entry is [string, string] => typeof entry[1] === "string"));
  } catch {
    return {};
  }
}

/** The scripts of the checkout's root package.json when git tracks one. */
async function packageScripts(dir: string, tracked: readonly string[]): Promise<Record<string, string>> {
  if (!tracked.includes("package.json")) return {};
  return packageJsonScripts(await readFile(path.join(dir, "package.json"), "utf8").catch(() => null));
}

// A commit's files never change: the last listings are kept, by repository and commit, so that the
// best commit's, listed for its evaluation or the last agent's workspace, is not listed again for the
// next workspace (issue 30). Two: the best and the candidate.
const listings = new RecentPromises<string[]>(2);

/**
 * The files `commit` holds, as `trackedFiles` lists them in a fresh checkout of it, read from the commit
 * in `repo`: so they can be listed while the checkout is made, or before (issue 30).
 */
export function committedFiles(repo: string, commit: string): Promise<string[]> {
  const list = () => git(repo, ["ls-tree", "-r", "-z", "--name-only", "--full-tree", commit]).then((out) => out.split("\0").filter(Boolean));
  // Only a commit's id names the same files forever (`HEAD` or a branch moves).
  if (!OBJECT_ID.test(commit)) return list();
  return listings.get(`${path.resolve(repo)}\0${commit}`, list);
}

/**
 * The files `commit` holds, from those of its parent when they are listed already (`committedFiles`) and
 * the paths its change from the parent touches (`git diff --raw`, read with the candidate's patch):
 * the same names, in the same order, as `committedFiles(repo, commit)`, without a git process (issue
 * 30). Listed by git when the parent's files are not at hand or the changes cannot be read.
 */
export function committedFilesAfter(repo: string, parent: string, commit: string, changes: Promise<PathChange[]>): Promise<string[]> {
  const before = OBJECT_ID.test(parent) && OBJECT_ID.test(commit) ? listings.peek(`${path.resolve(repo)}\0${parent}`) : undefined;
  if (!before) return committedFiles(repo, commit);
  const derived = Promise.all([before, changes]).then(([files, changed]) => filesAfter(files, changed));
  return listings.set(
    `${path.resolve(repo)}\0${commit}`,
    derived.catch(() => git(repo, ["ls-tree", "-r", "-z", "--name-only", "--full-tree", commit]).then((out) => out.split("\0").filter(Boolean))),
  );
}

/** `files` with `changes` made (see committedFilesAfter), in git's order: by the bytes of their UTF-8 names. */
export function filesAfter(files: readonly string[], changes: readonly PathChange[]): string[] {
  const kept = new Set(files);
  for (const { status, paths } of changes) {
    const [source, destination] = paths;
    if (source === undefined) throw new Error(`a change without a path (${status})`);
    if (status === "A") kept.add(source);
    else if (status === "D") kept.delete(source);
    else if (status === "R" || status === "C") {
      if (destination === undefined) throw new Error(`a ${status} change without its destination`);
      if (status === "R") kept.delete(source);
      kept.add(destination);
    } else if (status !== "M" && status !== "T") throw new Error(`a change git names ${status}`);
  }
  return [...kept]
    .map((name) => Buffer.from(name, "utf8"))
    .sort(Buffer.compare)
    .map((name) => name.toString("utf8"));
}

/**
 * The protected files of the checkout at `dir` (see `selectProtectedFiles`); `listed`: its tracked files
 * when already listed (`committedFiles`).
 */
export async function protectedFiles(dir: string, contract: Contract, contractFile: string | null, listed?: Promise<string[]>): Promise<string[]> {
  const tracked = await (listed ?? trackedFiles(dir));
  return selectProtectedFiles(contract, contractFile, tracked, await packageScripts(dir, tracked));
}
