import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cloneAhead, clonesRemoved, clonesRoot, dropCloneAhead, withClone } from "../../../runner/src/clone.js";

// A candidate's clone is made while its proposal is in flight (the iteration's critical path holds one
// clone less): the evaluation then takes that very clone, at the candidate's commit; one never taken is
// removed, so no clone outlives the iteration that made it.

const tmp = mkdtempSync(path.join(os.tmpdir(), "lw-clone-ahead-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function repository(): { repo: string; commits: string[] } {
  const repo = path.join(tmp, "repo");
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@l", ...args], { cwd: repo, encoding: "utf8" }).trim();
  execFileSync("git", ["init", "-q", "-b", "main", repo]);
  const commits: string[] = [];
  for (const version of ["one", "two"]) {
    writeFileSync(path.join(repo, "file.txt"), version);
    git("add", "-A");
    git("commit", "-q", "-m", version);
    commits.push(git("rev-parse", "HEAD"));
  }
  return { repo, commits };
}

const ownClones = () => readdirSync(path.join(clonesRoot(), String(process.pid))).sort();

describe("cloneAhead", () => {
  const { repo, commits } = repository();
  const [first, second] = commits as [string, string];

  it("is the clone the next withClone of that commit uses, checked out at it, and is removed after", async () => {
    cloneAhead(repo, first);
    const seen = await withClone(repo, first, "candidate", async (clone) => {
      expect(readFileSync(path.join(clone.dir, "file.txt"), "utf8")).toBe("one");
      return clone.dir;
    });
    expect(path.basename(seen)).toMatch(/^ahead-/);
    // Removed after withClone answers, off the iteration's critical path.
    await clonesRemoved();
    expect(existsSync(seen)).toBe(false);
    // Taken once: the next withClone of the commit makes a fresh one.
    const fresh = await withClone(repo, first, "candidate", async (clone) => clone.dir);
    expect(path.basename(fresh)).toMatch(/^candidate-/);
  });

  it("is left alone by a withClone of another commit, and dropCloneAhead removes it", async () => {
    cloneAhead(repo, second);
    const other = await withClone(repo, first, "candidate", async (clone) => {
      expect(readFileSync(path.join(clone.dir, "file.txt"), "utf8")).toBe("one");
      return clone.dir;
    });
    expect(path.basename(other)).toMatch(/^candidate-/);
    await dropCloneAhead(repo, second);
    await clonesRemoved();
    expect(existsSync(path.join(clonesRoot(), String(process.pid))) ? ownClones() : []).toEqual([]);
  });
});
