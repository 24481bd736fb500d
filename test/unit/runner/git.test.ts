import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { currentBranch, repositoryName } from "../../../runner/src/process/git.js";
import { blankClone, checkoutDetached, cloneAt } from "../../../runner/src/process/git-clone.js";
import {
  diffOf,
  maintainRepository,
  revertTo,
  snapshotCandidate,
  snapshotWorkTree,
  splitRawPatch,
  type PathChange,
} from "../../../runner/src/process/git-commits.js";
import { committedFiles, committedFilesAfter, filesAfter, trackedFiles } from "../../../runner/src/evaluation/protected-files.js";
import { childEnv } from "../../../runner/src/evaluation/environment.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "lw-git-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const git = (cwd: string, ...args: string[]) => {
  const env = { ...process.env };
  delete env.GIT_DIR;
  return execFileSync("git", args, { cwd, encoding: "utf8", env });
};

describe("git calls on clones", () => {
  it("act on the clone even when GIT_DIR points at the user's repository (a runner started from a git hook)", async () => {
    const repo = path.join(dir, "user");
    execFileSync("git", ["init", "-q", "-b", "main", repo]);
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "--allow-empty", "-m", "initial");
    git(repo, "remote", "add", "origin", "https://example.com/user.git");
    const head = git(repo, "rev-parse", "HEAD").trim();

    const saved = process.env.GIT_DIR;
    process.env.GIT_DIR = path.join(repo, ".git");
    try {
      await cloneAt(repo, head, path.join(dir, "clone"));
      // Gates and agents do not inherit it either, so git inside a clone sees the clone.
      expect(childEnv().GIT_DIR).toBeUndefined();
    } finally {
      if (saved === undefined) delete process.env.GIT_DIR;
      else process.env.GIT_DIR = saved;
    }
    expect(git(repo, "remote").trim()).toBe("origin");
    expect(git(repo, "config", "--list", "--local")).not.toContain("core.hookspath");
    expect(git(repo, "symbolic-ref", "HEAD").trim()).toBe("refs/heads/main");
    expect(git(path.join(dir, "clone"), "remote").trim()).toBe("");
    // The clone runs no hook of the repository's: its own config points hooks nowhere.
    expect(git(path.join(dir, "clone"), "config", "--local", "core.hooksPath").trim()).toBe("/dev/null");
  });
});

// Clones are made from the repository's own object store with one git process (`git init`, the store
// borrowed through alternates, the tags copied): they must be what `git clone --shared` made, since a
// gate may run `git describe` and a clone made ahead must see a commit made after it.
describe("a blank clone", () => {
  const repo = path.join(dir, "tagged");
  execFileSync("git", ["init", "-q", "-b", "main", repo]);
  const commit = (message: string) => {
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "--allow-empty", "-m", message);
    return git(repo, "rev-parse", "HEAD").trim();
  };
  const first = commit("first");
  git(repo, "tag", "v1.0.0");
  git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "tag", "-a", "v1.1.0", "-m", "annotated");
  git(repo, "pack-refs", "--all");
  git(repo, "tag", "v1.2.0-loose");

  it("borrows the objects (a later commit checks out), has the tags, no remote, and hooks off", async () => {
    const clone = path.join(dir, "blank");
    await blankClone(repo, clone);
    expect(git(clone, "rev-parse", "HEAD").trim()).toBe(first);
    const later = commit("after the clone");
    await checkoutDetached(clone, later);
    expect(git(clone, "rev-parse", "HEAD").trim()).toBe(later);
    expect(git(clone, "describe", "--tags", first)).toBe(git(repo, "describe", "--tags", first));
    expect(git(clone, "tag", "--list").trim().split("\n")).toEqual(["v1.0.0", "v1.1.0", "v1.2.0-loose"]);
    expect(git(clone, "remote").trim()).toBe("");
    expect(git(clone, "config", "--local", "core.hooksPath").trim()).toBe("/dev/null");
    expect(existsSync(path.join(clone, ".git", "hooks"))).toBe(false);
  });

  it("is made alike whether git init makes it or, for the next ones in the same directory, the files the first one got (issue 30)", async () => {
    const parent = path.join(dir, "skeleton");
    const made = [path.join(parent, "first"), path.join(parent, "second"), path.join(parent, "third")];
    for (const clone of made) await blankClone(repo, clone);
    // Names, modes and contents of everything in each clone's .git.
    const listing = (gitDir: string): string[] =>
      readdirSync(gitDir, { recursive: true, encoding: "utf8" })
        .sort()
        .map((name) => {
          const file = path.join(gitDir, name);
          const info = statSync(file);
          return `${name} ${(info.mode & 0o7777).toString(8)} ${info.isFile() ? readFileSync(file, "latin1") : "dir"}`;
        });
    const first = listing(path.join(made[0] ?? "", ".git"));
    expect(first.some((line) => line.startsWith("config "))).toBe(true);
    for (const clone of made.slice(1)) expect(listing(path.join(clone, ".git"))).toEqual(first);
    const later = git(repo, "rev-parse", "HEAD").trim();
    for (const clone of made) {
      await checkoutDetached(clone, later);
      expect(git(clone, "rev-parse", "HEAD").trim()).toBe(later);
      expect(git(clone, "status", "--porcelain")).toBe("");
      expect(git(clone, "config", "--local", "core.hooksPath").trim()).toBe("/dev/null");
    }
  });

  it("is a real clone of a shallow repository, which cannot be borrowed from as it is", async () => {
    const shallow = path.join(dir, "shallow");
    execFileSync("git", ["clone", "-q", "--depth", "1", `file://${repo}`, shallow]);
    const clone = path.join(dir, "from-shallow");
    await blankClone(shallow, clone);
    expect(existsSync(path.join(clone, ".git", "shallow"))).toBe(true);
    await checkoutDetached(clone, git(shallow, "rev-parse", "HEAD").trim());
    expect(git(clone, "remote").trim()).toBe("");
  });
});

