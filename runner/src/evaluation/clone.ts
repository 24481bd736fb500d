import { randomBytes } from "node:crypto";
import { mkdir, readdir, realpath, rm, rmdir } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { cloneEnv, isWithin } from "./environment.js";
import { UserError } from "../errors.js";
import { objectsDirOf } from "../process/git.js";
import { blankClone, checkoutDetached, checkoutTree, detachAt } from "../process/git-clone.js";
import { treeOf } from "../process/git-commits.js";
import type { Evaluation, EvaluationAhead, GateHooks } from "./evaluation.js";
import { heldHooks } from "./evaluation.js";
import type { GuardReadingsBeforeGates } from "./guard-readings.js";
import { isProcessAlive } from "../process/processes.js";
import { timed } from "../timings.js";
import { hideFromZones, hideRepositoryOf, type ZoneSpec } from "../zones/sandbox.js";
import { coolZones, warmZoneFor, zonesStarted } from "../zones/warm-zones.js";

// Where candidates are evaluated (DESIGN §6.4): a fresh detached clone of the commit, outside the
// repository, so nothing untracked in the working tree — node_modules/, .venv/, build output, a binary
// an agent planted — is reachable from it by a parent-directory lookup (Node's module resolution, npx,
// npm's PATH, Python's), and with an environment that names no path inside the working tree.

/** A clone being evaluated: where it is, and the environment every command run in it gets. */
export interface Clone {
  dir: string;
  env: NodeJS.ProcessEnv;
  /** Aborted when the job this clone serves is lost (its lease reclaimed): every command in it is killed. */
  signal?: AbortSignal | undefined;
  /** The guard readings `cloneAhead` took as soon as the checkout was made, before anything ran in it. */
  guardsBefore?: Promise<GuardReadingsBeforeGates> | undefined;
  /** The repository's object store, which the clone borrows: readable in the exec zone (DESIGN §6.7). */
  objects?: string | undefined;
  /** The evaluation `cloneAhead` began in this clone before its job was leased, for the job to adopt. */
  evaluationAhead?: EvaluationAhead | undefined;
}

/** The directory all runner processes keep their clones under: the system's temporary directory. */
export function clonesRoot(): string {
  return path.join(os.tmpdir(), "loopwarden-clones");
}

/** This process's clones: a directory per process, so concurrent runners never collide. */
function processDir(pid = process.pid): string {
  return path.join(clonesRoot(), String(pid));
}

/** The working tree's paths as given and as resolved (a symlinked checkout has two names). */
async function workTreePaths(repo: string): Promise<string[]> {
  const real = await realpath(repo).catch(() => repo);
  return [...new Set([path.resolve(repo), real])];
}

/**
 * Removes clones left behind by runner processes that no longer exist (killed mid-evaluation); the
 * clones of a process still running (a probe beside a run, another repository's loop) are left alone.
 */
export async function removeStaleClones(): Promise<void> {
  const root = clonesRoot();
  const entries = await readdir(root).catch((): string[] => []);
  for (const entry of entries) {
    if (!isProcessAlive(Number(entry))) await rm(path.join(root, entry), { recursive: true, force: true });
  }
}

/** Refuses a temporary directory inside the repository: clones there could reach the working tree's untracked files. */
async function checkedTreePaths(repo: string): Promise<string[]> {
  const trees = await workTreePaths(repo);
  // A clone's exec zone never sees the repository it was made from (DESIGN §6.7).
  for (const tree of trees) hideFromZones(tree);
  const root = await realpath(os.tmpdir()).catch(() => os.tmpdir());
  if (trees.some((tree) => isWithin(root, tree))) {
    throw new UserError(
      `the temporary directory ${os.tmpdir()} is inside the repository ${repo}, so clones there could reach the working tree's untracked files; set TMPDIR to a directory outside it`,
    );
  }
  return trees;
}

