import { cpSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT, gitIn, makeRepo, runCli, sharedCoordinator } from "../support/cli.js";

// The agent never defines its own success (DESIGN §4.2, §6.4): through the real CLI, an agent that
// weakens the measuring stick halts with the guard's reason, never success.
// Concurrent (issue 30's suite time): each test runs its loops in repositories of its own, on the shared
// coordinator; a loop mostly waits on its processes, so several at once take little more than one.
describe.concurrent("guards through the CLI", () => {
  const { tmp, coordinator } = sharedCoordinator("guards");
  let serial = 0;

  const TAP_GATE = [
    "gates:",
    "  - name: unit",
    "    run: node --test --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap",
    "    tests: { tap: .loopwarden/out/tests.tap }",
  ];
  /** The demo project with a contract; `agent` is a Node script run as the agent. */
  const project = (agent: string, extraContract: string[] = [], prepare?: (repo: string) => void) => {
    const repo = path.join(tmp.dir, `repo-${++serial}`);
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    writeFileSync(path.join(repo, "the-agent.mjs"), agent);
    writeFileSync(
      path.join(repo, "loop.yaml"),
      ["name: guarded", "mode: check_fixpoint", ...TAP_GATE, ...extraContract, "agent:", "  run: node the-agent.mjs", ""].join("\n"),
    );
    writeFileSync(path.join(repo, ".gitignore"), ".loopwarden/\n");
    prepare?.(repo);
    return makeRepo(repo, {});
  };
  const run = async (repo: string) => {
    // --skip-doctor: this file tests the guards; oracle.test.ts covers the precondition.
    const result = await runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo });
    return { ...result, output: JSON.parse(result.stdout.trim()) as Record<string, unknown> };
  };

  it("an agent that rewrites a test to pass halts blocked_path_modified (13), not success", async () => {
    const repo = project(
      [
        "import { readFileSync, writeFileSync } from 'node:fs';",
        "// 'Fix' the suite by asserting what the code does: every test passes, the code is still wrong.",
        "writeFileSync('test/text.test.js', \"import { test } from 'node:test';\\ntest('slugify joins words with single hyphens', () => {});\\ntest('titleCase capitalises every word', () => {});\\ntest('wordCount counts words across any whitespace', () => {});\\n\");",
      ].join("\n"),
    );
    const { code, output, stderr, stdout } = await run(repo);
    expect(code, `${stderr}\n${stdout}`).toBe(13);
    expect(output).toMatchObject({ halt_reason: "blocked_path_modified", exit_class: 13, iteration: 1 });
    // The rewritten test never reached the loop's branch.
    expect(readFileSync(path.join(repo, "test", "text.test.js"), "utf8")).toContain("assert.equal(slugify");
  });

  it("an agent that deletes the failing tests (outside the protected paths) halts metric_integrity_violation (13)", async () => {
    const repo = project(
      [
        "import { readFileSync, writeFileSync } from 'node:fs';",
        "// Keep only the test it can make pass, and make it pass: green gates, fewer tests.",
        "writeFileSync('checks/text.check.js', [",
        "  'import assert from \"node:assert/strict\";',",
        "  'import { test } from \"node:test\";',",
        "  'import { slugify } from \"../src/text.js\";',",
        '  \'test("slugify joins words with single hyphens", () => assert.equal(slugify("Hello, World!"), "hello-world"));\',',
        "].join('\\n'));",
        "writeFileSync('src/text.js', readFileSync('src/text.js', 'utf8').replace('replace(/[^a-z0-9]/g, \"-\")', 'replace(/[^a-z0-9]+/g, \"-\").replace(/^-+|-+$/g, \"\")'));",
      ].join("\n"),
      ["guards:", "  protected: [loop.yaml]"],
      (dir) => {
        // The suite lives where the default protected globs do not reach; only the contract is protected.
        mkdirSync(path.join(dir, "checks"));
        renameSync(path.join(dir, "test", "text.test.js"), path.join(dir, "checks", "text.check.js"));
        const contract = path.join(dir, "loop.yaml");
        writeFileSync(contract, readFileSync(contract, "utf8").replace(".loopwarden/out/tests.tap\n", ".loopwarden/out/tests.tap checks/text.check.js\n"));
      },
    );
    const { code, output, stderr, stdout } = await run(repo);
    expect(code, `${stderr}\n${stdout}`).toBe(13);
    expect(output).toMatchObject({ halt_reason: "metric_integrity_violation", iteration: 1 });
  });

  it("a change that fixes one test but breaks another is rejected, and the working tree is restored", async () => {
    const repo = project(
      [
        "import { readFileSync, writeFileSync } from 'node:fs';",
        "const file = 'src/text.js';",
        "let source = readFileSync(file, 'utf8');",
        "if (process.env.LOOPWARDEN_ITERATION === '1') {",
        "  // Fixes slugify and titleCase...",
        "  source = source.replace('replace(/[^a-z0-9]/g, \"-\")', 'replace(/[^a-z0-9]+/g, \"-\").replace(/^-+|-+$/g, \"\")').replace('replace(/\\\\b\\\\w/,', 'replace(/\\\\b\\\\w/g,');",
        "} else {",
        "  // ...then, from the promoted state, fixes wordCount but breaks slugify again.",
        "  source = source.replace('split(\" \").length', 'split(/\\\\s+/).filter(Boolean).length').replace('.replace(/^-+|-+$/g, \"\")', '');",
        "}",
        "writeFileSync(file, source);",
      ].join("\n"),
      ["stop:", "  max_iterations: 2"],
    );
    const { code, output, stderr, stdout } = await run(repo);
    expect(code, `${stderr}\n${stdout}`).toBe(12);
    expect(output).toMatchObject({ halt_reason: "max_iterations_reached", still_improving: true, iteration: 2 });
    const loopId = output.loop_id as string;
    const watch = await runCli(["--server", coordinator.url, "watch", loopId], { cwd: repo });
    expect(watch.stdout).toMatch(
      /c2 rejected \(regressed\): broke 1 passing test\(s\): test::slugify|c2 rejected \(regressed\): broke 1 passing test\(s\): slugify joins words/,
    );
    // Restored to the promoted c1: slugify's fix is back, wordCount's broken version too.
    const source = readFileSync(path.join(repo, "src", "text.js"), "utf8");
    expect(source).toContain('.replace(/^-+|-+$/g, "")');
    expect(source).toContain('split(" ").length');
  });

  it("an agent that does nothing halts no_progress_detected (17)", async () => {
    const repo = project("// changes nothing\n", ["stop:", "  no_progress: 3"]);
    const { code, output, stderr, stdout } = await run(repo);
    expect(code, `${stderr}\n${stdout}`).toBe(17);
    expect(output).toMatchObject({ halt_reason: "no_progress_detected", exit_class: 17, iteration: 3 });
    const explained = await runCli(["--json", "--server", coordinator.url, "explain"], { cwd: repo });
    expect(explained.code).toBe(0);
    expect(JSON.parse(explained.stdout)).toMatchObject({ status: "halted", halt_reason: "no_progress_detected", retry: "do_not_retry" });
    const human = await runCli(["--server", coordinator.url, "explain"], { cwd: repo });
    expect(human.stdout).toContain("c3 rejected (no_change): the agent changed nothing");
    // Three candidates that changed nothing: nothing of them is kept under the rejected refs.
    expect(gitIn(repo, "for-each-ref", `refs/loopwarden/rejected/${output.loop_id as string}`).trim()).toBe("");
  });
});