describe("the repository a receipt names", () => {
  const repo = mkdtempSync(path.join(os.tmpdir(), "lw-remote-"));
  afterAll(() => rmSync(repo, { recursive: true, force: true }));
  git(repo, "init", "-q");

  it("is none without an origin remote (the receipt then names the loop)", async () => {
    expect(await repositoryName(repo)).toBeUndefined();
  });

  it("is the origin remote, without the credentials a URL may carry", async () => {
    git(repo, "remote", "add", "origin", "https://user:s3cret@github.com/acme/parser.git");
    expect(await repositoryName(repo)).toBe("https://github.com/acme/parser.git");
    git(repo, "remote", "set-url", "origin", "git@github.com:acme/parser.git");
    expect(await repositoryName(repo)).toBe("git@github.com:acme/parser.git");
  });
});

describe("HEAD as the runner reads it (from git's files where they are plain, from git otherwise)", () => {
  const fresh = (name: string) => {
    const repo = path.join(dir, name);
    execFileSync("git", ["init", "-q", "-b", "main", repo]);
    git(repo, "config", "user.name", "t");
    git(repo, "config", "user.email", "t@localhost");
    git(repo, "commit", "-q", "--allow-empty", "-m", "initial");
    return repo;
  };
  const head = (repo: string) => git(repo, "rev-parse", "HEAD").trim();

  it("names the branch, and a snapshot answers the commit it made", async () => {
    const repo = fresh("plain");
    git(repo, "switch", "-q", "-c", "loopwarden/lp_1");
    expect(await currentBranch(repo)).toBe("loopwarden/lp_1");
    const { commit } = await snapshotCandidate(repo, "a candidate");
    expect(commit).toBe(head(repo));
    expect(git(repo, "log", "-1", "--format=%s").trim()).toBe("a candidate");
  });

  it("answers no branch on a detached HEAD, and the detached commit a snapshot made", async () => {
    const repo = fresh("detached");
    git(repo, "checkout", "-q", "--detach");
    expect(await currentBranch(repo)).toBeNull();
    expect((await snapshotCandidate(repo, "detached candidate")).commit).toBe(head(repo));
  });

  it("follows packed refs: a branch with no loose ref file is still read right", async () => {
    const repo = fresh("packed");
    git(repo, "switch", "-q", "-c", "loopwarden/lp_2");
    const { commit: first } = await snapshotCandidate(repo, "first");
    git(repo, "pack-refs", "--all", "--prune");
    expect(await currentBranch(repo)).toBe("loopwarden/lp_2");
    // The commit writes a loose ref again; the next answer is the new commit, not the packed one.
    const { commit: second } = await snapshotCandidate(repo, "second");
    expect(second).not.toBe(first);
    expect(second).toBe(head(repo));
  });

  it("answers the candidate's change from the base as diffOf does, byte for byte, taken while committing", async () => {
    const repo = fresh("diffs");
    writeFileSync(path.join(repo, "kept.txt"), "one\ntwo\n");
    writeFileSync(path.join(repo, "moved.txt"), "a file long enough to be seen as renamed\n".repeat(5));
    writeFileSync(path.join(repo, "gone.txt"), "deleted by the candidate\n");
    writeFileSync(path.join(repo, "script.sh"), "echo hi\n");
    git(repo, "add", "-A");
    git(repo, "commit", "-q", "-m", "base");
    const base = head(repo);
    writeFileSync(path.join(repo, "kept.txt"), "one\nthree\n");
    git(repo, "mv", "moved.txt", "renamed.txt");
    rmSync(path.join(repo, "gone.txt"));
    chmodSync(path.join(repo, "script.sh"), 0o755);
    mkdirSync(path.join(repo, "new"));
    writeFileSync(path.join(repo, "new", "blob.bin"), Buffer.from([0, 1, 2, 255, 0, 7]));
    const { commit, diff } = await snapshotCandidate(repo, "a change", base);
    expect(diff).toEqual(await diffOf(repo, base, commit));
    expect(diff?.empty).toBe(false);
    // An unchanged tree: an empty change, as diffOf says too.
    const unchanged = await snapshotCandidate(repo, "nothing", commit);
    expect(unchanged.diff).toEqual({ ...(await diffOf(repo, commit, unchanged.commit)), empty: true });
  });

  it("leaves git's automatic maintenance to maintainRepository, once, instead of running it after each commit", async () => {
    const repo = fresh("maintenance");
    // A maintenance task that runs whenever there is a loose object, and packs them.
    git(repo, "config", "maintenance.gc.enabled", "false");
    git(repo, "config", "maintenance.loose-objects.enabled", "true");
    git(repo, "config", "maintenance.loose-objects.auto", "1");
    for (const version of ["1", "2", "3"]) {
      writeFileSync(path.join(repo, "file.txt"), version);
      await snapshotCandidate(repo, `candidate ${version}`);
    }
    const packed = () => Number(/^in-pack: (\d+)$/m.exec(git(repo, "count-objects", "-v"))?.[1]);
    expect(packed()).toBe(0);
    await maintainRepository(repo);
    expect(packed()).toBeGreaterThan(0);
  });

  it("reverts to the best commit: the candidate kept under its ref, its files and stray untracked ones gone, ignored ones kept", async () => {
    const repo = fresh("revert");
    writeFileSync(path.join(repo, ".gitignore"), "build/\n");
    writeFileSync(path.join(repo, "file.txt"), "best\n");
    git(repo, "add", "-A");
    git(repo, "commit", "-q", "-m", "best");
    const best = head(repo);
    git(repo, "switch", "-q", "-c", "loopwarden/lp_4");
    writeFileSync(path.join(repo, "file.txt"), "candidate\n");
    mkdirSync(path.join(repo, "added"));
    writeFileSync(path.join(repo, "added", "new.txt"), "only in the candidate\n");
    const { commit } = await snapshotCandidate(repo, "candidate");
    // Written after the commit (a straggling process): not the candidate's, not the best's.
    writeFileSync(path.join(repo, "stray.txt"), "stray\n");
    mkdirSync(path.join(repo, "build"));
    writeFileSync(path.join(repo, "build", "out.o"), "ignored\n");
    await revertTo(repo, best, { ref: "refs/loopwarden/rejected/lp_4/c1", commit });
    expect(git(repo, "rev-parse", "refs/loopwarden/rejected/lp_4/c1").trim()).toBe(commit);
    expect(head(repo)).toBe(best);
    expect(git(repo, "symbolic-ref", "HEAD").trim()).toBe("refs/heads/loopwarden/lp_4");
    expect(readFileSync(path.join(repo, "file.txt"), "utf8")).toBe("best\n");
    expect(existsSync(path.join(repo, "added"))).toBe(false);
    expect(existsSync(path.join(repo, "stray.txt"))).toBe(false);
    expect(existsSync(path.join(repo, "build", "out.o"))).toBe(true);
    expect(git(repo, "status", "--porcelain")).toBe("");
  });

  it("reads a linked worktree's own HEAD and the branches of the repository it belongs to", async () => {
    const repo = fresh("main-tree");
    const linked = path.join(dir, "linked-tree");
    git(repo, "worktree", "add", "-q", "-b", "loopwarden/lp_3", linked);
    expect(await currentBranch(linked)).toBe("loopwarden/lp_3");
    expect(await currentBranch(repo)).toBe("main");
    expect((await snapshotCandidate(linked, "in the linked tree")).commit).toBe(head(linked));
    expect(head(repo)).not.toBe(head(linked));
  });
});

