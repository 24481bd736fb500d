import path from "node:path";
import { describe, expect, it } from "vitest";
import { loopEvents, makeRepo, runCli, sharedCoordinator } from "../support/cli.js";

// A task_list loop (DESIGN §6.1): each task is done only when its own check passes; a candidate is
// promoted when it completes a task and undoes none.
describe("a task_list loop", () => {
  const { tmp, coordinator } = sharedCoordinator("tasks");

  const contract = (tasks: string[]) =>
    [
      "name: two-tasks",
      "mode: task_list",
      "gates:",
      "  - name: syntax",
      "    run: node --check notes.mjs",
      "tasks:",
      ...tasks,
      "agent:",
      "  run: node agent.mjs",
      "",
    ].join("\n");

  it("completes one task per iteration and converges when every task's check passes", async () => {
    const repo = makeRepo(path.join(tmp.dir, "repo"), {
      "notes.mjs": "export const done = [];\n",
      "checks/task.mjs": "import { done } from '../notes.mjs';\nprocess.exit(done.includes(process.argv[2]) ? 0 : 1);\n",
      // Iteration n marks task n done, keeping the earlier ones.
      "agent.mjs": [
        "import { writeFileSync } from 'node:fs';",
        "const n = Number(process.env.LOOPWARDEN_ITERATION);",
        "const done = ['dates', 'times'].slice(0, n);",
        "writeFileSync('notes.mjs', `export const done = ${JSON.stringify(done)};\\n`);",
      ].join("\n"),
      "loop.yaml": contract([
        "  - { id: dates, title: parse dates, check: node checks/task.mjs dates }",
        "  - { id: times, title: parse times, check: node checks/task.mjs times }",
      ]),
      ".gitignore": ".loopwarden/\n",
    });
    const result = await runCli(["--json", "--server", coordinator.url, "run"], { cwd: repo });
    expect(result.code, result.stderr).toBe(10);
    expect(JSON.parse(result.stdout)).toMatchObject({ halt_reason: "success_condition_met", iteration: 2 });
    const status = await runCli(["--json", "--server", coordinator.url, "status"], { cwd: repo });
    expect(JSON.parse(status.stdout)).toMatchObject({ loop: { mode: "task_list", t0: { failing: 2 }, best: { candidate_id: "c2", failing: 0 } } });
  });

  it("accepts a task without its own check and halts check_inadequate at once, naming the task, recorded and signed", async () => {
    const repo = makeRepo(path.join(tmp.dir, "no-check"), {
      "notes.mjs": "export const done = [];\n",
      "checks/task.mjs": "import { done } from '../notes.mjs';\nprocess.exit(done.includes(process.argv[2]) ? 0 : 1);\n",
      "agent.mjs": "\n",
      "loop.yaml": contract(["  - { id: dates, title: parse dates, check: node checks/task.mjs dates }", "  - { id: times, title: parse times }"]),
    });
    const result = await runCli(["--json", "--server", coordinator.url, "run"], { cwd: repo });
    expect(result.code, result.stderr).toBe(15);
    const outcome = JSON.parse(result.stdout) as { loop_id: string; halt_reason: string; iteration: number; receipt_url: string };
    expect(outcome).toMatchObject({ halt_reason: "check_inadequate", iteration: 0 });
    const events = await loopEvents(coordinator.url, outcome.loop_id);
    expect(events.map((event) => event.type)).toEqual(["loop_created", "halted", "receipt_issued"]);
    const halted = events[1];
    expect(halted?.type === "halted" && halted.data.detail).toContain("task times has no check of its own");
    const verified = await runCli(["--json", "verify", outcome.receipt_url], { cwd: repo });
    expect(verified.code, verified.stdout).toBe(0);
    expect(JSON.parse(verified.stdout)).toMatchObject({ valid: true, halt_reason: "check_inadequate", exit_class: 15 });
  });
});
