import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeRepo, runCli, tempDir, type CliResult } from "../support/cli.js";

// DESIGN §4 invariant 9, §8 through the real stack: a project whose JUnit report has 100,000 tests.
// t0's collected set crosses the wire once, gzip-encoded; every report after it is a difference from
// that set, as large as what changed. The figures are printed for the closing notes; the assertions are
// on verdicts and sizes, never on timings.

const SUITE = 100_000;
const BROKEN = [17, 42_424, 99_999];

// The check: one JUnit testcase per test, pytest-shaped ids; the tests named in src/broken.txt fail.
const CHECK = `import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
const broken = new Set(readFileSync("src/broken.txt", "utf8").split("\\n").filter(Boolean).map(Number));
const cases = [];
for (let index = 0; index < ${SUITE}; index++) {
  const name = \`classname="tests/test_module_\${index % 997}.py::TestClass\${index % 13}" name="test_case_\${index}[param\${index % 3}]"\`;
  cases.push(broken.has(index) ? \`<testcase \${name}><failure message="boom"/></testcase>\` : \`<testcase \${name}/>\`);
}
mkdirSync("out", { recursive: true });
writeFileSync("out/junit.xml", \`<?xml version="1.0"?><testsuites><testsuite name="all" tests="${SUITE}">\${cases.join("")}</testsuite></testsuites>\`);
console.log(\`\${${SUITE} - broken.size} passing / \${broken.size} failing\`);
process.exit(broken.size === 0 ? 0 : 1);
`;

// The agent: fixes the first broken test each iteration.
const AGENT = `import { readFileSync, writeFileSync } from "node:fs";
const [, ...rest] = readFileSync("src/broken.txt", "utf8").split("\\n").filter(Boolean);
writeFileSync("src/broken.txt", rest.map((line) => line + "\\n").join(""));
`;

describe("a loop on a 100,000-test suite", () => {
  const tmp = tempDir("scale");
  const repo = path.join(tmp.dir, "repo");
  let result: CliResult;

  beforeAll(async () => {
    makeRepo(repo, {
      "check.mjs": CHECK,
      "agent.mjs": AGENT,
      "src/broken.txt": BROKEN.map((index) => `${index}\n`).join(""),
      ".gitignore": "out/\n",
    });
    result = await runCli(
      [
        "--json",
        "--state",
        path.join(tmp.dir, "state"),
        "run",
        "--check",
        "node check.mjs",
        "--junit",
        "out/junit.xml",
        "--exec",
        "node agent.mjs",
        "--max-iterations",
        "10",
      ],
      { cwd: repo, env: { LOOPWARDEN_TRACE_HTTP: "1" } },
    );
  }, 600_000);
  afterAll(() => tmp.cleanup());

  /** The traced requests: method, path, bytes sent and whether gzip-encoded. */
  const requests = () =>
    [...result.stderr.matchAll(/^loopwarden http: (\S+) (\S+) (\d+) sent (\d+) B( gzip)?/gm)].map((match) => ({
      method: match[1],
      path: match[2] ?? "",
      status: Number(match[3]),
      bytes: Number(match[4]),
      gzip: match[5] !== undefined,
    }));

  it("converges, fixing one test per iteration", () => {
    expect(result.code, `${result.stdout.slice(-3_000)}\n${result.stderr.slice(-3_000)}`).toBe(10);
    expect(JSON.parse(result.stdout)).toMatchObject({ halt_reason: "success_condition_met", iteration: BROKEN.length });
  });

  it("sends t0's collected set once, gzip-encoded, and each report as a few KB of difference", () => {
    const created = requests().filter((request) => request.method === "POST" && request.path === "/v1/loops");
    // A report's path may carry `?events_after=N` (its answer then brings the log's new events).
    const reports = requests().filter((request) => request.method === "POST" && /\/report(\?|$)/.test(request.path));
    console.log(
      `100,000-test suite: creation sent ${created.map((request) => request.bytes).join(", ")} B (gzip); reports sent ${reports.map((request) => request.bytes).join(", ")} B`,
    );
    expect(created).toHaveLength(1);
    expect(created[0]).toMatchObject({ status: 201, gzip: true });
    expect(created[0]?.bytes).toBeLessThan(1024 * 1024);
    expect(reports).toHaveLength(BROKEN.length);
    for (const report of reports) {
      expect(report.status).toBe(200);
      expect(report.bytes).toBeLessThan(16 * 1024);
    }
  });
});
