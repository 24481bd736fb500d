import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isAlive, isGoneWithin } from "../support/process.js";
import { exitOf, makeRepo, startCli, tempDir, waitFor } from "../support/cli.js";

describe("interrupting a run", () => {
  const tmp = tempDir("interrupt");
  afterAll(() => tmp.cleanup());

  it("SIGTERM stops the agent's process group and the coordinator the run started, then exits 143", async () => {
    const pidFile = path.join(tmp.dir, "agent.pid");
    const state = path.join(tmp.dir, "state");
    const repo = makeRepo(path.join(tmp.dir, "repo"), { "README.md": "x\n" });
    const runner = startCli(["--state", state, "run", "--check", "false", "--exec", `sleep 120 & echo $! > ${pidFile}; wait`], { cwd: repo });
    await waitFor(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the agent to start");
    const coordinator = JSON.parse(readFileSync(path.join(state, "coordinator.json"), "utf8")) as { pid: number };
    const agentPid = Number(readFileSync(pidFile, "utf8"));
    expect(isAlive(agentPid)).toBe(true);

    runner.kill("SIGTERM");
    expect(await exitOf(runner)).toBe(143);
    expect(await isGoneWithin(agentPid)).toBe(true);
    expect(await isGoneWithin(coordinator.pid)).toBe(true);
    expect(existsSync(path.join(state, "coordinator.json"))).toBe(false);
  });
});
