import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { verifyChain } from "#shared/engine/index.js";
import { exitOf, loopEvents, makeRepo, recordedLoopId, runCli, sharedCoordinator, startCli, waitFor } from "../support/cli.js";
import { twoRunnerProject } from "../support/two-runner-project.js";

// Issue 26: t0 is measured where the loop's candidates are (DESIGN §11). The contract asks for a runner
// with gpu=h100, and its first gate passes only on such a machine (a marker in that runner's environment,
// which the laptop lacks). `run` on the laptop does not measure t0 itself: it waits, saying so, while the
// labelled `work` runner measures it; `loop_created` names that runner; the loop converges (exit 10).

/** The two-runner project with a first gate that passes only where GPU_MARKER is set, and labels gpu=h100. */
function gpuProject(): Record<string, string> {
  const files = twoRunnerProject();
  const contract = (files["loop.yaml"] ?? "")
    .replace("name: faults-two-runner", "name: gpu-baseline")
    .replace("gates:\n", "gates:\n  - name: gpu\n    run: node gpu-check.mjs\n    timeout: 30s\n")
    .replace("labels: { pool: shared }", "labels: { gpu: h100 }");
  return { ...files, "loop.yaml": contract, "gpu-check.mjs": "process.exit(process.env.GPU_MARKER === 'h100' ? 0 : 1);\n" };
}

describe("t0 measured on a leased job by a runner with the contract's labels", () => {
  const { tmp, coordinator } = sharedCoordinator("t0-leased");

  it("run waits and says so; work measures t0 (recorded in loop_created); the loop converges", async () => {
    const laptop = makeRepo(path.join(tmp.dir, "laptop"), gpuProject());
    const gpuBox = path.join(tmp.dir, "gpu-box");
    execFileSync("git", ["clone", "-q", laptop, gpuBox]);
    // The laptop has no marker: had it measured t0, the gpu gate would have failed there.
    const args = ["--server", coordinator.url, "run"];
    const first = startCli(args, { cwd: laptop, env: { GPU_MARKER: "" } });
    let run = first;
    let work: ReturnType<typeof startCli> | undefined;
    const started: ReturnType<typeof startCli>[] = [];
    try {
      // No runner with the labels yet: the run says what it waits for within 35 s (stderr is a pipe here).
      await waitFor(
        () => /waiting for a runner with gpu=h100 to measure the baseline at [0-9a-f]{10} \(\d+ s so far\)/.test(run.output()) || run.exitCode !== null,
        "the run saying it waits for a runner to measure t0",
        35_000,
      );
      expect(run.exitCode, run.output()).toBeNull();
      // Recorded while it waits: the loop is found by its id, and says what it waits for.
      const loopId = recordedLoopId(laptop, "loop.yaml");
      const status = await runCli(["--json", "--server", coordinator.url, "status"], { cwd: laptop });
      expect(status.code, status.stderr).toBe(0);
      expect(JSON.parse(status.stdout)).toMatchObject({ status: "awaiting_baseline", loop_id: loopId });

      // `watch` says what the loop waits for, then follows its log from its creation to its halt.
      const watch = startCli(["--server", coordinator.url, "watch", loopId], { cwd: laptop });
      started.push(watch);

      // A run stopped while it waits and started again follows the same loop, and waits again.
      first.kill("SIGINT");
      await exitOf(first);
      run = startCli(args, { cwd: laptop, env: { GPU_MARKER: "" } });
      await waitFor(
        () => /finishing the interrupted creation of a loop \(baseline at [0-9a-f]{10}, measured by a runner\)/.test(run.output()) || run.exitCode !== null,
        "the run to pick its creation up",
      ).catch((error: unknown) => {
        throw new Error(`${(error as Error).message}; the first run:\n${first.output()}\nthe second:\n${run.output()}`);
      });
      await waitFor(
        () => run.output().includes(`loop ${loopId}: waiting for a runner with gpu=h100`) || run.exitCode !== null,
        "the run to wait for the same loop",
      );

      work = startCli(["--server", coordinator.url, "work", "--labels", "gpu=h100", "--loop", loopId], { cwd: gpuBox, env: { GPU_MARKER: "h100" } });
      const code = await exitOf(run);
      expect(code, `${run.output()}\nwork:\n${work.output()}`).toBe(10);
      expect(run.output()).toMatch(
        new RegExp(`loop ${loopId} \\(contract loop.yaml\\): the baseline, measured by runner \\S+, has 3 failing test\\(s\\), 1 failing gate\\(s\\)`),
      );
      expect(work.output()).toContain(`baseline recorded: loop ${loopId} is created from it`);
      expect(await exitOf(watch), watch.output()).toBe(0);
      expect(watch.output()).toContain(`loop ${loopId} has no log yet: waiting for a runner with gpu=h100 to measure the baseline`);
      expect(watch.output()).toMatch(/success_condition_met/);

      const events = await loopEvents(coordinator.url, loopId);
      expect(verifyChain(events as unknown as Record<string, unknown>[]).ok).toBe(true);
      const created = events[0];
      if (created?.type !== "loop_created") throw new Error("the first event is not loop_created");
      // The runner that measured t0 is the labelled one, and its gpu gate passed there; every test was collected.
      const measuredBy = created.data.t0_measured_by;
      expect(measuredBy?.runner_id).toBeDefined();
      const laptopRunner = JSON.parse(readFileSync(path.join(laptop, ".loopwarden", "state.json"), "utf8")) as { loops: Record<string, { runner_id: string }> };
      expect(measuredBy?.runner_id).not.toBe(laptopRunner.loops["loop.yaml"]?.runner_id);
      const leases = events.flatMap((event) => (event.type === "lease_granted" ? [event.data.runner_id] : []));
      expect(leases).toContain(measuredBy?.runner_id);
      expect(created.data.t0.observation.gates.map((gate) => [gate.name, gate.exit_code])).toEqual([
        ["gpu", 0],
        ["unit", 1],
      ]);
      expect(created.data.t0.observation.tests.failing).toHaveLength(3);
      expect(events.find((event) => event.type === "halted")?.data).toMatchObject({ halt_reason: "success_condition_met" });
      expect(recordedLoopId(laptop, "loop.yaml")).toBe(loopId);
    } finally {
      for (const child of [first, run, ...started]) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      if (work) {
        const exited = exitOf(work);
        work.kill("SIGINT");
        expect(await exited, work.output()).toBe(0);
      }
    }
  });
});
