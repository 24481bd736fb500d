import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LoopEvent } from "../../shared/engine/index.js";
import { makeLevelProject } from "../support/level-project.js";
import { exitOf, gitIn, runCli, startCli, startCoordinator, tempDir, waitFor, type TestCoordinator } from "../support/cli.js";

// The runner is killed with SIGKILL while it evaluates a candidate; `loopwarden run` again picks the
// same loop up from the coordinator, finishes that candidate under its own lease, and goes on.
describe("a runner crash mid-evaluation", () => {
  const tmp = tempDir("resume");
  let coordinator: TestCoordinator | undefined;
  afterAll(async () => {
    await coordinator?.stop();
    tmp.cleanup();
  });

  it("resumes the same loop without a duplicate candidate", async () => {
    const { repo, signals } = makeLevelProject(tmp.dir);
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
    const args = ["--server", coordinator.url, "run", "--check", "node check.mjs", "--exec", "node agent.mjs", "--max-iterations", "5"];
    const env = { LEVEL_SIGNALS: signals };

    const first = startCli(args, { cwd: repo, env });
    await waitFor(() => existsSync(path.join(signals, "check.pid")), "the first candidate's evaluation");
    first.kill("SIGKILL");
    await exitOf(first);
    // The hung check was the runner's child in a group of its own: a real crash leaves it behind.
    process.kill(Number(readFileSync(path.join(signals, "check.pid"), "utf8")), "SIGKILL");
    const { loop_id: loopId } = JSON.parse(readFileSync(path.join(repo, ".loopwarden", "state.json"), "utf8")) as { loop_id: string };
    // The crash left the candidate committed on the loop branch, undecided, and its clone behind.
    expect(gitIn(repo, "log", "-1", "--format=%s")).toContain("candidate of iteration 1");
    expect(readdirSync(path.join(repo, ".loopwarden", "clones"))).toHaveLength(1);

    const second = await runCli(["--json", ...args], { cwd: repo, env });
    expect(second.code, second.stderr).toBe(10);
    expect(JSON.parse(second.stdout)).toMatchObject({ loop_id: loopId, halt_reason: "success_condition_met", iteration: 2 });
    expect(readdirSync(path.join(repo, ".loopwarden", "clones"))).toEqual([]);

    const events = (await (await fetch(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)));
    const proposed = events.filter((event) => event.type === "candidate_proposed").map((event) => event.data.candidate_id);
    expect(proposed).toEqual(["c1", "c2"]);
    const verdicts = events.filter((event) => event.type === "verdict").map((event) => [event.data.candidate_id, event.data.decision]);
    expect(verdicts).toEqual([
      ["c1", "rejected"],
      ["c2", "promoted"],
    ]);
    // The resumed runner finished c1 under the lease it already held: no second lease was needed.
    expect(events.filter((event) => event.type === "lease_granted").map((event) => event.data.candidate_id)).toEqual(["c1", "c2"]);
  });
});