// This process's clones made or being made and not yet removed, and the removals in progress: removals
// run one after another, and the process's directory goes once no clone is left in it. A clone being
// made waits for them, so the directory is never removed between its creation and the clone's.
let liveClones = 0;
let tidying: Promise<void> = Promise.resolve();

/** Makes a clone with nothing checked out (`blankClone`) in this process's directory. */
async function makeBlank(repo: string, label: string): Promise<{ dir: string; shared: boolean }> {
  liveClones++;
  const dir = path.join(processDir(), `${label}-${randomBytes(4).toString("hex")}`);
  try {
    await tidying;
    await mkdir(processDir(), { recursive: true, mode: 0o700 });
    const { shared } = await timed("clone", () => blankClone(repo, dir));
    return { dir, shared };
  } catch (error) {
    await removeClone(dir);
    throw error;
  }
}

/** A clone made ahead (`prepareClone`): nothing checked out yet, or the tree `checkoutTreeAhead` read into it. */
interface Blank {
  dir: string;
  shared: boolean;
  tree?: string;
}

// Blank clones made ahead of a commit, by repository: `prepareClone` starts one while the candidate's
// commit is being written, and the next clone of that repository checks the commit out in it.
const blanks = new Map<string, Promise<Blank>>();
const repoKey = (repo: string) => path.resolve(repo);

/**
 * Starts a blank clone of `repo` now (`blankClone`), for the next clone of the repository, of whatever
 * commit, to take: the runner calls it when an agent run ends, so the clone is made while the candidate
 * is committed. Taken by the next `cloneAhead` or `withClone`, or removed by `dropPreparedClone`.
 */
export function prepareClone(repo: string): void {
  const key = repoKey(repo);
  if (blanks.has(key)) return;
  const made = checkedTreePaths(repo).then(() => makeBlank(repo, "ahead"));
  // A failure is met again by the clone that takes it, which then makes its own.
  made.catch(() => undefined);
  blanks.set(key, made);
}

/**
 * Checks `tree` out in the blank clone `prepareClone` started for `repo` (when there is one that shares
 * the repository's objects), for the clone of the commit made of that tree to take with only its HEAD
 * left to set: the runner calls it once a candidate's tree is written, so the clone's checkout runs
 * beside the commit's (issue 30). A checkout that fails leaves a clone of its own to be made.
 */
export function checkoutTreeAhead(repo: string, tree: string): void {
  const key = repoKey(repo);
  const made = blanks.get(key);
  if (!made) return;
  const checkedOut = made.then(async (blank) => {
    if (!blank.shared || blank.tree !== undefined) return blank;
    try {
      await timed("clone", () => checkoutTree(blank.dir, tree));
      return { ...blank, tree };
    } catch (error) {
      await removeClone(blank.dir);
      throw error;
    }
  });
  checkedOut.catch(() => undefined);
  blanks.set(key, checkedOut);
}

/**
 * Starts the zone `zoneOf` gives for the clone `prepareClone` is making for `repo` (warm-zones.ts), for
 * the first command run there to take (`prepareEvaluationClone`). Nothing when it gives none; a failure
 * only means a cold start.
 */
export function warmPreparedClone(repo: string, zoneOf: (clone: { dir: string; objects: string }) => ZoneSpec | undefined): void {
  const made = blanks.get(repoKey(repo));
  if (!made) return;
  warmZoneFor(
    made.then(async (blank) => {
      if (!blank.shared) return undefined;
      const objects = await objectsDirOf(repo);
      hideRepositoryOf(objects);
      return zoneOf({ dir: blank.dir, objects });
    }),
  );
}

/** The blank clone `prepareClone` started for `repo`, no longer there for another clone to take. */
function takePrepared(repo: string): Promise<Blank> | undefined {
  const made = blanks.get(repoKey(repo));
  blanks.delete(repoKey(repo));
  return made;
}

