import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeRepo, runCli, startCoordinator, tempDir, type TestCoordinator } from "../support/cli.js";

// A real loop through the CLI, then `loopwarden export` of all three formats, to files and to stdout.
describe("loopwarden export", () => {
  const tmp = tempDir("export");
  let coordinator: TestCoordinator;
  let repo: string;
  const cli = (...args: string[]) => runCli(["--server", coordinator.url, ...args], { cwd: repo });
  const one = (stdout: string) => {
    const lines = stdout.trim().split("\n");
    expect(lines, stdout).toHaveLength(1);
    return JSON.parse(lines[0] ?? "") as Record<string, unknown>;
  };

  beforeAll(async () => {
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
    // A benchmark gate that always passes and prints its metrics, then the check. The agent writes the
    // iteration number to level.txt: iteration 1 is rejected, iteration 2 passes the check.
    repo = makeRepo(path.join(tmp.dir, "repo"), {
      "loop.yaml": [
        "name: exported",
        "mode: check_fixpoint",
        "gates:",
        "  - name: bench",
        "    run: node bench.mjs",
        "  - name: check",
        "    run: node check.mjs",
        "stop:",
        "  max_iterations: 5",
        "agent:",
        "  run: node agent.mjs",
        "",
      ].join("\n"),
      "bench.mjs": "console.log(`METRIC work_ms=12.5 peak_rss_mb=${(process.memoryUsage().rss / 1048576).toFixed(1)}`);\n",
      "check.mjs": "import { readFileSync } from 'node:fs';\nprocess.exit(Number(readFileSync('level.txt', 'utf8')) >= 2 ? 0 : 1);\n",
      "level.txt": "0\n",
      "agent.mjs": [
        "import { writeFileSync } from 'node:fs';",
        "const level = process.env.LOOPWARDEN_ITERATION;",
        "writeFileSync('level.txt', `${level}\\n`);",
        'writeFileSync(process.env.LOOPWARDEN_AGENT_REPORT, JSON.stringify({ description: `raise the level to ${level}, "carefully" — ✓` }));',
      ].join("\n"),
      ".gitignore": ".loopwarden/\n",
    });
    const run = await cli("--json", "run");
    expect(run.code, run.stderr).toBe(10);
  }, 120_000);
  afterAll(async () => {
    await coordinator.stop();
    tmp.cleanup();
  });

  it("writes each format to a file and answers one JSON object saying what it wrote", async () => {
    const expected = {
      "candidates.jsonl": { rows: 2, header: null },
      "benchmark.csv": {
        rows: 3,
        header: "candidate_id,commit,status,bench.peak_rss_mb,bench.work_ms,bench.duration_ms,check.duration_ms,failing,passing",
      },
      "results.tsv": { rows: 3, header: "commit\tfailing_tests\tmemory_gb\tstatus\tdescription" },
    } as const;
    for (const [format, { rows, header }] of Object.entries(expected)) {
      const output = path.join(tmp.dir, `out-${format}`);
      const result = await cli("--json", "export", "--format", format, "--output", output);
      expect(result.code, result.stderr).toBe(0);
      expect(one(result.stdout)).toMatchObject({ tool: "loopwarden", status: "ok", format, rows, output, errors: [] });
      const text = readFileSync(output, "utf8");
      const lines = text.split(format === "benchmark.csv" ? "\r\n" : "\n").slice(0, -1);
      if (header) expect(lines[0]).toBe(header);
      expect(lines).toHaveLength(header ? rows + 1 : rows);
    }

    const candidates = readFileSync(path.join(tmp.dir, "out-candidates.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(candidates).toMatchObject([
      { candidate_id: "c1", parent: "t0", status: "rejected", reason: "no_improvement", tests: { failing: 1 } },
      { candidate_id: "c2", parent: "t0", status: "promoted", reason: "fewer_failures", tests: { failing: 0 } },
    ]);
    expect(candidates[1]).toMatchObject({
      agent: { exit_code: 0, timed_out: false },
      agent_report: { description: 'raise the level to 2, "carefully" — ✓' },
      gates: [
        { name: "bench", exit_code: 0, metrics: { work_ms: 12.5, peak_rss_mb: expect.any(Number) }, log_sha256: expect.stringMatching(/^[0-9a-f]{64}$/) },
        { name: "check", exit_code: 0, metrics: {} },
      ],
    });

    const results = readFileSync(path.join(tmp.dir, "out-results.tsv"), "utf8")
      .trim()
      .split("\n")
      .map((line) => line.split("\t"));
    expect(results.map((fields) => [fields[1], fields[3], fields[4]])).toEqual([
      ["failing_tests", "status", "description"],
      ["1", "keep", "baseline"],
      ["1", "discard", 'raise the level to 1, "carefully" — ✓'],
      ["0", "keep", 'raise the level to 2, "carefully" — ✓'],
    ]);
    for (const fields of results.slice(1)) {
      expect(fields[0]).toMatch(/^[0-9a-f]{7}$/);
      expect(fields[2]).toMatch(/^\d+\.\d$/);
    }
  });

  it("writes to stdout without --output, exactly what it writes to a file", async () => {
    const output = path.join(tmp.dir, "again.csv");
    expect((await cli("--quiet", "export", "--format", "benchmark.csv", "--output", output)).code).toBe(0);
    const result = await cli("export", "--format", "benchmark.csv");
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe(readFileSync(output, "utf8"));
  });

  it("refuses --json without --output, and an unknown format, as usage errors", async () => {
    const noOutput = await cli("--json", "export", "--format", "results.tsv");
    expect(noOutput.code).toBe(2);
    expect(one(noOutput.stdout)).toMatchObject({ status: "error", errors: [expect.stringContaining("--output FILE")] });
    const unknown = await cli("--json", "export", "--format", "results.csv", "--output", path.join(tmp.dir, "x"));
    expect(unknown.code).toBe(2);
    expect(one(unknown.stdout)).toMatchObject({ status: "error" });
  });
});
