import { access, appendFile, mkdir, readdir, readFile, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { committedHead, git, gitDirectoriesOf, headFile, OBJECT_ID } from "./git.js";

// Clones for evaluations and agents' workspaces (DESIGN §6.4, §6.7): made from the repository's own
// object store, with nothing of the user's working tree, no remote and hooks off.

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
  await initRepository(repo, dir);
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

/** What `git init -q --template=` makes in a directory's `.git`: its directories and files, in the order made. */
interface InitSkeleton {
  dirs: string[];
  files: { name: string; data: Buffer; mode: number }[];
}

// The `.git` skeleton `git init` made, read once per process and parent directory: every clone and
// workspace starts as the same few files (HEAD, config, empty object and ref directories), so the next
// ones are written from it instead of a git process each (issue 30: two processes an iteration, the next
// workspace's and the next candidate's clone). Per parent directory, because `git init` probes the file
// system it writes to (`core.filemode`, `core.symlinks`, `core.ignorecase`); git and its global
// configuration do not change while the process runs.
const skeletons = new Map<string, Promise<InitSkeleton>>();

/** An empty repository at `dir` (no template), as `git init -q --template= dir` makes it. */
async function initRepository(repo: string, dir: string): Promise<void> {
  const parent = path.resolve(path.dirname(dir));
  const known = await skeletons.get(parent)?.catch(() => null);
  if (known) {
    await laySkeleton(known, path.join(dir, ".git"));
    return;
  }
  await git(repo, ["init", "-q", "--template=", dir]);
  if (skeletons.has(parent)) return;
  const read = readSkeleton(path.join(dir, ".git"));
  skeletons.set(parent, read);
  read.catch(() => skeletons.delete(parent));
  await read.catch(() => undefined);
}

/** The directories and files under `gitDir` just after `git init` made them (see InitSkeleton). */
async function readSkeleton(gitDir: string): Promise<InitSkeleton> {
  const skeleton: InitSkeleton = { dirs: [], files: [] };
  const walk = async (relative: string): Promise<void> => {
    for (const entry of await readdir(path.join(gitDir, relative), { withFileTypes: true })) {
      const name = path.join(relative, entry.name);
      if (entry.isDirectory()) {
        skeleton.dirs.push(name);
        await walk(name);
      } else if (entry.isFile()) {
        const file = path.join(gitDir, name);
        const [data, info] = await Promise.all([readFile(file), stat(file)]);
        skeleton.files.push({ name, data, mode: info.mode & 0o777 });
      } else {
        // A symbolic link or anything else is not what this copies: no skeleton, `git init` every time.
        throw new Error(`unexpected ${name} in a new repository`);
      }
    }
  };
  await walk("");
  return skeleton;
}

/** Writes `skeleton` as the git directory `gitDir`. */
async function laySkeleton(skeleton: InitSkeleton, gitDir: string): Promise<void> {
  await mkdir(gitDir, { recursive: true });
  for (const name of skeleton.dirs) await mkdir(path.join(gitDir, name));
  await Promise.all(skeleton.files.map(({ name, data, mode }) => writeFile(path.join(gitDir, name), data, { mode, flag: "wx" })));
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

/** Checks out `commit`, detached, in a clone `blankClone` made. */
export async function checkoutDetached(dir: string, commit: string): Promise<void> {
  await git(dir, ["checkout", "-q", "--detach", commit]);
}

/**
 * Checks out `tree` (a candidate's, read from the runner's index before its commit is written) in a
 * clone `blankClone` made: index and files, as `checkoutDetached` of a commit holding that tree leaves
 * them; `detachAt` then points its HEAD at the commit. So the clone is checked out while the commit
 * object is written, one git process fewer between an agent's end and its candidate's gates (issue 30).
 */
export async function checkoutTree(dir: string, tree: string): Promise<void> {
  await git(dir, ["read-tree", "-u", "--reset", tree]);
}

/**
 * Points a clone's HEAD, detached, at `commit`, as `checkoutDetached` leaves it: the clone's own HEAD
 * file, which `blankClone` wrote, holds the commit's id. For a clone whose index and files are already
 * `commit`'s tree (`checkoutTree`).
 */
export async function detachAt(dir: string, commit: string): Promise<void> {
  if (!OBJECT_ID.test(commit)) throw new Error(`not a commit id: ${commit}`);
  await writeFile(path.join(dir, ".git", "HEAD"), `${commit}\n`);
}

/** A fresh detached clone of one commit for evaluation (`blankClone`, then `checkoutDetached`). */
export async function cloneAt(repo: string, commit: string, dir: string): Promise<void> {
  await blankClone(repo, dir);
  await checkoutDetached(dir, commit);
}
