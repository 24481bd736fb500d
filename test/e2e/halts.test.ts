import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { isGoneWithin } from "../support/process.js";
import { gitIn, makeRepo, runCli, sharedCoordinator } from "../support/cli.js";

// Each halt reason the slice can reach, with its exit code (DESIGN §7), against one shared coordinator.
describe("halts and refusals", () => {
  const { tmp, coordinator } = sharedCoordinator("halts");
  let serial = 0;

  const failingProject = () =>
    makeRepo(path.join(tmp.dir, `repo-${++serial}`), {
      "check.mjs": "import { readFileSync } from 'node:fs';\nprocess.exit(readFileSync('value.txt', 'utf8').trim() === 'fixed' ? 0 : 1);\n",
      "value.txt": "broken\n",
    });
  const run = (repo: string, ...args: string[]) => runCli(["--json", "--server", coordinator.url, "run", ...args], { cwd: repo });
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
    const pidFile = path.join(tmp.dir, `hung-${serial}.pid`);
    const started = Date.now();
    const result = await run(repo, "--check", `sleep 300 & echo $! > ${pidFile}; wait`, "--check-timeout", "1s", "--exec", "true", "--max-iterations", "1");
    expect(result.code, result.stderr).toBe(12);
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(await isGoneWithin(Number(readFileSync(pidFile, "utf8")))).toBe(true);
  });

  it("an agent that switches the working tree to another branch stops the run before anything is committed or reset", async () => {
    const repo = failingProject();
    const result = await run(repo, "--check", "node check.mjs", "--exec", "git switch -q main && echo fixed > value.txt");
    expect(result.code).toBe(1);
    expect(parse(result.stdout)).toMatchObject({ status: "error", errors: [expect.stringContaining("the agent left the loop's branch")] });
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
