import { cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT, gitIn, makeRepo, runCli, sharedCoordinator } from "../support/cli.js";

// loop.yaml end to end: init → a bad key refused with its path → a JUnit-reporting gate whose per-test
// ids make partial progress count → step → watch, each printing exactly one JSON object with --json.
describe("a loop.yaml contract", () => {
  const { tmp, coordinator } = sharedCoordinator("contract");
  let serial = 0;
  const cli = (repo: string, ...args: string[]) => runCli(["--json", "--server", coordinator.url, ...args], { cwd: repo });
  const one = (stdout: string) => {
    const lines = stdout.trim().split("\n");
    expect(lines, stdout).toHaveLength(1);
    return JSON.parse(lines[0] ?? "") as Record<string, unknown>;
  };
  const demoRepo = () => {
    const repo = path.join(tmp.dir, `demo-${++serial}`);
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    return makeRepo(repo, {});
  };

  it("init writes a starter contract that names what is left to fill in and the agent's program.md, and ignores .loopwarden/", async () => {
    const repo = demoRepo();
    const result = await cli(repo, "init");
    expect(result.code, result.stderr).toBe(0);
    expect(one(result.stdout)).toMatchObject({
      status: "ok",
      contract: "loop.yaml",
      program: "program.md",
      todo: ["agent.run (your agent command)"],
      protected: ["loop.yaml", "package.json", "test/text.test.js"],
    });
    const written = readFileSync(path.join(repo, "loop.yaml"), "utf8");
    expect(written).toContain("mode: check_fixpoint");
    // The demo's `node --test` script is recognised: the gate writes a TAP report, so each test counts.
    expect(written).toContain(
      'run: "npm install --no-audit --no-fund && node --test --test-reporter=spec --test-reporter-destination=stdout --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap"',
    );
    expect(written).toContain("tests: { tap: .loopwarden/out/tests.tap }");
    expect(readFileSync(path.join(repo, ".gitignore"), "utf8")).toContain(".loopwarden/");
    // The agent's instructions: the contract's objective and gate, and the files the runner points it at.
    const program = readFileSync(path.join(repo, "program.md"), "utf8");
    expect(program).toContain("make every test pass without weakening any test");
    expect(program).toContain("`npm install --no-audit --no-fund && node --test --test-reporter=spec");
    // ...and what is off limits in this very repository, by name.
    expect(program).toContain("- `test/text.test.js`\n");
    expect(program).toContain("$LOOPWARDEN_LAST_VERDICT");

    // Running it before filling in the agent says exactly what is missing.
    gitIn(repo, "add", "-A");
    gitIn(repo, "commit", "-qm", "contract");
    const run = await cli(repo, "run");
    expect(run.code).toBe(2);
    expect(one(run.stdout)).toMatchObject({ status: "error", errors: [expect.stringContaining("agent.run: is empty")] });

    const again = await cli(repo, "init");
    expect(again.code).toBe(1);
    expect(one(again.stdout).errors).toEqual([expect.stringContaining("loop.yaml already exists")]);

    // A program.md of the user's own is left as it is.
    const own = demoRepo();
    writeFileSync(path.join(own, "program.md"), "# my own instructions\n");
    const kept = await cli(own, "init");
    expect(kept.code, kept.stderr).toBe(0);
    expect(one(kept.stdout)).toMatchObject({ status: "ok", contract: "loop.yaml", program: null });
    expect(readFileSync(path.join(own, "program.md"), "utf8")).toBe("# my own instructions\n");
  });

  it("refuses a contract with a bad key or value, naming file, line and key path, and creates nothing", async () => {
    const repo = demoRepo();
    writeFileSync(
      path.join(repo, "loop.yaml"),
      [
        "name: bad",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        "    run: node --test",
        "    timout: 2m",
        "  - name: lint",
        "    run: true",
        "    timeout: 2 minutes",
        "agent:",
        "  run: node agent.mjs",
        "",
      ].join("\n"),
    );
    gitIn(repo, "add", "-A");
    gitIn(repo, "commit", "-qm", "bad contract");
    const result = await cli(repo, "run");
    expect(result.code).toBe(2);
    const [message] = one(result.stdout).errors as string[];
    expect(message).toContain('loop.yaml:4 gates[0].timout: unknown key; did you mean "timeout"?');
    expect(message).toContain('loop.yaml:9 gates[1].timeout: "2 minutes" is not a duration');
    expect(existsSync(path.join(repo, ".loopwarden", "state.json"))).toBe(false);
  });

  it("counts per-test progress from a JUnit report: each fixed test is a promotion, until every gate passes", async () => {
    const repo = demoRepo();
    writeFileSync(
      path.join(repo, "loop.yaml"),
      [
        "name: textkit",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        "    run: node --test --test-reporter=junit --test-reporter-destination=.loopwarden/out/junit.xml",
        "    tests: { junit: .loopwarden/out/junit.xml }",
        "    timeout: 2m",
        "agent:",
        "  run: node one-fix-per-iteration.mjs",
        "",
      ].join("\n"),
    );
    // One more bug fixed per iteration: with per-test ids the ratchet sees 3 → 2 → 1 → 0 failures.
    writeFileSync(
      path.join(repo, "one-fix-per-iteration.mjs"),
      [
        "import { readFileSync, writeFileSync } from 'node:fs';",
        "const fixes = [",
        '  [\'replace(/[^a-z0-9]/g, "-")\', \'replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "")\'],',
        "  ['replace(/\\\\b\\\\w/,', 'replace(/\\\\b\\\\w/g,'],",
        "  ['split(\" \").length', 'split(/\\\\s+/).filter(Boolean).length'],",
        "];",
        "const [before, after] = fixes[Number(process.env.LOOPWARDEN_ITERATION) - 1];",
        "const file = 'src/text.js';",
        "writeFileSync(file, readFileSync(file, 'utf8').replace(before, after));",
      ].join("\n"),
    );
    writeFileSync(path.join(repo, ".gitignore"), ".loopwarden/\n");
    gitIn(repo, "add", "-A");
    gitIn(repo, "commit", "-qm", "contract");

    // --skip-doctor: this test is about per-test progress; oracle.test.ts covers the precondition.
    const result = await cli(repo, "run", "--skip-doctor");
    expect(result.code, result.stderr).toBe(10);
    expect(one(result.stdout)).toMatchObject({ status: "halted", halt_reason: "success_condition_met", iteration: 3 });

    const status = await cli(repo, "status");
    expect(status.code).toBe(0);
    expect(one(status.stdout)).toMatchObject({ status: "halted", loop: { t0: { failing: 4 }, best: { candidate_id: "c3", failing: 0 } } });

    const watch = await cli(repo, "watch");
    expect(watch.code).toBe(0);
    expect(one(watch.stdout)).toMatchObject({ status: "halted", halt_reason: "success_condition_met" });
    const human = await runCli(["--server", coordinator.url, "watch"], { cwd: repo });
    expect(human.stdout).toMatch(/c1 promoted \(fewer_failures\): failing tests 3 → 2, gates 1 → 1/);
    expect(human.stdout).toMatch(/c3 promoted \(fewer_failures\): failing tests 1 → 0, gates 1 → 0/);

    // Each candidate commit names its loop and proposal in trailers.
    const trailers = gitIn(repo, "log", "-1", "--format=%(trailers:only)");
    expect(trailers).toMatch(/^Loopwarden-Loop: lp_[0-9a-f]{24}$/m);
    expect(trailers).toMatch(/^Loopwarden-Proposal: cand-[0-9a-f]{24}$/m);
  });

  it("step evaluates the working tree as one candidate and exits 0 while the loop runs, 10 when it converges", async () => {
    const repo = demoRepo();
    writeFileSync(
      path.join(repo, "loop.yaml"),
      ["name: stepper", "mode: check_fixpoint", "gates:", "  - name: unit", "    run: node --test", "agent:", "  run: echo driven by step", ""].join("\n"),
    );
    gitIn(repo, "add", "-A");
    gitIn(repo, "commit", "-qm", "contract");

    // --skip-doctor (on each step; only the one that creates the loop runs it): this test is about step; oracle.test.ts covers the precondition.
    const nothing = await cli(repo, "step", "--skip-doctor");
    expect(nothing.code).toBe(2);

    const source = path.join(repo, "src", "text.js");
    writeFileSync(source, readFileSync(source, "utf8").replace('return text.split(" ").length;', "return 0;"));
    const partial = await cli(repo, "step", "--skip-doctor");
    expect(partial.code, partial.stderr).toBe(0);
    expect(one(partial.stdout)).toMatchObject({ status: "running", iteration: 1 });
    // Rejected (the check still fails): the tree is back at the baseline.
    expect(readFileSync(source, "utf8")).toContain('return text.split(" ").length;');

    const fixed = readFileSync(source, "utf8")
      .replace('replace(/[^a-z0-9]/g, "-")', 'replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "")')
      .replace("replace(/\\b\\w/,", "replace(/\\b\\w/g,")
      .replace('split(" ").length', "split(/\\s+/).filter(Boolean).length");
    writeFileSync(source, fixed);
    const done = await cli(repo, "step", "--skip-doctor");
    expect(done.code, done.stderr).toBe(10);
    expect(one(done.stdout)).toMatchObject({ status: "halted", halt_reason: "success_condition_met", iteration: 2 });
  });
});
