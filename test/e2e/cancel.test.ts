import path from "node:path";
import { describe, expect, it } from "vitest";
import { exitOf, gitIn, makeRepo, recordedLoopId, runCli, sharedCoordinator, startCli, waitFor } from "../support/cli.js";

// `loopwarden cancel` (DESIGN §7: cancelled, exit class 11): a person stops a loop while its run is in the
// middle of an iteration. The run learns it when it proposes, keeps its unjudged candidate aside, puts the
// working tree back on the best commit, and exits with the halt's class; the receipt verifies.

describe("loopwarden cancel", () => {
  const { tmp, coordinator } = sharedCoordinator("cancel");

  it("stops a running loop mid-iteration: the run exits 11 with the halt, the tree at the best, the receipt verifiable", async () => {
    const repo = makeRepo(path.join(tmp.dir, "repo"), { "README.md": "x\n" });
    const t0 = gitIn(repo, "rev-parse", "HEAD").trim();
    const run = startCli(["--server", coordinator.url, "run", "--check", "false", "--exec", "sleep 3 && echo changed >> README.md", "--name", "cancel-e2e"], {
      cwd: repo,
    });
    try {
      await waitFor(() => run.output().includes("[1] running the agent") || run.exitCode !== null, "the first agent run");
      const loopId = recordedLoopId(repo);
      const cancelled = await runCli(["--server", coordinator.url, "cancel", "--reason", "wrong approach"], { cwd: repo });
      expect(cancelled.code, cancelled.stderr).toBe(0);
      expect(cancelled.stdout).toContain(`loop ${loopId} cancelled: cancelled (exit 11) — cancelled by owner: wrong approach`);
      const receiptUrl = /receipt: (\S+)/.exec(cancelled.stdout)?.[1];
      expect(receiptUrl).toMatch(/\/r\/rc_[0-9a-f]+$/);

      expect(await exitOf(run), run.output()).toBe(11);
      expect(run.output()).toContain(`loop ${loopId} halted: cancelled (exit 11)`);
      expect(run.output()).toMatch(/the loop halted before the interrupted candidate at [0-9a-f]{10} was judged: kept at refs\/loopwarden\/interrupted\//);
      // The working tree is back on the best commit (t0: nothing was promoted), with nothing left over.
      expect(gitIn(repo, "rev-parse", "HEAD").trim()).toBe(t0);
      expect(gitIn(repo, "status", "--porcelain", "--untracked-files=all").trim()).toBe("");

      const verified = await runCli(["verify", receiptUrl ?? ""], { cwd: repo });
      expect(verified.code, verified.stdout + verified.stderr).toBe(0);
      const again = await runCli(["--server", coordinator.url, "--json", "cancel", loopId], { cwd: repo });
      expect(again.code, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout)).toMatchObject({ status: "halted", halt_reason: "cancelled", exit_class: 11, replayed: true });
    } finally {
      if (run.exitCode === null) run.kill("SIGKILL");
    }
  });
});
