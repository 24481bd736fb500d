import { access, appendFile, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { sha256Hex } from "../../shared/hash.js";
import { UserError } from "./errors.js";
import { execCommand, ExecFailure } from "./spawner.js";
import { countSpawn } from "./timings.js";

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

/** Runs git in `cwd` and returns stdout; `env` adds variables (an index file of the runner's own). */
export async function git(cwd: string, args: string[], options: { encoding?: "buffer"; env?: Record<string, string> } = {}): Promise<string> {
  countSpawn();
  try {
    return await execCommand("git", [...SAFE_CONFIG, ...args], {
      cwd,
      maxBuffer: 512 * 1024 * 1024,
      env: { ...withoutRepoLocatingGitEnv(process.env), GIT_TERMINAL_PROMPT: "0", ...options.env },
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

function gitDirectoriesOf(repo: string): Promise<{ gitDir: string; commonDir: string }> {
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

const OBJECT_ID = /^[0-9a-f]{40}(?:[0-9a-f]{24})?$/;

/** What HEAD's file says: the ref it names, or the commit a detached HEAD is at; null when it is neither. */
async function headFile(repo: string): Promise<{ ref: string } | { commit: string } | null> {
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
async function committedHead(repo: string): Promise<string> {
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

// Read once per repository and process: a git process per commit only to learn the identity is not.
const identities = new Map<string, Promise<string[]>>();

/** `-c` options giving commits an identity when the repository's git config has none. */
function identityArgs(repo: string): Promise<string[]> {
  let identity = identities.get(repo);
  if (!identity) {
    identity = git(repo, ["config", "user.email"]).then(
      (email) => (email.trim() ? [] : ["-c", "user.name=loopwarden", "-c", "user.email=loopwarden@localhost"]),
      () => ["-c", "user.name=loopwarden", "-c", "user.email=loopwarden@localhost"],
    );
    identities.set(repo, identity);
  }
  return identity;
}

/** The loop's branch name (DESIGN §13). */
export function loopBranch(loopId: string): string {
  return `loopwarden/${loopId}`;
}

/** Creates the loop's branch at HEAD and switches the working tree to it. */
export async function switchToLoopBranch(repo: string, loopId: string, commit: string): Promise<void> {
  const branch = loopBranch(loopId);
  const exists = await git(repo, ["rev-parse", "--verify", "-q", `refs/heads/${branch}`]).then(
    () => true,
    () => false,
  );
  if (exists) await git(repo, ["switch", "-q", branch]);
  else await git(repo, ["switch", "-q", "-c", branch, commit]);
}

/** A change between two trees: the digest of its binary patch, and whether it changes nothing. */
export interface Diff {
  sha256: string;
  empty: boolean;
}

function diffOfPatch(patch: string): Diff {
  return { sha256: sha256Hex(Buffer.from(patch, "latin1")), empty: patch.length === 0 };
}

// Options of every diff a candidate's digest is taken of: the same bytes whichever way it is taken.
const DIFF_OPTIONS = ["--binary", "--no-color", "--no-ext-diff"];

/**
 * Commits the whole working tree (tracked, untracked, deletions; ignored files excluded) as a candidate
 * on the current branch and answers the commit id. An unchanged tree still yields a commit, so every
 * agent run has a candidate to record. With `diffFrom`, also answers the change from that commit, as
 * `diffOf(repo, diffFrom, commit)` would: taken from the index the commit is made of, while git writes
 * the commit. Git's automatic maintenance is not run after each commit (a git process an iteration);
 * `maintainRepository` runs it when a run ends.
 */
export async function snapshotCandidate(repo: string, message: string, diffFrom?: string): Promise<{ commit: string; diff: Diff | null }> {
  await git(repo, ["add", "-A"]);
  const committing = identityArgs(repo).then((identity) =>
    git(repo, [...identity, "-c", "maintenance.auto=false", "commit", "-q", "--allow-empty", "--no-verify", "-m", message]),
  );
  // `diff --cached` reads the index without refreshing it, so it never contends for the lock `commit` takes.
  const diffing = diffFrom === undefined ? null : git(repo, ["diff", "--cached", ...DIFF_OPTIONS, diffFrom], { encoding: "buffer" });
  diffing?.catch(() => undefined);
  await committing;
  const diff = diffing ? diffOfPatch(await diffing) : null;
  return { commit: await committedHead(repo), diff };
}

/**
 * Commits the tree an agent left in `workTree` (its workspace, DESIGN §6.7) onto the current branch of
 * `repo` as a child of `parent`, and moves the branch and the working tree there. The workspace is read
 * as data: git runs in `repo`, with `repo`'s configuration and an index of the runner's own (`index`, a
 * copy of the workspace's index taken before the agent ran, so only what the agent touched is hashed
 * again), never with the workspace's `.git`, which the agent could have written (a `core.fsmonitor`
 * command, a filter, an include). Answers the commit and its change from `parent`, taken from the same
 * index, as `diffOf(repo, parent, commit)` would. `onCommitted` hears of the commit as soon as it exists,
 * before the branch moves to it.
 */
export async function snapshotWorkTree(
  repo: string,
  workTree: string,
  index: string,
  message: string,
  parent: string,
  onCommitted?: (commit: string, diff: Diff) => void,
): Promise<{ commit: string; diff: Diff }> {
  const env = { GIT_INDEX_FILE: index };
  await git(repo, ["--work-tree", workTree, "add", "-A"], { env });
  const [tree, patch] = await Promise.all([
    git(repo, ["write-tree"], { env }),
    git(repo, ["--work-tree", workTree, "diff", "--cached", ...DIFF_OPTIONS, parent], { env, encoding: "buffer" }),
  ]);
  const identity = await identityArgs(repo);
  const commit = (await git(repo, [...identity, "commit-tree", tree.trim(), "-p", parent, "-m", message])).trim();
  const diff = diffOfPatch(patch);
  // What needs only the commit object (a clone of it) begins while the branch and the working tree move.
  onCommitted?.(commit, diff);
  await git(repo, ["reset", "-q", "--hard", commit]);
  return { commit, diff };
}

/**
 * Keeps the tree left in `workTree` (an interrupted agent's workspace) as a commit on `base` under
 * `ref`, read as `snapshotWorkTree` reads it, without moving any branch or touching the working tree.
 * Answers false, and keeps nothing, when the tree is `base`'s or cannot be read.
 */
export async function setAsideWorkTree(repo: string, workTree: string, index: string, base: string, ref: string, message: string): Promise<boolean> {
  try {
    const env = { GIT_INDEX_FILE: index };
    await git(repo, ["--work-tree", workTree, "add", "-A"], { env });
    const tree = (await git(repo, ["write-tree"], { env })).trim();
    if (tree === (await git(repo, ["rev-parse", `${base}^{tree}`])).trim()) return false;
    const identity = await identityArgs(repo);
    const commit = (await git(repo, [...identity, "commit-tree", tree, "-p", base, "-m", message])).trim();
    await git(repo, ["update-ref", ref, commit]);
    return true;
  } catch {
    return false;
  }
}

/** Runs git's automatic maintenance, as a commit would have (`git maintenance run --auto`). */
export async function maintainRepository(repo: string): Promise<void> {
  await git(repo, ["maintenance", "run", "--auto", "--quiet"]);
}

/** Digest of the change from `base` to `commit`, and whether it changes nothing. */
export async function diffOf(repo: string, base: string, commit: string): Promise<Diff> {
  return diffOfPatch(await git(repo, ["diff", ...DIFF_OPTIONS, base, commit], { encoding: "buffer" }));
}

/** The ref a rejected candidate is kept under (nothing is ever lost, DESIGN §13). */
export function rejectedRef(loopId: string, candidateId: string): string {
  return `refs/loopwarden/rejected/${loopId}/${candidateId}`;
}

/**
 * Applies a rejection: keeps the candidate under its rejected ref (unless `keep` is null), then restores
 * the loop branch and working tree to the best commit. Only the loop branch moves; the user's branches
 * are untouched.
 */
export async function revertTo(repo: string, best: string, keep: { ref: string; commit: string } | null): Promise<void> {
  // The ref is written before the branch moves, so a crash never leaves the candidate without it. What
  // is untracked beside the candidate is removed meanwhile (the ref and the files are apart): the reset
  // then leaves exactly the best commit's tree, as a reset followed by a clean would. A candidate that
  // changed nothing (`keep` null) has nothing to keep.
  await Promise.all([keep ? git(repo, ["update-ref", keep.ref, keep.commit]) : null, git(repo, ["clean", "-q", "-fd"])]);
  await git(repo, ["reset", "-q", "--hard", best]);
}

/**
 * A clone of `repo` for evaluation with nothing checked out yet: never the agent's working tree (DESIGN
 * §6.4). Hooks are disabled and no remote is left configured, so a gate cannot push or reach credentials
 * through git. These calls never contact a remote (a local clone whose origin is removed before any
 * checkout), so no credential helper is ever consulted; the user's global and system git config still
 * apply, since checkout filters (e.g. line endings) live there.
 *
 * The clone borrows the repository's object store (`--shared`: `objects/info/alternates`) instead of
 * copying or hard-linking it, so it costs the same whatever the history's size, and a commit made in the
 * repository after the clone can still be checked out in it: a candidate's clone is made while its
 * commit is being written. Answers false when git could not share the store (a shallow repository, where
 * it copies instead): such a clone holds only the commits that existed when it was made.
 */
export async function blankClone(repo: string, dir: string): Promise<{ shared: boolean }> {
  await mkdir(path.dirname(dir), { recursive: true });
  if (await borrowInPlace(repo, dir)) return { shared: true };
  // `--config` writes the setting into the new clone's own config, as `git config` after it would.
  await git(repo, ["clone", "-q", "--shared", "--no-checkout", "--config", "core.hooksPath=/dev/null", repo, dir]);
  await git(dir, ["remote", "remove", "origin"]);
  const shared = await access(path.join(dir, ".git", "objects", "info", "alternates")).then(
    () => true,
    () => false,
  );
  return { shared };
}

/**
 * What `git clone --shared --no-checkout` and `remote remove origin` make, for the common repository,
 * with one git process instead of two (and none of clone's local transport): an empty repository
 * (`git init`, no template: no sample hooks), `core.hooksPath=/dev/null` in its config, the source's
 * object store borrowed through `objects/info/alternates`, and the source's tags, so `git describe` in
 * a gate answers as in a clone. Measured here: 13 ms a clone with its checkout, against 41 ms. Answers
 * false, making nothing, for a repository this cannot reproduce exactly — shallow, another object
 * format or ref storage (any `[extensions]`), tags git stores other than as files — which is cloned.
 */
async function borrowInPlace(repo: string, dir: string): Promise<boolean> {
  const { commonDir } = await gitDirectoriesOf(repo);
  const [config, shallow, tags, head] = await Promise.all([
    readFile(path.join(commonDir, "config"), "utf8").catch(() => null),
    access(path.join(commonDir, "shallow")).then(
      () => true,
      () => false,
    ),
    tagsOf(commonDir),
    headFile(repo),
  ]);
  if (config === null || /^\s*\[extensions\]/im.test(config) || shallow || tags === null) return false;
  // As a clone has it: HEAD on the source's current branch, at its commit (or detached there), so `HEAD`
  // names the same commit in the clone as in the source until something is checked out.
  const branch = head && "ref" in head && head.ref.startsWith("refs/heads/") ? head.ref : null;
  const commit = head ? await committedHead(repo).catch(() => null) : null;
  const refs = [...tags, ...(branch && commit ? [{ name: branch, id: commit }] : [])];
  await git(repo, ["init", "-q", "--template=", dir]);
  const gitDir = path.join(dir, ".git");
  await Promise.all([
    appendFile(path.join(gitDir, "config"), "[core]\n\thooksPath = /dev/null\n"),
    mkdir(path.join(gitDir, "objects", "info"), { recursive: true }).then(() =>
      writeFile(path.join(gitDir, "objects", "info", "alternates"), `${path.join(commonDir, "objects")}\n`),
    ),
    mkdir(path.join(gitDir, "info"), { recursive: true }),
    refs.length > 0 ? writeFile(path.join(gitDir, "packed-refs"), refs.map(({ name, id }) => `${id} ${name}\n`).join("")) : null,
    commit ? writeFile(path.join(gitDir, "HEAD"), branch ? `ref: ${branch}\n` : `${commit}\n`) : null,
  ]);
  return true;
}

/**
 * The tags of a repository's common directory as its files hold them — `packed-refs` and loose refs
 * under `refs/tags` (a loose one wins) — or null when they cannot be read that way (a reftable, an
 * unreadable file).
 */
async function tagsOf(commonDir: string): Promise<{ name: string; id: string }[] | null> {
  const tags = new Map<string, string>();
  const packed = await readFile(path.join(commonDir, "packed-refs"), "utf8").catch((error: NodeJS.ErrnoException) => (error.code === "ENOENT" ? "" : null));
  if (packed === null) return null;
  for (const line of packed.split("\n")) {
    const match = /^([0-9a-f]{40}(?:[0-9a-f]{24})?) (refs\/tags\/\S+)$/.exec(line);
    if (match?.[1] && match[2]) tags.set(match[2], match[1]);
  }
  const loose = async (dir: string, prefix: string): Promise<boolean> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => (error.code === "ENOENT" ? [] : null));
    if (entries === null) return false;
    for (const entry of entries) {
      const name = `${prefix}/${entry.name}`;
      if (entry.isDirectory()) {
        if (!(await loose(path.join(dir, entry.name), name))) return false;
        continue;
      }
      const id = (await readFile(path.join(dir, entry.name), "utf8").catch(() => "")).trim();
      if (!OBJECT_ID.test(id)) return false;
      tags.set(name, id);
    }
    return true;
  };
  if (!(await loose(path.join(commonDir, "refs", "tags"), "refs/tags"))) return null;
  return [...tags].map(([name, id]) => ({ name, id })).sort((a, b) => (a.name < b.name ? -1 : 1));
}

/**
 * The paths where `commit` differs from `base` (added, changed, deleted, or a mode changed; a rename as
 * both of its paths), sorted, as `git diff-tree` names them: plumbing, so no diff configuration of the
 * repository can alter it.
 */
export async function changedPaths(repo: string, base: string, commit: string): Promise<string[]> {
  const out = await git(repo, ["diff-tree", "-r", "-z", "--no-commit-id", "--name-only", "--no-renames", base, commit]);
  return out
    .split("\0")
    .filter((name) => name !== "")
    .sort();
}

/** Checks out `commit`, detached, in a clone `blankClone` made. */
export async function checkoutDetached(dir: string, commit: string): Promise<void> {
  await git(dir, ["checkout", "-q", "--detach", commit]);
}

/** A fresh detached clone of one commit for evaluation (`blankClone`, then `checkoutDetached`). */
export async function cloneAt(repo: string, commit: string, dir: string): Promise<void> {
  await blankClone(repo, dir);
  await checkoutDetached(dir, commit);
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
 * Saves uncommitted changes (tracked and untracked) as a commit under `ref`, then cleans the working
 * tree back to HEAD: an interrupted agent run's edits are set aside, never thrown away.
 */
export async function setAsideChanges(repo: string, ref: string, message: string): Promise<void> {
  await git(repo, ["add", "-A"]);
  const tree = (await git(repo, ["write-tree"])).trim();
  const identity = await identityArgs(repo);
  const commit = (await git(repo, [...identity, "commit-tree", tree, "-p", "HEAD", "-m", message])).trim();
  await git(repo, ["update-ref", ref, commit]);
  await git(repo, ["reset", "-q", "--hard", "HEAD"]);
  await git(repo, ["clean", "-q", "-fd"]);
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
