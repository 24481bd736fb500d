import { appendFile, mkdir, readFile } from "node:fs/promises";
import path from "node:path";
import { UserError } from "../errors.js";
import { execCommand, ExecFailure } from "./spawner.js";
import { countSpawn } from "../timings.js";

/** A git command that failed, with what git said. */
export class GitError extends Error {
  constructor(
    readonly args: string[],
    readonly stderr: string,
  ) {
    super(`git ${args.join(" ")} failed: ${stderr.trim()}`);
    this.name = "GitError";
  }
}

// Settings for every git call the runner makes: never run the repository's hooks, never sign, never
// prompt, and never run a command a repository's configuration names (DESIGN §6.7: an agent that writes
// `core.fsmonitor` into a `.git/config` must not have the runner's git run it with the runner's keys).
// Filter drivers and `core.sshCommand` come only from configuration the agent cannot write: the runner
// never runs git in the agent's workspace with the workspace's own git directory (agent-zone.ts).
const SAFE_CONFIG = [
  "-c",
  "core.hooksPath=/dev/null",
  "-c",
  "core.fsmonitor=false",
  "-c",
  "commit.gpgsign=false",
  "-c",
  "advice.detachedHead=false",
  "-c",
  "protocol.ext.allow=never",
];

// Variables that tell git which repository to work on (`git rev-parse --local-env-vars`, plus the
// GIT_CONFIG_KEY_n/VALUE_n pairs GIT_CONFIG_COUNT enables). Git sets GIT_DIR for hooks, so a runner
// started from a hook (or `git rebase --exec`) would otherwise have every call, the ones meant for a
// clone included, act on the user's repository: `remote remove origin` in a fresh clone would remove
// the user's own origin. The runner always names the repository by its working directory instead.
const REPO_LOCATING_GIT_ENV = new Set([
  "GIT_ALTERNATE_OBJECT_DIRECTORIES",
  "GIT_CONFIG",
  "GIT_CONFIG_PARAMETERS",
  "GIT_CONFIG_COUNT",
  "GIT_OBJECT_DIRECTORY",
  "GIT_DIR",
  "GIT_WORK_TREE",
  "GIT_IMPLICIT_WORK_TREE",
  "GIT_GRAFT_FILE",
  "GIT_INDEX_FILE",
  "GIT_NO_REPLACE_OBJECTS",
  "GIT_REPLACE_REF_BASE",
  "GIT_PREFIX",
  "GIT_INTERNAL_SUPER_PREFIX",
  "GIT_SHALLOW_FILE",
  "GIT_COMMON_DIR",
]);

/** `env` without the variables that point git at a particular repository (GIT_DIR, GIT_WORK_TREE, …). */
export function withoutRepoLocatingGitEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !REPO_LOCATING_GIT_ENV.has(name) && !/^GIT_CONFIG_(KEY|VALUE)_\d+$/.test(name)));
}

/**
 * Runs git in `cwd` and returns stdout; `env` adds variables (an index file of the runner's own), and
 * `stdinFile` is what git reads on its standard input. Never with replace refs: an object a repository's
 * `refs/replace/` puts in place of a commit would have git show the runner other files than the commit
 * holds (a candidate's listing without a protected file), and a clean clone, which does not copy those
 * refs, other ones again (DESIGN §6.7).
 */
export async function git(
  cwd: string,
  args: string[],
  options: { encoding?: "buffer"; env?: Record<string, string>; stdinFile?: string } = {},
): Promise<string> {
  countSpawn();
  // With `stdinFile`, git reads its standard input from that file (a shell opens it, then becomes git).
  const [file, argv] =
    options.stdinFile === undefined
      ? ["git", [...SAFE_CONFIG, ...args]]
      : ["/bin/sh", ["-c", 'exec git "$@" < "$0"', options.stdinFile, ...SAFE_CONFIG, ...args]];
  try {
    return await execCommand(file, argv, {
      cwd,
      maxBuffer: 512 * 1024 * 1024,
      env: { ...withoutRepoLocatingGitEnv(process.env), GIT_TERMINAL_PROMPT: "0", GIT_NO_REPLACE_OBJECTS: "1", ...options.env },
      encoding: options.encoding === "buffer" ? "latin1" : "utf8",
    });
  } catch (error) {
    throw new GitError(args, error instanceof ExecFailure ? error.stderr : String(error));
  }
}

/** A commit id shortened for a progress line. */
export function shortCommit(commit: string): string {
  return commit.slice(0, 10);
}

/** The top level of the repository containing `cwd`. */
export async function repoRoot(cwd: string): Promise<string> {
  try {
    return (await git(cwd, ["rev-parse", "--show-toplevel"])).trim();
  } catch {
    throw new UserError(`${cwd} is not inside a git repository; run loopwarden from your project's repository (git init first)`);
  }
}

/** The commit HEAD points at. */
export async function headCommit(repo: string): Promise<string> {
  try {
    return (await git(repo, ["rev-parse", "--verify", "HEAD^{commit}"])).trim();
  } catch {
    throw new UserError("the repository has no commits yet; commit your project first (git add -A && git commit)");
  }
}