// A candidate read out of an agent's workspace (DESIGN §6.7) with the runner's own index: its evaluation
// may begin as soon as the commit object exists, told whether it changes anything by its tree, and the
// branch and the working tree move only once `beforeBranchMoves` allows it (issue 30).
describe("a candidate committed from a workspace", () => {
  const repo = path.join(dir, "snapshot");
  execFileSync("git", ["init", "-q", "-b", "loop", repo]);
  writeFileSync(path.join(repo, "value.txt"), "0\n");
  git(repo, "add", "-A");
  git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "initial");
  const base = git(repo, "rev-parse", "HEAD").trim();
  const workspace = async (edit: (dir: string) => void) => {
    const ws = path.join(dir, `ws-${Math.random().toString(16).slice(2)}`);
    await cloneAt(repo, base, ws);
    const index = `${ws}.index`;
    writeFileSync(index, readFileSync(path.join(ws, ".git", "index")));
    edit(ws);
    return { ws, index };
  };

  it("tells a change apart from none by its tree, and moves the branch only after beforeBranchMoves", async () => {
    const changed = await workspace((ws) => writeFileSync(path.join(ws, "value.txt"), "1\n"));
    const heard: { commit: string; empty: boolean; head: string }[] = [];
    const order: string[] = [];
    const { commit, diff } = await snapshotWorkTree(repo, changed.ws, changed.index, "candidate", base, {
      onCommitted: (made, change) => heard.push({ commit: made, empty: change.empty, head: git(repo, "rev-parse", "HEAD").trim() }),
      beforeBranchMoves: () => {
        order.push(git(repo, "rev-parse", "HEAD").trim());
        return Promise.resolve();
      },
    });
    expect(heard).toEqual([{ commit, empty: false, head: base }]);
    expect(order).toEqual([base]);
    expect(git(repo, "rev-parse", "HEAD").trim()).toBe(commit);
    expect(readFileSync(path.join(repo, "value.txt"), "utf8")).toBe("1\n");
    expect(diff).toEqual(await diffOf(repo, base, commit));
    expect(diff.empty).toBe(false);

    git(repo, "reset", "-q", "--hard", base);
    const unchanged = await workspace(() => {});
    const told: boolean[] = [];
    const none = await snapshotWorkTree(repo, unchanged.ws, unchanged.index, "nothing", base, { onCommitted: (_made, change) => told.push(change.empty) });
    expect(told).toEqual([true]);
    expect(none.diff.empty).toBe(true);
    git(repo, "reset", "-q", "--hard", base);
  });

  it("leaves the branch and the working tree where they were when beforeBranchMoves throws", async () => {
    const changed = await workspace((ws) => writeFileSync(path.join(ws, "value.txt"), "2\n"));
    await expect(
      snapshotWorkTree(repo, changed.ws, changed.index, "candidate", base, { beforeBranchMoves: () => Promise.reject(new Error("not on the loop's branch")) }),
    ).rejects.toThrow("not on the loop's branch");
    expect(git(repo, "rev-parse", "HEAD").trim()).toBe(base);
    expect(readFileSync(path.join(repo, "value.txt"), "utf8")).toBe("0\n");
  });

  it("lists a commit's files as a checkout of it tracks them", async () => {
    mkdirSync(path.join(repo, "src", "deep"), { recursive: true });
    writeFileSync(path.join(repo, "src", "deep", "a file.ts"), "x\n");
    git(repo, "add", "-A");
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "nested");
    const head = git(repo, "rev-parse", "HEAD").trim();
    const clone = path.join(dir, "listed");
    await cloneAt(repo, head, clone);
    expect(await committedFiles(repo, head)).toEqual(await trackedFiles(clone));
    expect(await committedFiles(repo, head)).toEqual(["src/deep/a file.ts", "value.txt"]);
  });

  // Issue 30: the candidate's files come from the best's and the paths its patch's diff names.
  it("has a candidate's files from its parent's and the paths it changed, as listing the commit gives them, and its patch as diffOf's", async () => {
    const root = path.join(dir, "listed-after");
    execFileSync("git", ["init", "-q", "-b", "loop", root]);
    const files: Record<string, string> = {
      "a-b.txt": "x\n",
      "a/c.txt": "nested\n",
      "moved.txt": "a file long enough to be seen as renamed\n".repeat(5),
      "gone.txt": "deleted\n",
      "script.sh": "echo hi\n",
      "ünï/cödé.txt": "utf-8 names\n",
      "z.txt": "last\n",
    };
    for (const [name, text] of Object.entries(files)) {
      mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
      writeFileSync(path.join(root, name), text);
    }
    git(root, "add", "-A");
    git(root, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "parent");
    const parent = git(root, "rev-parse", "HEAD").trim();
    const ws = path.join(dir, "listed-after-ws");
    await cloneAt(root, parent, ws);
    const index = `${ws}.index`;
    writeFileSync(index, readFileSync(path.join(ws, ".git", "index")));
    mkdirSync(path.join(ws, "a.d"));
    renameSync(path.join(ws, "moved.txt"), path.join(ws, "a.d", "renamed.txt"));
    rmSync(path.join(ws, "gone.txt"));
    chmodSync(path.join(ws, "script.sh"), 0o755);
    writeFileSync(path.join(ws, "a-b.txt"), "changed\n");
    writeFileSync(path.join(ws, "a.txt"), "added beside a/\n");
    writeFileSync(path.join(ws, "blob.bin"), Buffer.from([0, 1, 2, 255, 0, 7]));
    mkdirSync(path.join(ws, "ünï", "dëëp"), { recursive: true });
    writeFileSync(path.join(ws, "ünï", "dëëp", "nëw.txt"), "new\n");
    const before = await committedFiles(root, parent);
    let paths: Promise<PathChange[]> | undefined;
    const { commit, diff } = await snapshotWorkTree(root, ws, index, "candidate", parent, { onCommitted: (_made, change) => (paths = change.paths) });
    expect(diff).toEqual(await diffOf(root, parent, commit));
    const listed = git(root, "ls-tree", "-r", "-z", "--name-only", "--full-tree", commit).split("\0").filter(Boolean);
    expect(filesAfter(before, await (paths ?? Promise.reject(new Error("not told"))))).toEqual(listed);
    expect(await committedFilesAfter(root, parent, commit, paths ?? Promise.resolve([]))).toEqual(listed);
    expect(listed).toContain("a.d/renamed.txt");
    expect(listed).not.toContain("moved.txt");
  });

  it("reads a diff's raw part and its patch apart, and refuses output not shaped so", () => {
    expect(splitRawPatch("")).toEqual({ changes: [], patch: "" });
    const raw = ":100644 100644 1111111 2222222 M\0a b.txt\0:100644 100644 3333333 3333333 R100\0old\0new\0";
    expect(splitRawPatch(`${raw}\0diff --git a/x b/x\n`)).toEqual({
      changes: [
        { status: "M", paths: ["a b.txt"] },
        { status: "R", paths: ["old", "new"] },
      ],
      patch: "diff --git a/x b/x\n",
    });
    expect(splitRawPatch(`${raw}diff --git a/x b/x\n`)).toBeNull();
    expect(splitRawPatch("warning: something\ndiff --git a/x b/x\n")).toBeNull();
    expect(() => filesAfter(["a"], [{ status: "X", paths: ["a"] }])).toThrow();
  });

  it("lists the files a commit holds, not those of a replacement an unconfined agent planted in refs/replace", async () => {
    const id = (...args: string[]) => git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", ...args).trim();
    writeFileSync(path.join(repo, "protected.txt"), "t0\n");
    git(repo, "add", "-A");
    id("commit", "-q", "-m", "with protected.txt");
    const real = id("rev-parse", "HEAD");
    // A commit without the file, put in place of the real one: git honours refs/replace by default.
    const decoy = id("commit-tree", id("rev-parse", "HEAD~1^{tree}"), "-m", "decoy");
    git(repo, "replace", real, decoy);
    expect(git(repo, "ls-tree", "-r", "--name-only", real)).not.toContain("protected.txt");
    expect(await committedFiles(repo, real)).toContain("protected.txt");
  });
});
