import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { gitIn, makeRepo, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";
import { processesWith } from "../support/zone-markers.js";

// Each halt reason the slice can reach, with its exit code (DESIGN §7), against one shared coordinator.
// Concurrent (issue 30's suite time): each test runs its loops in repositories of its own, on the shared
// coordinator; a loop mostly waits on its processes, so several at once take little more than one.
describe.concurrent("halts and refusals", () => {
  const { tmp, coordinator } = sharedCoordinator("halts");
  let serial = 0;

  const failingProject = () =>
    makeRepo(path.join(tmp.dir, `repo-${++serial}`), {
      "check.mjs": "import { readFileSync } from 'node:fs';\nprocess.exit(readFileSync('value.txt', 'utf8').trim() === 'fixed' ? 0 : 1);\n",
      "value.txt": "broken\n",
    });
  // --skip-doctor: this file tests halts and refusals after creation; oracle.test.ts covers the precondition.
  const run = (repo: string, ...args: string[]) => runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor", ...args], { cwd: repo });
  const parse = (stdout: string) => JSON.parse(stdout.trim()) as Record<string, unknown>;

  it("a baseline that already passes halts success_condition_met at once (10)", async () => {
    const repo = failingProject();
    writeFileSync(path.join(repo, "value.txt"), "fixed\n");
    gitIn(repo, "commit", "-qam", "already fixed");
    const result = await run(repo, "--check", "node check.mjs", "--exec", "true");
    expect(result.code, result.stderr).toBe(10);
    expect(parse(result.stdout)).toMatchObject({ halt_reason: "success_condition_met", iteration: 0 });
  });

  it("an agent that never fixes anything halts max_iterations_reached, not improving (12)", async () => {
    const repo = failingProject();
    const result = await run(repo, "--check", "node check.mjs", "--exec", "echo still broken > value.txt", "--max-iterations", "2");
    expect(result.code, result.stderr).toBe(12);
    expect(parse(result.stdout)).toMatchObject({ halt_reason: "max_iterations_reached", still_improving: false, iteration: 2 });
  });

  it("an agent command that keeps failing halts execution_failure (40)", async () => {
    const repo = failingProject();
    const result = await run(repo, "--check", "node check.mjs", "--exec", "exit 3");
    expect(result.code, result.stderr).toBe(40);
    expect(parse(result.stdout)).toMatchObject({ halt_reason: "execution_failure", iteration: 3 });
  });

  it("a dirty working tree is refused before anything is created", async () => {
    const repo = failingProject();
    writeFileSync(path.join(repo, "notes.txt"), "my unsaved work\n");
    const result = await run(repo, "--check", "node check.mjs", "--exec", "true");
    expect(result.code).toBe(1);
    expect(parse(result.stdout)).toMatchObject({ status: "error" });
    expect(result.stdout).toContain("uncommitted changes (notes.txt)");
    expect(existsSync(path.join(repo, ".loopwarden", "state.json"))).toBe(false);
  });

  it("a gate that hangs is killed at its timeout, children included, and counts as failing", async () => {
    const repo = failingProject();
    // The gate runs in its own PID namespace (DESIGN §6.7), where pids are not the host's: its child is
    // found by a marker on its command line instead. The shell joins the marker from two parts, so that
    // only the child carries it, not the runner (whose --check holds the command as written).
    const marker = `lwhalts-hung-${process.pid}-${serial}`;
    const check = `m=lwhalts-; node -e 'setTimeout(() => {}, 300000)' "\${m}${marker.slice("lwhalts-".length)}" & wait`;
    let seen = false;
    const watch = setInterval(() => (seen ||= processesWith(marker).length > 0), 100);
    const started = Date.now();
    const result = await run(repo, "--check", check, "--check-timeout", "1s", "--exec", "true", "--max-iterations", "1").finally(() => clearInterval(watch));
    expect(result.code, result.stderr).toBe(12);
    expect(Date.now() - started).toBeLessThan(60_000);
    // The child was running while its gate was, and nothing of it outlived the gate's timeout.
    expect(seen).toBe(true);
    expect(processesWith(marker)).toEqual([]);
  });

  it("an agent that switches its workspace to another branch and commits there moves none of the user's branches: only its tree is taken, onto the loop's branch", async () => {
    const repo = failingProject();
    const initial = gitIn(repo, "rev-parse", "main").trim();
    // The agent works in a clone of its own (DESIGN §6.7): it makes a branch called main there and commits
    // its fix on it. The user's main cannot move, and the runner takes the tree it left, not its commit.
    const result = await run(
      repo,
      "--check",
      "node check.mjs",
      "--exec",
      "git switch -q -c main && echo fixed > value.txt && git -c user.name=agent -c user.email=agent@localhost commit -qam 'the agent commits on main'",
    );
    expect(result.code, result.stderr).toBe(10);
    const loopBranch = `loopwarden/${recordedLoopId(repo)}`;
    expect(parse(result.stdout)).toMatchObject({ halt_reason: "success_condition_met", iteration: 1 });
    // The user's repository stays on the loop's branch; main is where it was; no branch but these two.
    expect(gitIn(repo, "branch", "--show-current").trim()).toBe(loopBranch);
    expect(gitIn(repo, "rev-parse", "main").trim()).toBe(initial);
    expect(gitIn(repo, "for-each-ref", "--format=%(refname)", "refs/heads/").trim().split("\n")).toEqual([`refs/heads/${loopBranch}`, "refs/heads/main"]);
    // The fix is the runner's candidate on the loop's branch, a child of main; the agent's commit is in no history.
    expect(gitIn(repo, "log", "--format=%s", loopBranch).trim().split("\n")).toEqual(["loopwarden: candidate of iteration 1", "initial"]);
    expect(gitIn(repo, "show", `${loopBranch}:value.txt`)).toBe("fixed\n");
    expect(gitIn(repo, "log", "--all", "--format=%s")).not.toContain("the agent commits on main");
    expect(gitIn(repo, "status", "--porcelain")).toBe("");
  });

  it("unconfined, an agent that switches the user's repository to another branch stops the run before anything is committed or reset", async () => {
    // --unconfined: the runner's own guard is the subject, and only an agent outside its zone can reach
    // the user's repository. It does so by its path, since even unconfined it starts in its workspace.
    const repo = failingProject();
    const result = await run(
      repo,
      "--unconfined",
      "--check",
      "node check.mjs",
      "--exec",
      `git -C '${repo}' switch -q main && echo fixed > '${repo}/value.txt'`,
    );
    expect(result.code, result.stderr).toBe(1);
    expect(parse(result.stdout)).toMatchObject({ status: "error", errors: [expect.stringContaining("no longer on the loop's branch (it is on main)")] });
    // The user's branch was neither committed to nor reset: the agent's edit is still there, uncommitted.
    expect(gitIn(repo, "log", "--format=%s", "main").trim()).toBe("initial");
    expect(readFileSync(path.join(repo, "value.txt"), "utf8")).toBe("fixed\n");
  });

  it("missing flags are a usage error (2)", async () => {
    const repo = failingProject();
    const result = await run(repo, "--check", "node check.mjs");
    expect(result.code).toBe(2);
    const unknown = await run(repo, "--bogus");
    expect(unknown.code).toBe(2);
    expect(parse(unknown.stdout)).toMatchObject({ status: "error", errors: ["unknown option '--bogus'"] });
    expect(parse(result.stdout)).toMatchObject({ status: "error", errors: [expect.stringContaining("--exec")] });
  });
});
