import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isAlive, isGoneWithin } from "../support/process.js";
import { exitOf, makeRepo, runCli, startCli, tempDir, waitFor } from "../support/cli.js";

describe("interrupting a run", () => {
  const tmp = tempDir("interrupt");
  afterAll(() => tmp.cleanup());

  it("SIGTERM stops the agent's process group and the coordinator the run started, then exits 143", async () => {
    const pidFile = path.join(tmp.dir, "agent.pid");
    const state = path.join(tmp.dir, "state");
    const repo = makeRepo(path.join(tmp.dir, "repo"), { "README.md": "x\n" });
    const runner = startCli(["--state", state, "run", "--check", "false", "--exec", `sleep 120 & echo $! > ${pidFile}; wait`], { cwd: repo });
    await waitFor(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the agent to start");
    const coordinator = JSON.parse(readFileSync(path.join(state, "coordinator.json"), "utf8")) as { pid: number; runtime_pid: number | null };
    const agentPid = Number(readFileSync(pidFile, "utf8"));
    expect(isAlive(agentPid)).toBe(true);

    runner.kill("SIGTERM");
    expect(await exitOf(runner)).toBe(143);
    expect(await isGoneWithin(agentPid)).toBe(true);
    expect(await isGoneWithin(coordinator.pid)).toBe(true);
    // The workerd serving it too (the run hosted the coordinator in its own process).
    expect(coordinator.runtime_pid).toEqual(expect.any(Number));
    expect(await isGoneWithin(coordinator.runtime_pid ?? 0)).toBe(true);
    expect(existsSync(path.join(state, "coordinator.json"))).toBe(false);
  });

  it("a runner killed with SIGKILL leaves its workerd behind; the next command on that state stops it, by its recorded pid", async () => {
    const pidFile = path.join(tmp.dir, "agent-2.pid");
    const state = path.join(tmp.dir, "state-2");
    const repo = makeRepo(path.join(tmp.dir, "repo-2"), { "README.md": "x\n" });
    const runner = startCli(["--state", state, "run", "--check", "false", "--exec", `echo $$ > ${pidFile}; sleep 120`], { cwd: repo });
    await waitFor(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the agent to start");
    const coordinator = JSON.parse(readFileSync(path.join(state, "coordinator.json"), "utf8")) as { pid: number; runtime_pid: number | null };
    runner.kill("SIGKILL");
    await exitOf(runner);
    // A real crash: nothing ran the runner's shutdown, so the agent and workerd are orphans.
    process.kill(-Number(readFileSync(pidFile, "utf8")), "SIGKILL");
    const orphan = coordinator.runtime_pid ?? 0;
    expect(isAlive(orphan)).toBe(true);

    const next = await runCli(["--state", state, "--json", "status"], { cwd: repo });
    expect(next.code, next.stdout).toBe(0);
    expect(JSON.parse(next.stdout)).toMatchObject({ status: "running" });
    expect(await isGoneWithin(orphan)).toBe(true);
    expect(existsSync(path.join(state, "coordinator.json"))).toBe(false);
  });
});
