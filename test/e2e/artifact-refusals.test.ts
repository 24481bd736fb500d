import path from "node:path";
import { describe, expect, it } from "vitest";
import { api, loopEvents, makeRepo, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";

// What the agent makes the `artifacts` globs match is evidence, never the end of the job (DESIGN §10): on a
// coordinator that stores artifacts of at most 32 KiB, an agent whose code writes a 48 KiB file the globs
// match, and prints 40 KB into the gate's log, still gets its verdict. The file is named in the report's
// `artifact_errors` with the coordinator's reason, the log is stored as its tail (saying so), and the
// run prints a warning line for each.

const LIMIT = 32 * 1024;

function refusalProject(): Record<string, string> {
  return {
    "src/answer.js": "export function answer() {\n  return 41;\n}\n",
    "test/answer.test.js": [
      "import assert from 'node:assert/strict';",
      "import { mkdirSync, writeFileSync } from 'node:fs';",
      "import { test } from 'node:test';",
      "import { answer } from '../src/answer.js';",
      "test('the answer is 42', () => {",
      "  mkdirSync('out', { recursive: true });",
      "  writeFileSync('out/summary.txt', `answer ${answer()}\\n`);",
      "  assert.equal(answer(), 42);",
      "});",
      "",
    ].join("\n"),
    // The agent fixes the answer, in code that floods the log and writes a file over the limit when it loads.
    "agent.mjs": [
      "import { writeFileSync } from 'node:fs';",
      "writeFileSync('src/answer.js', [",
      "  \"import { mkdirSync, writeFileSync } from 'node:fs';\",",
      "  \"for (let i = 0; i < 400; i++) console.log('noise line ' + i + ' ' + 'x'.repeat(90));\",",
      "  \"mkdirSync('out', { recursive: true });\",",
      "  \"writeFileSync('out/huge.bin', Buffer.alloc(48 * 1024, 7));\",",
      '  "export function answer() {",',
      '  "  return 42;",',
      '  "}",',
      '  "",',
      "].join('\\n'));",
      "",
    ].join("\n"),
    "loop.yaml": [
      "name: refusals",
      "mode: check_fixpoint",
      "gates:",
      "  - name: unit",
      "    run: node --test",
      "agent:",
      "  run: node agent.mjs",
      "artifacts: [out/**]",
      "stop:",
      "  max_iterations: 2",
      "",
    ].join("\n"),
    ".gitignore": ".loopwarden/\nout/\n",
  };
}

describe("artifact refusals", () => {
  const { tmp, coordinator } = sharedCoordinator("artifact-refusals", { LOOPWARDEN_ARTIFACT_MAX_BYTES: `${LIMIT}` });

  it("a file over the coordinator's limit, and a log too large to store whole, are noted and warned about; the candidate still gets its verdict", async () => {
    const repo = makeRepo(path.join(tmp.dir, "repo"), refusalProject());
    const run = await runCli(["--server", coordinator.url, "run"], { cwd: repo });
    // The loop reached its verdict and halted on success: nothing crashed.
    expect(run.code, run.stderr).toBe(10);
    expect(run.stderr).toMatch(/c1 promoted/);
    expect(run.stderr).toMatch(
      new RegExp(`warning: out/huge\\.bin \\(48\\.0 KiB\\): the coordinator refused it: artifacts are limited to ${LIMIT} bytes; this one is 49152`),
    );
    expect(run.stderr).toMatch(/warning: gate-unit\.log \(\d+\.\d KiB\): the coordinator refused it: .*; its last 4096 bytes were stored instead/);
    expect(run.stderr).not.toMatch(/unexpected error|this is a bug/);

    const loopId = recordedLoopId(repo, "loop.yaml");
    const events = await loopEvents(coordinator.url, loopId);
    const report = events.find((event) => event.type === "observation_reported" && event.data.candidate_id === "c1");
    if (report?.type !== "observation_reported") throw new Error("no report for c1");
    const { observation } = report.data;
    expect(observation.artifact_errors).toEqual([
      expect.objectContaining({ name: "gate-unit.log", code: "artifact_too_large" }),
      { name: "out/huge.bin", size: 48 * 1024, code: "artifact_too_large", detail: expect.stringMatching(/^the coordinator refused it: /) },
    ]);
    // What fit was stored; the log is cited by its stored tail.
    expect(observation.artifacts?.map((artifact) => artifact.name)).toEqual(["out/summary.txt"]);
    const log = observation.gates[0]?.log;
    expect(log?.size).toBeLessThanOrEqual(LIMIT);
    const stored = await (await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${log?.sha256}`)).text();
    expect(stored).toMatch(
      /^\[loopwarden\] this log is \d+ bytes, and the coordinator refused to store it whole \(artifact_too_large\): its last 4096 bytes follow\n/,
    );
    expect(stored).toContain("[loopwarden] exit code 0");

    // `artifacts` says what was not stored, and why.
    const listed = await runCli(["--server", coordinator.url, "artifacts", "c1"], { cwd: repo });
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(
      /not stored as they were \(2\):\n.*gate-unit\.log.*\[artifact_too_large\]\n.*out\/huge\.bin \(48\.0 KiB\).*\[artifact_too_large\]/,
    );
    // A receipt over the log still verifies: the new field is part of what it signs.
    const verified = await runCli(["--server", coordinator.url, "receipt"], { cwd: repo });
    expect(verified.code, verified.stderr).toBe(0);
    const url = /https?:\/\/\S+\/r\/\S+/.exec(verified.stdout)?.[0];
    expect(url).toBeDefined();
    const verify = await runCli(["verify", url ?? ""], { cwd: repo });
    expect(verify.code, verify.stdout + verify.stderr).toBe(0);
  });
});
