import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LoopEvent, verifyChain } from "#shared/engine/index.js";
import { LoopSummary } from "#shared/wire/api.js";
import { LEVEL_HOLD, makeLevelProject } from "../support/level-project.js";
import { api, clonesOf, exitOf, recordedLoopId, startCli, startCoordinator, tempDir, waitFor, type TestCoordinator } from "../support/cli.js";
import { dirsHolding } from "../support/zone-markers.js";

// The coordinator (serve → wrangler → workerd) is killed with SIGKILL while the runner holds a lease
// and is evaluating; it restarts on the same state and port, and the loop finishes without losing or
// duplicating a candidate.
describe("a coordinator crash mid-loop", () => {
  const tmp = tempDir("crash");
  let coordinator: TestCoordinator | undefined;
  afterAll(async () => {
    await coordinator?.stop();
    tmp.cleanup();
  });

  it("loses nothing: the runner retries, the loop resumes, every candidate appears once", async () => {
    const { repo, check } = makeLevelProject(tmp.dir);
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
    // --skip-doctor: this file tests a coordinator crash mid-loop; oracle.test.ts covers the precondition.
    const runner = startCli(["--server", coordinator.url, "run", "--skip-doctor", "--check", check, "--exec", "node agent.mjs", "--max-iterations", "5"], {
      cwd: repo,
      env: { LEVEL_HOLD: "1" },
    });

    // The first candidate's check holds in its clone (the exec zone's one writable directory) until released there.
    const held = () => dirsHolding(clonesOf(runner.pid ?? 0), LEVEL_HOLD.started);
    await waitFor(() => held().length > 0 || runner.exitCode !== null, "the first candidate's evaluation");
    const [clone] = held();
    if (!clone) throw new Error(`the runner ended before its first evaluation:\n${runner.output()}`);
    await coordinator.crash();
    // The evaluation finishes while the coordinator is down: the runner must retry its upload and report.
    writeFileSync(path.join(clone, LEVEL_HOLD.release), "");
    await waitFor(() => runner.output().includes("coordinator unreachable"), "the runner to notice the outage");
    coordinator = await startCoordinator(coordinator.stateDir, coordinator.port);

    const code = await exitOf(runner);
    expect(code, runner.output()).toBe(10);
    expect(runner.output()).toContain("halted: success_condition_met (exit 10) after 2 iteration(s)");
    const loopId = recordedLoopId(repo);

    const loop = LoopSummary.parse(await (await api(`${coordinator.url}/v1/loops/${loopId}`)).json());
    const raw = (await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(verifyChain(raw)).toEqual({ ok: true, head: loop.head });
    const events = raw.map((event) => LoopEvent.parse(event));
    const proposed = events.filter((event) => event.type === "candidate_proposed").map((event) => event.data.candidate_id);
    expect(proposed).toEqual(["c1", "c2"]);
    const verdicts = events.filter((event) => event.type === "verdict").map((event) => [event.data.candidate_id, event.data.decision]);
    expect(verdicts).toEqual([
      ["c1", "rejected"],
      ["c2", "promoted"],
    ]);
  });
});
