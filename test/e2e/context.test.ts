import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { makeRepo, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";

// The context the runner builds before each agent run (docs/agent.md, "What the agent is told";
// docs/design.md §6.9), through the real CLI: the failing test's stack trace names a file three
// directories down, and the agent is pointed at it and at the test's imports, within the budget; the
// manifest is in the receipt. A budget too small for even that halts the loop before the agent runs.

/** The gate prints the spec reporter's failures (with their stack traces) to its log, and TAP to a file. */
const GATE = [
  "gates:",
  "  - name: unit",
  "    run: node --test --test-reporter=spec --test-reporter-destination=stdout --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap",
  "    tests: { tap: .loopwarden/out/tests.tap }",
];

/** Prints what it was told (into its log), then fixes the deep file. */
const AGENT = [
  "import { readFileSync, writeFileSync } from 'node:fs';",
  "console.log('CONTEXT BEGIN');",
  "console.log(readFileSync(process.env.LOOPWARDEN_CONTEXT + '/context.md', 'utf8'));",
  "console.log('CONTEXT END');",
  "writeFileSync('src/a/b/c/deep.js', 'export function deep(x) {\\n  return (x ?? \"\").trim();\\n}\\n');",
  "writeFileSync('agent-ran.txt', 'yes\\n');",
].join("\n");

describe("the agent's context", () => {
  const { tmp, coordinator } = sharedCoordinator("context");
  let serial = 0;

  const project = (budget?: number) => {
    const repo = path.join(tmp.dir, `repo-${++serial}`);
    const files: Record<string, string> = {
      "package.json": '{ "name": "deep", "type": "module", "private": true }\n',
      "src/a/b/c/deep.js": "export function deep(x) {\n  return x.trim();\n}\n",
      "src/util.js": "export const id = (x) => x;\n",
      "src/index.js": "export { deep } from './a/b/c/deep.js';\n",
      "test/deep.test.js": [
        "import assert from 'node:assert/strict';",
        "import test from 'node:test';",
        "import { deep } from '../src/a/b/c/deep.js';",
        "import { id } from '../src/util.js';",
        "test('deep trims', () => assert.equal(deep(' x '), 'x'));",
        "test('deep takes null', () => assert.equal(deep(id(null)), ''));",
        "",
      ].join("\n"),
      "the-agent.mjs": AGENT,
      ".gitignore": ".loopwarden/\nagent-ran.txt\n",
      "loop.yaml": [
        "name: deep",
        "mode: check_fixpoint",
        ...GATE,
        "agent:",
        "  run: node the-agent.mjs",
        ...(budget === undefined ? [] : ["  context:", `    budget: ${budget}`]),
        "stop:",
        "  max_iterations: 2",
        "",
      ].join("\n"),
    };
    for (const [file, text] of Object.entries(files)) {
      mkdirSync(path.dirname(path.join(repo, file)), { recursive: true });
      writeFileSync(path.join(repo, file), text);
    }
    return makeRepo(repo, {});
  };

  it("names the file the stack trace names three directories down and the test's imports, and the receipt records the manifest", async () => {
    const repo = project();
    const run = await runCli(["--json", "--server", coordinator.url, "run"], { cwd: repo });
    expect(run.code, run.stderr).toBe(10);
    const loopId = recordedLoopId(repo, "loop.yaml");
    const log = readFileSync(path.join(repo, ".loopwarden", "logs", loopId, "agent-1.log"), "utf8");
    const told = log.slice(log.indexOf("CONTEXT BEGIN"), log.indexOf("CONTEXT END"));
    expect(told).toMatch(/## Failing tests\n\n- deep takes null\n/);
    expect(told).toContain("files/src/a/b/c/deep.js — named by a stack trace in the unit gate's output");
    expect(told).toContain("files/src/util.js — imported by test/deep.test.js");
    expect(told).toContain("files/src/index.js — imports src/a/b/c/deep.js");
    expect(told).toContain("Cannot read properties of null");

    const receiptUrl = (JSON.parse(run.stdout) as { receipt_url: string }).receipt_url;
    const receipt = (await (await fetch(`${receiptUrl}.json`)).json()) as { payload: string };
    const predicate = (
      JSON.parse(Buffer.from(receipt.payload, "base64").toString("utf8")) as {
        predicate: { best: { candidate_id: string; context?: { files: { path: string; tier: string; sha256: string }[]; tokens: number; budget: number } } };
      }
    ).predicate;
    expect(predicate.best.candidate_id).toBe("c1");
    const context = predicate.best.context;
    expect(context?.budget).toBe(32_000);
    expect(context?.tokens).toBeLessThanOrEqual(32_000);
    expect(context?.files).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ path: "src/a/b/c/deep.js", tier: "stack_trace" }),
        expect.objectContaining({ path: "src/util.js", tier: "import_closure" }),
      ]),
    );
    const verified = await runCli(["verify", receiptUrl], { cwd: repo });
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
  });

  it("a budget of 10 tokens halts context_budget_unsatisfiable (11) before the agent runs", async () => {
    const repo = project(10);
    const run = await runCli(["--json", "--server", coordinator.url, "run"], { cwd: repo });
    expect(run.code, run.stderr).toBe(11);
    expect(JSON.parse(run.stdout.trim())).toMatchObject({ halt_reason: "context_budget_unsatisfiable", exit_class: 11, iteration: 0 });
    expect(() => readFileSync(path.join(repo, "agent-ran.txt"))).toThrow();
    const loopId = recordedLoopId(repo, "loop.yaml");
    const watched = await runCli(["--server", coordinator.url, "watch", loopId], { cwd: repo });
    expect(watched.stdout + watched.stderr).toMatch(/context_budget_unsatisfiable/);
  });
});