/** Removes the blank clone `prepareClone` started for `repo`, unless a clone took it. */
export async function dropPreparedClone(repo: string): Promise<void> {
  const made = takePrepared(repo);
  if (!made) return;
  await zonesStarted();
  const blank = await made.catch(() => null);
  if (blank) await removeClone(blank.dir);
}

/**
 * Makes a fresh detached clone of `commit` in this process's directory and answers where it is: in the
 * blank clone `prepareClone` made when there is one that shares the repository's objects (one that does
 * not may predate the commit, so it is removed), else in a new one.
 */
async function makeClone(repo: string, commit: string, label: string, prepared = takePrepared(repo)): Promise<string> {
  let blank = prepared ? await prepared.catch(() => null) : null;
  if (blank && !blank.shared) {
    await removeClone(blank.dir);
    blank = null;
  }
  // A clone whose tree was checked out ahead (`checkoutTreeAhead`) needs only its HEAD, when that tree
  // is the commit's; one holding another tree is not used.
  if (blank?.tree !== undefined) {
    const tree = blank.tree;
    const matches = await treeOf(repo, commit).then(
      (commitTree) => commitTree === tree,
      () => false,
    );
    if (matches) {
      const { dir } = blank;
      try {
        await detachAt(dir, commit);
      } catch (error) {
        await removeClone(dir);
        throw error;
      }
      return dir;
    }
    await removeClone(blank.dir);
    blank = null;
  }
  const { dir } = blank ?? (await makeBlank(repo, label));
  try {
    await timed("clone", () => checkoutDetached(dir, commit));
  } catch (error) {
    await removeClone(dir);
    throw error;
  }
  return dir;
}

/** Settles when every removal of a clone this process has started so far is done. */
export function clonesRemoved(): Promise<void> {
  return tidying;
}

function removeClone(dir: string): Promise<void> {
  const cooled = coolZones(dir);
  const removal = tidying.then(async () => {
    try {
      await cooled;
      await rm(dir, { recursive: true, force: true });
    } finally {
      liveClones--;
      // The process's directory goes too once empty (another clone of this process may still be in it).
      if (liveClones === 0) await rmdir(processDir()).catch(() => undefined);
    }
  });
  tidying = removal.catch(() => undefined);
  return removal;
}

// Clones made ahead of their use, by repository and commit: the runner starts a candidate's clone while
// its proposal and lease are in flight, so the evaluation's clone is not on the iteration's critical path.
interface Ahead {
  dir: Promise<string>;
  guardsBefore?: Promise<GuardReadingsBeforeGates> | undefined;
  evaluation?: EvaluationAhead | undefined;
}
const ahead = new Map<string, Ahead>();
const aheadKey = (repo: string, commit: string) => `${repoKey(repo)}\0${commit}`;

/** What `cloneAhead` begins in the clone as soon as it is checked out. */
export interface WorkAhead {
  /** Takes the guard readings (DESIGN §6.4) before anything can run in the clone; the clone carries them. */
  readGuards?: (dir: string) => Promise<GuardReadingsBeforeGates>;
  /** Evaluates the commit at once, before its job is leased: the `withClone` that takes the clone adopts it. */
  evaluate?: (clone: Clone, hooks: GateHooks) => Promise<Evaluation>;
}

/**
 * Starts a clean clone of `commit` now, for the next `withClone` of the same repository and commit to
 * take, and begins `work` in it. One never taken must be given back with `dropCloneAhead`.
 */
export function cloneAhead(repo: string, commit: string, work: WorkAhead = {}): void {
  const key = aheadKey(repo, commit);
  if (ahead.has(key)) return;
  // The blank clone is taken now, so none made for this candidate is left for another to take.
  const prepared = takePrepared(repo);
  const trees = checkedTreePaths(repo);
  const dir = trees.then(() => makeClone(repo, commit, `ahead-${commit.slice(0, 10)}`, prepared));
  const readGuards = work.readGuards;
  const guardsBefore = readGuards ? dir.then((made) => timed("guards", () => readGuards(made))) : undefined;
  // A failure is met again by the withClone that takes it (or is moot when nothing does).
  dir.catch(() => undefined);
  guardsBefore?.catch(() => undefined);
  ahead.set(key, { dir, guardsBefore, evaluation: work.evaluate ? evaluateAhead(repo, trees, dir, guardsBefore, work.evaluate) : undefined });
}