// Where each repository keeps HEAD (its git directory: `.git`, or a worktree's) and its branches (the
// common directory), asked once per repository and process. Reading HEAD and a branch's loose ref as
// files spares the iteration a git process each time (DESIGN §12); where the files are not plain —
// packed refs, the reftable format, anything unexpected — git itself is asked.
const gitDirectories = new Map<string, Promise<{ gitDir: string; commonDir: string }>>();

/** The repository's git directory and common directory (see above). */
export function gitDirectoriesOf(repo: string): Promise<{ gitDir: string; commonDir: string }> {
  let directories = gitDirectories.get(repo);
  if (!directories) {
    directories = git(repo, ["rev-parse", "--absolute-git-dir", "--git-common-dir"]).then((out) => {
      const [gitDir = "", commonDir = ""] = out.split("\n");
      return { gitDir, commonDir: path.resolve(repo, commonDir) };
    });
    gitDirectories.set(repo, directories);
    directories.catch(() => gitDirectories.delete(repo));
  }
  return directories;
}

/** The object store of `repo` (its common git directory's `objects`): what its clones borrow (`blankClone`). */
export async function objectsDirOf(repo: string): Promise<string> {
  return path.join((await gitDirectoriesOf(repo)).commonDir, "objects");
}

/** The git directory of `repo` (`.git`, or a worktree's). */
export async function gitDirOf(repo: string): Promise<string> {
  return (await gitDirectoriesOf(repo)).gitDir;
}

/** A full object id, SHA-1 or SHA-256. */
export const OBJECT_ID = /^[0-9a-f]{40}(?:[0-9a-f]{24})?$/;

/** What HEAD's file says: the ref it names, or the commit a detached HEAD is at; null when it is neither. */
export async function headFile(repo: string): Promise<{ ref: string } | { commit: string } | null> {
  const { gitDir } = await gitDirectoriesOf(repo);
  const text = (await readFile(path.join(gitDir, "HEAD"), "utf8").catch(() => "")).trim();
  const ref = /^ref: (refs\/[^\s]+)$/.exec(text)?.[1];
  if (ref) return { ref };
  return OBJECT_ID.test(text) ? { commit: text } : null;
}

/** The current branch, or null when HEAD is detached. */
export async function currentBranch(repo: string): Promise<string | null> {
  const head = await headFile(repo);
  if (head && "commit" in head) return null;
  if (head?.ref.startsWith("refs/heads/")) return head.ref.slice("refs/heads/".length);
  const name = (await git(repo, ["symbolic-ref", "--short", "-q", "HEAD"]).catch(() => "")).trim();
  return name || null;
}

/** The commit HEAD is at, from the files when they say it plainly (a loose branch ref just written by a commit). */
export async function committedHead(repo: string): Promise<string> {
  const head = await headFile(repo);
  if (head && "commit" in head) return head.commit;
  if (head?.ref.startsWith("refs/heads/")) {
    const { commonDir } = await gitDirectoriesOf(repo);
    const commit = (await readFile(path.join(commonDir, head.ref), "utf8").catch(() => "")).trim();
    if (OBJECT_ID.test(commit)) return commit;
  }
  return headCommit(repo);
}

/** Paths with uncommitted changes (staged, unstaged or untracked; ignored files do not count). */
export async function dirtyPaths(repo: string): Promise<string[]> {
  const out = await git(repo, ["status", "--porcelain=v1", "--untracked-files=all"]);
  return out
    .split("\n")
    .filter((line) => line.length > 3)
    .map((line) => line.slice(3));
}

/** Keeps `.loopwarden/` (runner state, clones, logs) out of git without touching the user's .gitignore. */
export async function excludeStateDir(repo: string): Promise<void> {
  const file = path.resolve(repo, (await git(repo, ["rev-parse", "--git-path", "info/exclude"])).trim());
  const current = await readFile(file, "utf8").catch(() => "");
  if (current.split("\n").some((line) => line.trim() === "/.loopwarden/" || line.trim() === ".loopwarden/")) return;
  await mkdir(path.dirname(file), { recursive: true });
  await appendFile(file, `${current.endsWith("\n") || current === "" ? "" : "\n"}/.loopwarden/\n`);
}

/** The `Key: value` trailers of a commit's message. */
export async function readTrailers(repo: string, commit: string): Promise<Record<string, string>> {
  const out = await git(repo, ["log", "-1", "--format=%(trailers:unfold,only)", commit]);
  const trailers: Record<string, string> = {};
  for (const line of out.split("\n")) {
    const match = /^([A-Za-z0-9-]+):\s*(.*)$/.exec(line.trim());
    if (match?.[1] && match[2] !== undefined) trailers[match[1]] = match[2];
  }
  return trailers;
}

/**
 * How a receipt names the repository (DESIGN §9): its `origin` remote, without any credentials a URL
 * carries; undefined when it has none (the receipt then names the loop).
 */
export async function repositoryName(repo: string): Promise<string | undefined> {
  const url = (await git(repo, ["remote", "get-url", "origin"]).catch(() => "")).trim();
  if (url === "") return undefined;
  try {
    const parsed = new URL(url);
    parsed.username = "";
    parsed.password = "";
    return parsed.href.slice(0, 500);
  } catch {
    // scp-like (git@host:org/repo.git) or a path: no password to strip.
    return url.slice(0, 500);
  }
}
