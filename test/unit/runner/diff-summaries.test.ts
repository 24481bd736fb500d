import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { makeRepo } from "../../support/cli.js";

// The history an agent reads names each candidate's change in a line (docs/agent.md). A run that resumes
// a loop of thousands of candidates reads the ones it does not know in one git process: the same words,
// change for change, as one process each would give.

const repo = makeRepo(mkdtempSync(path.join(os.tmpdir(), "lw-diff-summaries-")), { "a.txt": "one\ntwo\n", "gone.txt": "bye\n", "moved.txt": "same\n" });
afterAll(() => rmSync(repo, { recursive: true, force: true }));

const git = (...args: string[]) => execFileSync("git", args, { cwd: repo, encoding: "utf8" }).trim();
const base = git("rev-parse", "HEAD");

/** A commit on `base` whose tree is the working tree after `change`, left unreferenced as candidates are. */
function commitAfter(change: () => void): string {
  git("checkout", "-q", "--detach", base);
  change();
  git("add", "-A");
  const commit = git("commit-tree", git("write-tree"), "-p", base, "-m", "candidate");
  git("reset", "-q", "--hard", base);
  git("clean", "-qfd");
  return commit;
}

const edited = commitAfter(() => {
  writeFileSync(path.join(repo, "a.txt"), "one\n2\nthree\n");
  writeFileSync(path.join(repo, 'with space "and quote".txt'), "x\n");
});
const binary = commitAfter(() => writeFileSync(path.join(repo, "blob.bin"), Buffer.from([0, 1, 2, 0, 255])));
const renamed = commitAfter(() => {
  rmSync(path.join(repo, "gone.txt"));
  git("mv", "moved.txt", "renamed.txt");
});
const many = commitAfter(() => {
  for (let index = 0; index < 11; index++) writeFileSync(path.join(repo, `file-${index}.txt`), `${index}\n`);
});
const unchanged = git("commit-tree", git("rev-parse", `${base}^{tree}`), "-p", base, "-m", "no change");
const unknown = "0".repeat(40);

const changes = [
  { base, commit: edited },
  { base, commit: binary },
  { base, commit: renamed },
  { base, commit: many },
  { base, commit: unchanged },
  { base, commit: unknown },
  // The same commit from another base, and a change asked about twice.
  { base: binary, commit: edited },
  { base, commit: edited },
];

describe("the summaries of a resumed loop's changes", () => {
  it("say of each change what a git process of its own says, and take one git process for all", async () => {
    process.env.LOOPWARDEN_TIMINGS = "1";
    try {
      vi.resetModules();
      const single = await import("../../../runner/src/loop/agent-context.js");
      const expected: string[] = [];
      for (const { base: from, commit } of changes) expected.push(await single.diffSummary(repo, from, commit));

      vi.resetModules();
      const batched = await import("../../../runner/src/loop/agent-context.js");
      const timings = await import("../../../runner/src/timings.js");
      timings.takeTimings();
      const summaries = await batched.diffSummariesOf(repo, changes);
      expect(timings.takeTimings()).toMatch(/ spawns=1 /);

      expect(summaries).toEqual(expected);
      expect(summaries[0]).toBe('a.txt +2 -1, "with space \\"and quote\\".txt" +1 -0');
      expect(summaries[1]).toBe("blob.bin (binary)");
      expect(summaries[2]).toBe("gone.txt +0 -1, moved.txt +0 -1, renamed.txt +1 -0");
      expect(summaries[3]).toMatch(/ and 3 more files$/);
      expect(summaries.slice(4, 6)).toEqual(["no change", "no change"]);

      // Known now: asked again, no git process at all.
      await batched.diffSummariesOf(repo, changes);
      expect(timings.takeTimings()).toMatch(/ spawns=0 /);
    } finally {
      delete process.env.LOOPWARDEN_TIMINGS;
    }
  });

  it("falls back to a process per change when the one for all cannot run", async () => {
    vi.resetModules();
    const batched = await import("../../../runner/src/loop/agent-context.js");
    const notARepository = mkdtempSync(path.join(os.tmpdir(), "lw-diff-summaries-none-"));
    try {
      expect(await batched.diffSummariesOf(notARepository, changes.slice(0, 3))).toEqual(["no change", "no change", "no change"]);
    } finally {
      rmSync(notARepository, { recursive: true, force: true });
    }
  });
});
