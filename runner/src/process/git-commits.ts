import { sha256Hex } from "#shared/hash.js";
import { committedHead, git } from "./git.js";
import { RecentPromises } from "./recent-promises.js";

// The runner's commits on the loop's branch (DESIGN §13): candidates committed from the working tree or
// read out of an agent's workspace, the change each makes, and how a rejection puts the branch back —
// the rejected candidate kept under its ref, nothing ever lost.

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

// The tree of each commit the runner made or asked about, by repository and commit: whether a candidate
// changes anything is whether its tree is its parent's, known without a git process once the parent (the
// best so far, usually a commit the runner made) is here. Commits never change; the last few are kept.
const trees = new RecentPromises<string>(64);

/** The tree `commit` records. */
export function treeOf(repo: string, commit: string): Promise<string> {
  return trees.get(`${repo}\0${commit}`, () => git(repo, ["rev-parse", "--verify", `${commit}^{tree}`]).then((out) => out.trim()));
}

/** A path's change between two trees, as `git diff --raw` gives it: its status letter and its path(s). */
export interface PathChange {
  /** A, C, D, M, R, T (…): added, copied, deleted, modified, renamed, type changed. */
  status: string;
  /** The path; for a rename or a copy, its source, then its destination. */
  paths: string[];
}

/**
 * Splits the output of `git diff --raw -z -p …` into its raw entries and its patch: the patch is the
 * bytes the same diff gives without `--raw -z` (the raw part comes first, then a NUL, then the patch).
 * Null for output that is not shaped so, which the caller then takes apart no further.
 */
export function splitRawPatch(out: string): { changes: PathChange[]; patch: string } | null {
  const changes: PathChange[] = [];
  let at = 0;
  const field = (): string | null => {
    const end = out.indexOf("\0", at);
    if (end === -1) return null;
    const text = out.slice(at, end);
    at = end + 1;
    return text;
  };
  while (out[at] === ":") {
    const status = field()?.split(" ")[4]?.[0];
    if (status === undefined) return null;
    const paths: string[] = [];
    for (let count = status === "R" || status === "C" ? 2 : 1; count > 0; count--) {
      const name = field();
      if (name === null) return null;
      // The output is read as latin1 (bytes); a path is UTF-8, as `ls-tree` answers it.
      paths.push(Buffer.from(name, "latin1").toString("utf8"));
    }
    changes.push({ status, paths });
  }
  if (changes.length > 0) {
    if (out[at] !== "\0") return null;
    at++;
  }
  const patch = out.slice(at);
  if (patch !== "" && !patch.startsWith("diff --git ")) return null;
  return { changes, patch };
}

/** What `snapshotWorkTree` tells its caller along the way. */
export interface SnapshotHooks {
  /**
   * Hears of the candidate's tree as soon as it is written, before the commit that records it: what
   * needs only the files (the clone's checkout) can begin while the commit object is written.
   */
  onTree?: (tree: string) => void;
  /**
   * Hears of the commit as soon as it exists, before the branch moves to it, with whether it changes
   * anything (its tree is not its parent's); its patch is still being read.
   */
  onCommitted?: (commit: string, change: { empty: boolean; paths: Promise<PathChange[]> }) => void;
  /** Awaited before the branch and the working tree move to the commit; what it throws stops them. */
  beforeBranchMoves?: () => Promise<void>;
}

/**
 * Commits the tree an agent left in `workTree` (its workspace, DESIGN §6.7) onto the current branch of
 * `repo` as a child of `parent`, and moves the branch and the working tree there. The workspace is read
 * as data: git runs in `repo`, with `repo`'s configuration and an index of the runner's own (`index`, a
 * copy of the workspace's index taken before the agent ran, so only what the agent touched is hashed
 * again), never with the workspace's `.git`, which the agent could have written (a `core.fsmonitor`
 * command, a filter, an include). Answers the commit and its change from `parent`, taken from the same
 * index, as `diffOf(repo, parent, commit)` would.
 *
 * Between the agent's end and the candidate's evaluation there are three git processes, one after
 * another (`add`, `write-tree`, then `commit-tree` beside the clone's checkout of the tree, `onTree`):
 * the patch, which only the proposal needs, is read beside them, and whether the candidate changes
 * anything is told by its tree (issue 30).
 */
export async function snapshotWorkTree(
  repo: string,
  workTree: string,
  index: string,
  message: string,
  parent: string,
  hooks: SnapshotHooks = {},
): Promise<{ commit: string; diff: Diff }> {
  const env = { GIT_INDEX_FILE: index };
  const parentTree = treeOf(repo, parent).catch(() => null);
  await git(repo, ["--work-tree", workTree, "add", "-A"], { env });
  // `diff --cached` reads the index without refreshing it, so it never contends for the lock `write-tree`
  // takes. With `--raw -z`, the same process names the changed paths too: the candidate's files are
  // then its parent's with those changes, without a listing of its own (issue 30).
  const diffing = git(repo, ["--work-tree", workTree, "diff", "--cached", "--raw", "-z", ...DIFF_OPTIONS, parent], { env, encoding: "buffer" }).then((out) =>
    splitRawPatch(out),
  );
  const patching = diffing.then(
    (split) => split?.patch ?? git(repo, ["--work-tree", workTree, "diff", "--cached", ...DIFF_OPTIONS, parent], { env, encoding: "buffer" }),
  );
  patching.catch(() => undefined);
  const paths = diffing.then((split) => {
    if (!split) throw new Error("git diff --raw answered output that could not be read");
    return split.changes;
  });
  paths.catch(() => undefined);
  const tree = (await git(repo, ["write-tree"], { env })).trim();
  hooks.onTree?.(tree);
  const identity = await identityArgs(repo);
  const commit = (await git(repo, [...identity, "commit-tree", tree, "-p", parent, "-m", message])).trim();
  void trees.set(`${repo}\0${commit}`, Promise.resolve(tree));
  // What needs only the commit object (a clone of it) begins while the branch and the working tree move.
  hooks.onCommitted?.(commit, { empty: tree === (await parentTree), paths });
  await hooks.beforeBranchMoves?.();
  await git(repo, ["reset", "-q", "--hard", commit]);
  return { commit, diff: diffOfPatch(await patching) };
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