/** Begins `evaluate` in the clone being made, with its own signal and its progress held for the job that adopts it. */
function evaluateAhead(
  repo: string,
  trees: Promise<string[]>,
  dir: Promise<string>,
  guardsBefore: Promise<GuardReadingsBeforeGates> | undefined,
  evaluate: NonNullable<WorkAhead["evaluate"]>,
): EvaluationAhead {
  const stopped = new AbortController();
  const held = heldHooks();
  let gateStarted = () => {};
  const started = new Promise<void>((resolve) => (gateStarted = resolve));
  const hooks: GateHooks = {
    ...held.hooks,
    onGateStart: (gate) => {
      gateStarted();
      held.hooks.onGateStart(gate);
    },
  };
  const result = (async () => {
    const clone = await cloneOf(repo, await dir, await trees);
    stopped.signal.throwIfAborted();
    return evaluate({ ...clone, guardsBefore, signal: stopped.signal }, hooks);
  })();
  result.catch(() => undefined).finally(gateStarted);
  return { result, started, adopt: (bind) => held.bind(bind), stop: (reason) => stopped.abort(reason) };
}

/** Settles once the evaluation `cloneAhead` began for `commit` has started its first gate (at once when it began none). */
export async function evaluationStarted(repo: string, commit: string): Promise<void> {
  await ahead.get(aheadKey(repo, commit))?.evaluation?.started;
}

/** Removes the clone `cloneAhead` started for `commit`, unless a `withClone` took it, stopping what it began there. */
export async function dropCloneAhead(repo: string, commit: string): Promise<void> {
  const key = aheadKey(repo, commit);
  const made = ahead.get(key);
  if (!made) return;
  ahead.delete(key);
  made.evaluation?.stop();
  await Promise.all([made.guardsBefore?.catch(() => undefined), made.evaluation?.result.catch(() => undefined)]);
  const dir = await made.dir.catch(() => null);
  if (dir) await removeClone(dir);
}

/** The clone at `dir` as its commands see it: the environment naming no path of `trees`, the borrowed object store hidden from zones but readable. */
async function cloneOf(repo: string, dir: string, trees: string[]): Promise<Clone> {
  const objects = await objectsDirOf(repo);
  hideRepositoryOf(objects);
  return { dir, env: cloneEnv(trees), objects };
}

/**
 * Runs `use` on a fresh detached clone of `commit` in the system's temporary directory (never the
 * agent's working tree, never beneath it), and removes the clone afterwards whatever happens. A clone
 * `cloneAhead` started for the same commit is used when there is one.
 */
export async function withClone<T>(repo: string, commit: string, label: string, use: (clone: Clone) => Promise<T>): Promise<T> {
  const trees = await checkedTreePaths(repo);
  const key = aheadKey(repo, commit);
  const made = ahead.get(key);
  ahead.delete(key);
  const dir = await (made?.dir ?? makeClone(repo, commit, label));
  try {
    return await use({ ...(await cloneOf(repo, dir, trees)), guardsBefore: made?.guardsBefore, evaluationAhead: made?.evaluation });
  } finally {
    // An evaluation begun ahead never outlives its clone, adopted or not.
    made?.evaluation?.stop();
    await made?.evaluation?.result.catch(() => undefined);
    // Removed while the runner goes on (the verdict is applied, the next agent starts): not on the
    // iteration's critical path. A process that ends waits for it; one killed first leaves the clone to
    // the next runner's removeStaleClones.
    removeClone(dir).catch(() => undefined);
  }
}
