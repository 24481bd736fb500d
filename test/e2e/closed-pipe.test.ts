import { spawn } from "node:child_process";
import { cpSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, TEST_OWNER_TOKEN, makeRepo, runCli, startCoordinator, tempDir, type TestCoordinator } from "../support/cli.js";

// `loopwarden status | head -1`, `explain | head -1`, `watch | head -1` died with `write EPIPE …
// Unhandled 'error' event` and a stack trace (issue 26). Here every command that prints runs with a
// reader that has already gone: its first write to stdout, and every one after, fails with EPIPE. Each
// must end quietly — no stack trace, no unhandled error — with the exit code it has when its output is
// read (the loop's halt class for `run`, 0 for the rest).

const BIN = path.join(ROOT, "dist", "cli", "main.js");

/** Runs the CLI with its stdout's reader gone before the first byte; answers its exit code and stderr. */
function withReaderGone(args: string[], cwd: string): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd,
      env: { ...process.env, NO_COLOR: "1", LOOPWARDEN_IDLE: "0", LOOPWARDEN_OWNER_TOKEN: TEST_OWNER_TOKEN, LOOPWARDEN_TOKEN: TEST_OWNER_TOKEN },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.destroy();
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`loopwarden ${args.join(" ")} did not end once its reader had gone; stderr: ${stderr}`));
    }, 60_000);
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stderr });
    });
  });
}

describe("every command that prints, into a pipe whose reader has gone", () => {
  const tmp = tempDir("closed-pipe");
  const repo = path.join(tmp.dir, "repo");
  let coordinator: TestCoordinator;
  let receiptUrl = "";

  beforeAll(async () => {
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    // A contract file for the commands that read one (the loop itself runs from flags).
    makeRepo(repo, {
      "doctor.yaml": [
        "name: closed-pipe",
        "mode: check_fixpoint",
        "gates:",
        "  - { name: check, run: node --test, timeout: 2m }",
        "agent: { run: node agent.mjs, timeout: 1m }",
        "",
      ].join("\n"),
    });
    // --skip-doctor: this file tests closed pipes; oracle.test.ts covers the precondition.
    const run = await runCli(
      ["--json", "--server", coordinator.url, "run", "--skip-doctor", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"],
      {
        cwd: repo,
      },
    );
    expect(run.code, run.stderr).toBe(10);
    receiptUrl = (JSON.parse(run.stdout) as { receipt_url?: string }).receipt_url ?? "";
  }, 120_000);
  afterAll(async () => {
    await coordinator.stop();
    tmp.cleanup();
  });

  const server = () => ["--server", coordinator.url];
  const commands: [string, () => string[]][] = [
    ["run (a halted loop: its halt)", () => [...server(), "run", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"]],
    ["status", () => [...server(), "status"]],
    ["explain", () => [...server(), "explain"]],
    ["watch", () => [...server(), "watch"]],
    ["logs", () => [...server(), "logs"]],
    ["artifacts", () => [...server(), "artifacts"]],
    ["export", () => [...server(), "export", "--format", "results.tsv"]],
    ["receipt", () => [...server(), "receipt"]],
    ["verify", () => ["verify", receiptUrl]],
    ["team list", () => [...server(), "team", "list"]],
    ["whoami", () => [...server(), "whoami"]],
    ["doctor", () => [...server(), "--contract", "doctor.yaml", "doctor", "--runs", "2"]],
    ["probe", () => ["--contract", "doctor.yaml", "probe", "--runs", "2"]],
    ["--help", () => ["--help"]],
    ["run --help", () => ["run", "--help"]],
    ["--version", () => ["--version"]],
  ];

  it.each(commands)("%s ends quietly, with the exit code it has when read", async (_name, args) => {
    const read = await runCli(args(), { cwd: repo });
    expect(read.stdout.length, read.stderr).toBeGreaterThan(0);
    const gone = await withReaderGone(args(), repo);
    expect(gone.stderr).not.toMatch(/EPIPE|Unhandled|^\s+at /m);
    expect(gone.signal).toBeNull();
    expect(gone.code).toBe(read.code);
  });
});
