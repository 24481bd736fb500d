import { existsSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LoopEvent } from "../../shared/engine/index.js";
import { exitOf, gitIn, makeRepo, runCli, startCli, startCoordinator, tempDir, waitFor, type TestCoordinator } from "../support/cli.js";

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
    const signals = path.join(tmp.dir, "signals");
    mkdirSync(signals);
    // The check's second run (the first candidate's evaluation) records its pid and hangs.
    const repo = makeRepo(path.join(tmp.dir, "repo"), {
      "check.mjs": [
        "import { existsSync, readFileSync, writeFileSync } from 'node:fs';",
        "const dir = process.env.RESUME_SIGNALS;",
        "const runs = existsSync(`${dir}/runs`) ? Number(readFileSync(`${dir}/runs`, 'utf8')) + 1 : 1;",
        "writeFileSync(`${dir}/runs`, String(runs));",
        "if (runs === 2) {",
        "  writeFileSync(`${dir}/check.pid`, String(process.pid));",
        "  await new Promise(() => setInterval(() => {}, 1000));",
        "}",
        "process.exit(Number(readFileSync('level.txt', 'utf8')) >= 2 ? 0 : 1);",
      ].join("\n"),
      "level.txt": "0\n",
      "agent.mjs": "import { writeFileSync } from 'node:fs';\nwriteFileSync('level.txt', `${process.env.LOOPWARDEN_ITERATION}\\n`);\n",
    });
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
    const args = ["--server", coordinator.url, "run", "--check", "node check.mjs", "--exec", "node agent.mjs", "--max-iterations", "5"];
    const env = { RESUME_SIGNALS: signals };

    const first = startCli(args, { cwd: repo, env });
    await waitFor(() => existsSync(path.join(signals, "check.pid")), "the first candidate's evaluation");
    first.kill("SIGKILL");
    await exitOf(first);
    process.kill(Number(readFileSync(path.join(signals, "check.pid"), "utf8")), "SIGKILL");
    const { loop_id: loopId } = JSON.parse(readFileSync(path.join(repo, ".loopwarden", "state.json"), "utf8")) as { loop_id: string };
    // The crash left the candidate committed on the loop branch, undecided.
    expect(gitIn(repo, "log", "-1", "--format=%s")).toContain("candidate of iteration 1");

    const second = await runCli(["--json", ...args], { cwd: repo, env });
    expect(second.code, second.stderr).toBe(10);
    expect(JSON.parse(second.stdout)).toMatchObject({ loop_id: loopId, halt_reason: "success_condition_met", iteration: 2 });

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
