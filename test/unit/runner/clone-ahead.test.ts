import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  checkoutTreeAhead,
  cloneAhead,
  clonesRemoved,
  clonesRoot,
  dropCloneAhead,
  evaluationStarted,
  prepareClone,
  withClone,
} from "../../../runner/src/evaluation/clone.js";
import { runCommand } from "../../../runner/src/process/exec.js";
import type { Evaluation, GateHooks } from "../../../runner/src/evaluation/evaluation.js";
import { isProcessAlive } from "../../../runner/src/process/processes.js";

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

  // Issue 30: the candidate's tree is read into its clone while its commit is written.
  it("takes the tree checked out ahead in the prepared clone when it is the commit's, as a checkout of the commit leaves it", async () => {
    const git = (cwd: string, ...args: string[]) => execFileSync("git", args, { cwd, encoding: "utf8" });
    const tree = git(repo, "rev-parse", `${second}^{tree}`).trim();
    const checkedOut = await withClone(repo, second, "candidate", async (clone) => ({
      status: git(clone.dir, "status", "--porcelain", "--untracked-files=all"),
      index: git(clone.dir, "ls-files", "-s"),
    }));
    prepareClone(repo);
    checkoutTreeAhead(repo, tree);
    cloneAhead(repo, second);
    const seen = await withClone(repo, second, "candidate", async (clone) => {
      expect(git(clone.dir, "rev-parse", "HEAD").trim()).toBe(second);
      expect(git(clone.dir, "rev-parse", "--abbrev-ref", "HEAD").trim()).toBe("HEAD"); // detached
      expect(git(clone.dir, "status", "--porcelain", "--untracked-files=all")).toBe(checkedOut.status);
      expect(git(clone.dir, "ls-files", "-s")).toBe(checkedOut.index);
      expect(git(clone.dir, "diff", "HEAD")).toBe("");
      expect(readFileSync(path.join(clone.dir, "file.txt"), "utf8")).toBe("two");
      return clone.dir;
    });
    expect(path.basename(seen)).toMatch(/^ahead-/);
    await clonesRemoved();
  });

  it("does not take a clone whose tree checked out ahead is not the commit's: the commit is checked out in a fresh one", async () => {
    const git = (cwd: string, ...args: string[]) => execFileSync("git", args, { cwd, encoding: "utf8" });
    prepareClone(repo);
    checkoutTreeAhead(repo, git(repo, "rev-parse", `${first}^{tree}`).trim());
    cloneAhead(repo, second);
    const seen = await withClone(repo, second, "candidate", async (clone) => {
      expect(git(clone.dir, "rev-parse", "HEAD").trim()).toBe(second);
      expect(git(clone.dir, "status", "--porcelain", "--untracked-files=all")).toBe("");
      expect(readFileSync(path.join(clone.dir, "file.txt"), "utf8")).toBe("two");
      return clone.dir;
    });
    expect(path.basename(seen)).toMatch(/^ahead-/);
    await clonesRemoved();
    expect(existsSync(path.join(clonesRoot(), String(process.pid))) ? ownClones() : []).toEqual([]);
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

  // The proposer's own candidate is evaluated while its proposal is in flight: the leased job adopts that
  // evaluation (hearing what it said before the job's label was known), and one never leased is stopped.
  const GATE = { name: "check", run: "true", timeout: "1m" };

  /** An evaluation that runs one gate, `command`, in the clone, its shell's pid written to `pidFile` first. */
  function evaluating(command: string, pidFile: string) {
    return async (clone: { dir: string; signal?: AbortSignal | undefined }, hooks: GateHooks): Promise<Evaluation> => {
      hooks.onNote?.("note before the gate");
      hooks.onGateStart?.(GATE);
      const result = await runCommand(`echo $$ > ${pidFile}; ${command}`, { cwd: clone.dir, timeoutMs: 60_000, signal: clone.signal });
      hooks.onNote?.(`gate ended ${result.exit_code ?? result.signal}`);
      return { observation: { gates: [], tests: { passing: [], failing: [] } }, logs: [] };
    };
  }

  it("begins an evaluation that the withClone of that commit adopts, with what it said so far replayed", async () => {
    cloneAhead(repo, first, { evaluate: evaluating("cat file.txt > seen", path.join(tmp, "pid-first")) });
    await evaluationStarted(repo, first);
    const heard: string[] = [];
    const evaluation = await withClone(repo, first, "candidate", async (clone) => {
      const begun = clone.evaluationAhead;
      expect(begun).toBeDefined();
      begun?.adopt({ onNote: (text) => heard.push(text), onGateStart: (gate) => heard.push(`start ${gate.name}`) });
      await begun?.result;
      expect(readFileSync(path.join(clone.dir, "seen"), "utf8")).toBe("one");
      return begun?.result;
    });
    expect(evaluation?.observation.gates).toEqual([]);
    expect(heard).toEqual(["note before the gate", "start check", "gate ended 0"]);
  });

  it("stops an evaluation never adopted: dropCloneAhead kills its commands and removes the clone", async () => {
    const pidFile = path.join(tmp, "pid-second");
    cloneAhead(repo, second, { evaluate: evaluating("sleep 30", pidFile) });
    await evaluationStarted(repo, second);
    // The gate's shell is running once it has written its pid.
    while (!existsSync(pidFile) || readFileSync(pidFile, "utf8").trim() === "") await new Promise((resolve) => setTimeout(resolve, 20));
    const started = Date.now();
    await dropCloneAhead(repo, second);
    // Killed, not waited for: well inside the 30 s it would have slept.
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(isProcessAlive(Number(readFileSync(pidFile, "utf8")))).toBe(false);
    await clonesRemoved();
    expect(existsSync(path.join(clonesRoot(), String(process.pid))) ? ownClones() : []).toEqual([]);
  });
});
