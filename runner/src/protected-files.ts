import { readFile } from "node:fs/promises";
import path from "node:path";
import picomatch from "picomatch";
import { parse as parseShell, type ParseEntry } from "shell-quote";
import { protectedGlobs } from "../../shared/engine/guards.js";
import type { Contract } from "../../shared/wire/contract.js";
import { git } from "./git.js";

// Which tracked files the protected-files guard hashes (DESIGN §6.4). With the defaults, that is the
// default globs, the contract file, and every tracked file a gate, metric or task command names: a
// script the check runs is part of the check, so `bash scripts/check.sh` makes scripts/check.sh as
// off limits as the tests — and so does `"test": "node scripts/run-tests.js"` when the gate is `npm test`.

const SHELLS = new Set(["sh", "bash", "dash", "zsh", "ksh"]);

/** Every command of the contract that judges a candidate: gates, the metric, task checks. */
function judgingCommands(contract: Contract): string[] {
  return [...contract.gates.map((gate) => gate.run), ...(contract.metric ? [contract.metric.run] : []), ...(contract.tasks ?? []).map((task) => task.check)];
}

/** A word as a path relative to the repository, or null when it cannot be one (absolute, `..`, empty). */
function asRepoPath(word: string): string | null {
  if (word === "" || word.startsWith("-") || path.posix.isAbsolute(word)) return null;
  const normal = path.posix.normalize(word);
  if (normal === "." || normal.startsWith("../") || normal === "..") return null;
  return normal.replace(/\/$/, "");
}

/**
 * The words of a shell command that may name files: every word, and the value of `--flag=value`; the
 * script of `sh -c SCRIPT` (bash, dash, zsh, ksh too) is read as a command of its own; glob patterns
 * come back as patterns. Variables are left unexpanded, so `$HOME/x` names nothing in the repository.
 */
export function commandWords(command: string): { words: string[]; patterns: string[] } {
  const words: string[] = [];
  const patterns: string[] = [];
  let entries: ParseEntry[];
  try {
    entries = parseShell(command, (name) => `$${name}`);
  } catch {
    return { words, patterns };
  }
  entries.forEach((entry, index) => {
    if (typeof entry === "string") {
      const previous = entries[index - 1];
      const program = entries[index - 2];
      if (previous === "-c" && typeof program === "string" && SHELLS.has(path.posix.basename(program))) {
        const inner = commandWords(entry);
        words.push(...inner.words);
        patterns.push(...inner.patterns);
        return;
      }
      words.push(entry);
      const equals = entry.indexOf("=");
      if (equals > 0) words.push(entry.slice(equals + 1));
    } else if ("op" in entry && entry.op === "glob") {
      patterns.push(entry.pattern);
    }
  });
  return { words, patterns };
}

// Package managers' ways of running a package.json script: `npm test`, `npm run NAME`, `yarn NAME`, ….
const RUNS_SCRIPT: Record<string, { direct: Set<string>; run: Set<string> }> = {
  npm: { direct: new Set(["test", "t", "start", "stop", "restart"]), run: new Set(["run", "run-script", "rum", "urn"]) },
  pnpm: { direct: new Set(["test", "t", "start"]), run: new Set(["run", "run-script"]) },
  yarn: { direct: new Set(["test", "start"]), run: new Set(["run"]) },
  bun: { direct: new Set(["test"]), run: new Set(["run"]) },
};

/**
 * The package.json scripts a command runs through a package manager (`npm test` → scripts.test, with
 * its pre/post scripts; `yarn build` → scripts.build): a script the check runs is part of the check, so
 * the files it names are protected as if the gate named them.
 */
function scriptsRun(words: readonly string[], scripts: Readonly<Record<string, string>>): string[] {
  const run: string[] = [];
  words.forEach((word, index) => {
    const manager = RUNS_SCRIPT[path.posix.basename(word)];
    const next = words[index + 1];
    if (!manager || next === undefined) return;
    const name = manager.run.has(next) ? words[index + 2] : manager.direct.has(next) || path.posix.basename(word) !== "npm" ? next : undefined;
    const script = name === "t" ? "test" : name;
    if (script === undefined) return;
    for (const key of [`pre${script}`, script, `post${script}`]) {
      const body = scripts[key];
      if (body !== undefined) run.push(body);
    }
  });
  return run;
}

/**
 * The tracked files (of `tracked`) that a gate, metric or task command of the contract names, or that a
 * package.json script such a command runs names (`scripts`: the root package.json's, when tracked).
 */
export function commandNamedFiles(contract: Contract, tracked: readonly string[], scripts: Readonly<Record<string, string>> = {}): string[] {
  const trackedSet = new Set(tracked);
  const named = new Set<string>();
  const pending = judgingCommands(contract);
  const seen = new Set<string>();
  // Scripts may run scripts (`"test": "npm run lint && npm run unit"`); each is read once.
  for (let command = pending.pop(); command !== undefined; command = pending.pop()) {
    if (seen.has(command)) continue;
    seen.add(command);
    const { words, patterns } = commandWords(command);
    pending.push(...scriptsRun(words, scripts));
    for (const word of words) {
      const file = asRepoPath(word);
      if (file !== null && trackedSet.has(file)) named.add(file);
    }
    const globs = patterns.map(asRepoPath).filter((pattern): pattern is string => pattern !== null);
    if (globs.length > 0) {
      const matches = picomatch(globs, { dot: true });
      for (const file of tracked) if (matches(file)) named.add(file);
    }
  }
  return [...named].sort();
}

/**
 * The protected files among `tracked`, sorted: the contract's own `guards.protected` globs when it names
 * them (`[]`: none); otherwise the default globs, the contract file, and the files the judging commands
 * name, directly or through the package.json `scripts` they run.
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

/** The scripts of the checkout's root package.json when git tracks one (an unreadable one has none). */
async function packageScripts(dir: string, tracked: readonly string[]): Promise<Record<string, string>> {
  if (!tracked.includes("package.json")) return {};
  try {
    const manifest = JSON.parse(await readFile(path.join(dir, "package.json"), "utf8")) as { scripts?: unknown };
    const scripts = manifest.scripts;
    if (typeof scripts !== "object" || scripts === null) return {};
    return Object.fromEntries(Object.entries(scripts).filter((entry): entry is [string, string] => typeof entry[1] === "string"));
  } catch {
    return {};
  }
}

/** The protected files of the checkout at `dir` (see `selectProtectedFiles`). */
export async function protectedFiles(dir: string, contract: Contract, contractFile: string | null): Promise<string[]> {
  const tracked = await trackedFiles(dir);
  return selectProtectedFiles(contract, contractFile, tracked, await packageScripts(dir, tracked));
}
