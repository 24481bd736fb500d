import { existsSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { monitorLowerBound } from "#shared/determinism/flake-rate.js";
import { loopEvents, makeRepo, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";

// The check is checked (DESIGN §6.5), through the real CLI and coordinator: the precondition before a
// new loop's first agent run, the flake monitor fed by rechecks of the best, and the recheck on resume.
// Each gate here keeps state outside its clone (a counter, a switch) to be flaky or to change on purpose,
// which a confined gate cannot (DESIGN §6.7): hence `isolation: none`. Flakiness is the subject here.

interface Outcome {
  loop_id: string;
  halt_reason?: string;
  exit_class?: number;
  iteration: number;
  receipt_url?: string;
}

/** The fraction of the golden-ratio sequence at `run`: equidistributed, so `< 0.2` fails one run in five. */
const sequence = (run: number) => (run * 0.6180339887498949) % 1;
const FLAKY_GATE = [
  "import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';",
  "const counter = process.argv[2];",
  "const run = existsSync(counter) ? Number(readFileSync(counter, 'utf8')) + 1 : 1;",
  "writeFileSync(counter, String(run));",
  "const racy = (run * 0.6180339887498949) % 1 >= 0.2;",
  "mkdirSync('out', { recursive: true });",
  "writeFileSync('out/tests.tap', ['TAP version 13', '1..2', 'not ok 1 - not fixed yet', `${racy ? 'ok' : 'not ok'} 2 - racy cache`, ''].join('\\n'));",
  "process.exit(1);",
].join("\n");

// Concurrent (issue 30's suite time): each test runs its loops in repositories of its own, on the shared
// coordinator; a loop mostly waits on its processes, so several at once take little more than one.
describe.concurrent("a check that is checked", () => {
  const { tmp, coordinator } = sharedCoordinator("oracle");
  let serial = 0;
  const repoWith = (files: Record<string, string>) => makeRepo(path.join(tmp.dir, `repo-${++serial}`), files);
  const run = (repo: string, ...args: string[]) => runCli(["--json", "--server", coordinator.url, "run", ...args], { cwd: repo });
  const outcomeOf = (stdout: string) => JSON.parse(stdout) as Outcome;

  it("never runs the agent on a check that stays green whatever the diff: the precondition's mutation halts it check_inadequate, recorded and signed", async () => {
    const marker = path.join(tmp.dir, `agent-ran-${++serial}`);
    const repo = repoWith({
      // The gate only checks the syntax: any broken parser still passes it.
      "src/parse.mjs": "export const parse = (text) => JSON.parse(text);\n",
      "agent.mjs": `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'ran');\n`,
      "loop.yaml": [
        "name: green-whatever",
        "mode: check_fixpoint",
        "gates:",
        "  - name: syntax",
        "    run: node --check src/parse.mjs",
        "  - name: todo",
        "    run: node -e 'process.exit(1)'",
        "doctor:",
        "  mutate: node -e \"require('fs').writeFileSync('src/parse.mjs', 'export const parse = () => 42;\\n')\"",
        "agent:",
        "  run: node agent.mjs",
        "isolation: none",
        "",
      ].join("\n"),
    });
    const result = await run(repo);
    expect(result.code, result.stderr).toBe(15);
    const outcome = outcomeOf(result.stdout);
    expect(outcome).toMatchObject({ halt_reason: "check_inadequate", exit_class: 15, iteration: 0 });
    expect(existsSync(marker)).toBe(false);
    const events = await loopEvents(coordinator.url, outcome.loop_id);
    expect(events.map((event) => event.type)).toEqual(["loop_created", "halted", "receipt_issued"]);
    const created = events[0];
    expect(created?.type === "loop_created" && created.data.doctor).toMatchObject({
      status: "measured",
      runs: 3,
      mutation: { red_count: 0, changed_paths: 1 },
    });
    const halted = events[1];
    expect(halted?.type === "halted" && halted.data.detail).toContain("stayed green on the mutated tree");
    // A record that halts its loop is not kept for reuse: the next creation measures the check again.
    expect(existsSync(path.join(repo, ".loopwarden", "doctor")) ? readdirSync(path.join(repo, ".loopwarden", "doctor")) : []).toEqual([]);
    // The receipt re-derives the halt from the recorded precondition, and says what was measured.
    const verified = await runCli(["--json", "verify", outcome.receipt_url ?? ""], { cwd: repo });
    expect(verified.code, verified.stdout).toBe(0);
    expect(JSON.parse(verified.stdout)).toMatchObject({
      valid: true,
      halt_reason: "check_inadequate",
      oracle: { precondition: "measured", precondition_runs: 3 },
    });
  });

  it("halts a check that flips one run in five check_flaky by its flake monitor, at the recheck the bound predicts", async () => {
    const counter = path.join(tmp.dir, `counter-${++serial}`);
    const repo = repoWith({
      "gate.mjs": FLAKY_GATE,
      // The agent changes nothing: each iteration is rejected no_change, and the best is re-run before the next.
      "agent.mjs": "\n",
      "loop.yaml": [
        "name: one-in-five",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        `    run: node gate.mjs ${counter}`,
        "    tests: { tap: out/tests.tap }",
        "determinism: { recheck_every: 1 }",
        "stop: { max_iterations: 60, no_progress: 60 }",
        "agent:",
        "  run: node agent.mjs",
        "isolation: none",
        "",
      ].join("\n"),
    });
    // What the bound predicts for this sequence: runs 1-4 are t0, the precondition's two fresh clones and
    // its re-run in one clone (all pass the racy test); recheck r is run 4 + r. The precondition's two runs
    // are the monitor's first samples; it halts at the first recheck whose lower bound exceeds 1%.
    let samples = 2;
    let deviations = 0;
    let predicted = 0;
    for (let recheck = 1; predicted === 0; recheck++) {
      samples++;
      if (sequence(4 + recheck) < 0.2) deviations++;
      if (deviations > 0 && monitorLowerBound(deviations, samples) > 0.01) predicted = recheck;
    }
    expect(predicted).toBeLessThan(60);
    const result = await run(repo);
    expect(result.code, result.stderr).toBe(14);
    const outcome = outcomeOf(result.stdout);
    // Recheck r runs before iteration r + 1's agent, once r iterations are done.
    expect(outcome).toMatchObject({ halt_reason: "check_flaky", exit_class: 14, iteration: predicted });
    const events = await loopEvents(coordinator.url, outcome.loop_id);
    expect(events.filter((event) => event.type === "recheck_reported")).toHaveLength(predicted);
    const halted = events.find((event) => event.type === "halted");
    const detail = halted?.type === "halted" ? halted.data.detail : "";
    expect(detail).toContain(`${deviations} of ${samples} run(s) whose outcome was known gave other outcomes`);
    expect(detail).toMatch(new RegExp(`racy cache ${deviations}× \\(t0 re-run at iteration \\d+`));
    const verified = await runCli(["--json", "verify", outcome.receipt_url ?? ""], { cwd: repo });
    expect(verified.code, verified.stdout).toBe(0);
  });

  it("re-runs the best on resume and halts check_flaky before the agent runs when the check changed behaviour meanwhile", async () => {
    const switchFile = path.join(tmp.dir, `dependency-${++serial}`);
    writeFileSync(switchFile, "1.0.0");
    const repo = repoWith({
      // A test that depends on something outside the repository (a dependency, a service): it passes at 1.0.0.
      "gate.mjs": [
        "import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';",
        "const version = readFileSync(process.argv[2], 'utf8').trim();",
        "mkdirSync('out', { recursive: true });",
        "writeFileSync('out/tests.tap', ['TAP version 13', '1..2', 'not ok 1 - not fixed yet', `${version === '1.0.0' ? 'ok' : 'not ok'} 2 - talks to the dependency`, ''].join('\\n'));",
        "process.exit(1);",
      ].join("\n"),
      "agent.mjs": "\n",
      "loop.yaml": [
        "name: resumed-drift",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        `    run: node gate.mjs ${switchFile}`,
        "    tests: { tap: out/tests.tap }",
        "determinism: { recheck_every: off }",
        "stop: { max_iterations: 10, no_progress: 10 }",
        "agent:",
        "  run: node agent.mjs",
        "isolation: none",
        "",
      ].join("\n"),
    });
    const first = await run(repo, "--once");
    expect(first.code, first.stderr).toBe(0);
    expect(outcomeOf(first.stdout)).toMatchObject({ iteration: 1 });
    // The precondition passed: its record is kept for the next loop of this contract on this tree.
    expect(readdirSync(path.join(repo, ".loopwarden", "doctor"))).toHaveLength(1);
    // Days later the dependency moved: the best's recorded outcome no longer holds.
    writeFileSync(switchFile, "2.0.0");
    const resumed = await run(repo, "--once");
    expect(resumed.code, resumed.stderr).toBe(14);
    expect(outcomeOf(resumed.stdout)).toMatchObject({ halt_reason: "check_flaky", iteration: 1 });
    const events = await loopEvents(coordinator.url, recordedLoopId(repo, "loop.yaml"));
    const types = events.map((event) => event.type);
    expect(types.slice(-3)).toEqual(["recheck_reported", "halted", "receipt_issued"]);
    // The resumed run's agent never ran: the only candidate is the first run's.
    expect(types.filter((type) => type === "candidate_proposed")).toHaveLength(1);
    const halted = events.find((event) => event.type === "halted");
    expect(halted?.type === "halted" && halted.data.detail).toContain(
      "on resume, before the next agent run than recorded for 1 test(s): talks to the dependency",
    );
  });

  it("starts without the precondition on --skip-doctor, and the receipt says so", async () => {
    const repo = repoWith({
      "gate.mjs": "process.exit(1);\n",
      "agent.mjs": "\n",
      "loop.yaml": [
        "name: skipped",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        "    run: node gate.mjs",
        "stop: { max_iterations: 1 }",
        "agent:",
        "  run: node agent.mjs",
        "",
      ].join("\n"),
    });
    const result = await run(repo, "--skip-doctor");
    expect(result.code, result.stderr).toBe(12);
    const outcome = outcomeOf(result.stdout);
    const created = (await loopEvents(coordinator.url, outcome.loop_id))[0];
    expect(created?.type === "loop_created" && created.data.doctor).toEqual({ status: "skipped" });
    const verified = await runCli(["--json", "verify", outcome.receipt_url ?? ""], { cwd: repo });
    expect(JSON.parse(verified.stdout)).toMatchObject({ valid: true, oracle: { precondition: "skipped" } });
    expect((JSON.parse(verified.stdout) as { oracle: { summary: string } }).oracle.summary).toContain("precondition skipped (--skip-doctor)");
  });
});
