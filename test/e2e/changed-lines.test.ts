import path from "node:path";
import { describe, expect, it } from "vitest";
import { gitIn, loopEvents, makeRepo, runCli, sharedCoordinator } from "../support/cli.js";

// guards.coverage.changed_lines (DESIGN §6.4): through the real CLI, a candidate whose change adds code
// no gate runs is rejected check_inadequate with the unexecuted lines named, and the loop goes on to a
// fix the gates do run. The gate is Node's own test runner writing an lcov report of what it executed.

/** The lines of `file` a verdict's `path:3-5,9; other:1` list names. */
function listedLines(detail: string, file: string): number[] {
  const ranges = new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:([\\d,-]+)`).exec(detail)?.[1] ?? "";
  return ranges
    .split(",")
    .filter(Boolean)
    .flatMap((range) => {
      const [start, end = start] = range.split("-").map(Number) as [number, number?];
      return Array.from({ length: (end ?? start) - start + 1 }, (_, index) => start + index);
    });
}

describe("changed lines no gate executes, through the CLI", () => {
  const { tmp, coordinator } = sharedCoordinator("changed-lines");

  const CALC = ["/** Adds two numbers. */", "export function add(a, b) {", "  return a - b;", "}", ""].join("\n");
  const FIX: [string, string] = ["return a - b;", "return a + b;"];
  const UNTESTED = "\n// Multiplies two numbers.\nexport function mul(a, b) {\n  return a * b;\n}\n";

  /**
   * A project with one buggy function and its test; the agent fixes the bug, and in its first run also
   * adds a function no test calls. The gate runs the tests with Node's coverage, as TAP and lcov.
   */
  const project = () =>
    makeRepo(path.join(tmp.dir, "repo"), {
      "package.json": `${JSON.stringify({ name: "calc", version: "1.0.0", private: true, type: "module" })}\n`,
      "src/calc.js": CALC,
      "test/calc.test.js": [
        'import assert from "node:assert/strict";',
        'import { test } from "node:test";',
        'import { add } from "../src/calc.js";',
        "",
        'test("add adds", () => assert.equal(add(2, 3), 5));',
        "",
      ].join("\n"),
      "the-agent.mjs": [
        'import { readFileSync, writeFileSync } from "node:fs";',
        `let source = readFileSync("src/calc.js", "utf8").replace(${JSON.stringify(FIX[0])}, ${JSON.stringify(FIX[1])});`,
        `if (process.env.LOOPWARDEN_ITERATION === "1") source += ${JSON.stringify(UNTESTED)};`,
        'writeFileSync("src/calc.js", source);',
        "",
      ].join("\n"),
      ".gitignore": ".loopwarden/\ncoverage/\n",
      "loop.yaml": [
        "name: changed-lines",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        "    run: >-",
        "      node --test --experimental-test-coverage",
        "      --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap",
        "      --test-reporter=lcov --test-reporter-destination=coverage/lcov.info",
        "    tests: { tap: .loopwarden/out/tests.tap }",
        "guards:",
        // The untested function lowers the coverage: the floor is not what this loop checks.
        "  coverage: { lcov: coverage/lcov.info, floor: 0%, changed_lines: true }",
        "agent:",
        "  run: node the-agent.mjs",
        "stop:",
        "  max_iterations: 3",
        "",
      ].join("\n"),
    });

  it("rejects a candidate with unexecuted changed lines check_inadequate, lists them as path:line, and the loop goes on", async () => {
    const repo = project();
    const t0 = gitIn(repo, "rev-parse", "HEAD").trim();
    const result = await runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo });
    expect(result.code, `${result.stderr}\n${result.stdout}`).toBe(10);
    const output = JSON.parse(result.stdout.trim()) as Record<string, unknown>;
    expect(output).toMatchObject({ halt_reason: "success_condition_met", exit_class: 10, iteration: 2 });
    const loopId = output.loop_id as string;

    const events = await loopEvents(coordinator.url, loopId);
    const verdicts = events.flatMap((event) => (event.type === "verdict" ? [event.data] : []));
    expect(verdicts.map((verdict) => [verdict.candidate_id, verdict.decision, verdict.reason])).toEqual([
      ["c1", "rejected", "check_inadequate"],
      ["c2", "promoted", expect.any(String)],
    ]);
    // The body of the function no test calls is listed; the fixed line, which the test ran, is not.
    const detail = verdicts[0]?.detail ?? "";
    expect(detail).toMatch(/changed line\(s\) are executed by no gate, so the check cannot judge them: src\/calc\.js:\d/);
    expect(listedLines(detail, "src/calc.js")).toContain(8);
    expect(listedLines(detail, "src/calc.js")).not.toContain(3);

    // What the runner reported: read against each candidate's parent, t0 for both (c1 was rejected).
    const readings = events.flatMap((event) => (event.type === "observation_reported" ? [event.data.observation.guards?.changed_lines] : []));
    expect(readings).toEqual([
      expect.objectContaining({ against: t0, uncovered: [expect.objectContaining({ path: "src/calc.js" })] }),
      expect.objectContaining({ against: t0, uncovered: [], uncovered_count: 0 }),
    ]);

    const explained = await runCli(["--server", coordinator.url, "explain", loopId], { cwd: repo });
    expect(explained.code, explained.stderr).toBe(0);
    expect(explained.stdout).toMatch(/c1 rejected \(check_inadequate\): .*src\/calc\.js:\d/);
    // The rejected candidate is kept under its ref; the branch holds the fix without the untested code.
    expect(gitIn(repo, "show", `refs/loopwarden/rejected/${loopId}/c1:src/calc.js`)).toContain("export function mul");
    expect(gitIn(repo, "show", "HEAD:src/calc.js")).toBe(CALC.replace(...FIX));
  });
});
