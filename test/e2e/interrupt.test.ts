import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isAlive, isGoneWithin } from "../support/process.js";
import { exitOf, makeRepo, runCli, startCli, tempDir, waitFor } from "../support/cli.js";
import { processesWith } from "../support/zone-markers.js";

/** Whether every process carrying `marker` is gone within `ms`. */
async function allGoneWithin(marker: string, ms = 5_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (processesWith(marker).length > 0) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return true;
}

/**
 * An agent command that starts a long-lived child carrying `marker` and waits for it. The agent runs in
 * its own PID namespace (DESIGN §6.7), so the pids it sees are not the host's: the test finds its
 * processes by the marker instead. The shell joins the marker from two parts, so that only the child's
 * command line carries it, not the runner's (whose --exec holds this command as written).
 */
function agentWithChild(marker: string): string {
  const cut = marker.indexOf("-") + 1;
  return `m=${marker.slice(0, cut)}; node -e 'setTimeout(() => {}, 120000)' "\${m}${marker.slice(cut)}" & wait`;
}

describe("interrupting a run", () => {
  const tmp = tempDir("interrupt");
  afterAll(() => tmp.cleanup());

  it("SIGTERM stops the agent's processes and the coordinator the run started, then exits 143", async () => {
    const marker = `lwinterrupt-term-${process.pid}`;
    const state = path.join(tmp.dir, "state");
    const repo = makeRepo(path.join(tmp.dir, "repo"), { "README.md": "x\n" });
    // --skip-doctor: this file tests interrupting a run; oracle.test.ts covers the precondition.
    const runner = startCli(["--state", state, "run", "--skip-doctor", "--check", "false", "--exec", agentWithChild(marker)], { cwd: repo });
    await waitFor(() => processesWith(marker).length > 0, "the agent to start");
    const coordinator = JSON.parse(readFileSync(path.join(state, "coordinator.json"), "utf8")) as { pid: number; runtime_pid: number | null };

    runner.kill("SIGTERM");
    expect(await exitOf(runner)).toBe(143);
    expect(await allGoneWithin(marker)).toBe(true);
    expect(await isGoneWithin(coordinator.pid)).toBe(true);
    // The workerd serving it too (the run hosted the coordinator in its own process).
    expect(coordinator.runtime_pid).toEqual(expect.any(Number));
    expect(await isGoneWithin(coordinator.runtime_pid ?? 0)).toBe(true);
    expect(existsSync(path.join(state, "coordinator.json"))).toBe(false);
  });

  it("a runner killed with SIGKILL takes its agent's zone with it but leaves its workerd behind; the next command on that state stops it, by its recorded pid", async () => {
    const marker = `lwinterrupt-kill-${process.pid}`;
    const state = path.join(tmp.dir, "state-2");
    const repo = makeRepo(path.join(tmp.dir, "repo-2"), { "README.md": "x\n" });
    // --skip-doctor: this file tests interrupting a run; oracle.test.ts covers the precondition.
    const runner = startCli(["--state", state, "run", "--skip-doctor", "--check", "false", "--exec", agentWithChild(marker)], { cwd: repo });
    await waitFor(() => processesWith(marker).length > 0, "the agent to start");
    const coordinator = JSON.parse(readFileSync(path.join(state, "coordinator.json"), "utf8")) as { pid: number; runtime_pid: number | null };
    runner.kill("SIGKILL");
    await exitOf(runner);
    // A real crash: nothing ran the runner's shutdown. The agent's zone dies with the runner all the same
    // (its PID namespace ends with the sandbox, which dies with its parent), so no agent is orphaned;
    // the workerd is.
    expect(await allGoneWithin(marker)).toBe(true);
    const orphan = coordinator.runtime_pid ?? 0;
    expect(isAlive(orphan)).toBe(true);

    const next = await runCli(["--state", state, "--json", "status"], { cwd: repo });
    expect(next.code, next.stdout).toBe(0);
    expect(JSON.parse(next.stdout)).toMatchObject({ status: "running" });
    expect(await isGoneWithin(orphan)).toBe(true);
    expect(existsSync(path.join(state, "coordinator.json"))).toBe(false);
  });
});
