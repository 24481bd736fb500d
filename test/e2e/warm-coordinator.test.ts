import { execFileSync } from "node:child_process";
import { cpSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isProcessAlive, isSameProcess, processStartTicks } from "../../runner/src/process/processes.js";
import { ROOT, makeRepo, runCli, tempDir, waitFor, type CliResult } from "../support/cli.js";

// The warm local coordinator (DESIGN §12): a command that needs the local coordinator starts one in a
// process of its own, which later commands reuse and which stops itself after an idle period, or with
// `serve --stop`; one of another version is replaced, and two commands at once start one. Every test
// here stops what it started, by pid.

interface Record {
  pid: number;
  url: string;
  daemon?: boolean;
  version?: string;
  idle_ms?: number;
}

describe("the warm local coordinator", () => {
  const tmp = tempDir("warm");
  const repo = path.join(tmp.dir, "repo");
  const state = path.join(tmp.dir, "state");
  // A first-time user: no token anywhere and no state directory yet; the local owner token is made for them.
  const warm = { LOOPWARDEN_IDLE: "60s", LOOPWARDEN_OWNER_TOKEN: "", LOOPWARDEN_TOKEN: "" };
  const recordOf = (dir = state): Record | null => {
    const file = path.join(dir, "coordinator.json");
    return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as Record) : null;
  };
  // Each warm coordinator a test started, by pid, with its start time: the last hook stops those still
  // running, and never a process given one of their pids since (another file's coordinator, on a busy machine).
  const started = new Map<number, number | null>();
  const noteStarted = (pid: number) => started.set(pid, processStartTicks(pid));
  let run: CliResult;

  beforeAll(async () => {
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    makeRepo(repo, {});
    // --skip-doctor: this file tests the warm coordinator; oracle.test.ts covers the precondition.
    run = await runCli(["--json", "--state", state, "run", "--skip-doctor", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"], {
      cwd: repo,
      env: warm,
    });
    const pid = recordOf()?.pid;
    if (pid) noteStarted(pid);
  }, 120_000);
  afterAll(async () => {
    for (const [pid, ticks] of started) if (isSameProcess(pid, ticks)) process.kill(pid, "SIGTERM");
    await waitFor(() => [...started].every(([pid, ticks]) => !isSameProcess(pid, ticks)), "the warm coordinators to stop", 20_000);
    tmp.cleanup();
  });

  it("a command starts one that outlives it: the run's receipt URL still answers, and the next command reuses it", async () => {
    expect(run.code, run.stderr).toBe(10);
    const record = recordOf();
    expect(record).toMatchObject({ daemon: true, idle_ms: 60_000, version: expect.any(String) });
    expect(isProcessAlive(record?.pid ?? 0)).toBe(true);
    const receiptUrl = (JSON.parse(run.stdout) as { receipt_url: string }).receipt_url;
    expect(receiptUrl.startsWith(record?.url ?? "?")).toBe(true);
    expect((await fetch(receiptUrl)).status).toBe(200);
    // Zero setup: the state directory's owner token (0600) was made and used; the API still needs it.
    const ownerToken = path.join(state, "owner-token");
    expect(statSync(ownerToken).mode & 0o777).toBe(0o600);
    expect((await fetch(`${record?.url}/v1/loops`)).status).toBe(401);
    const authorised = await fetch(`${record?.url}/v1/loops`, { headers: { Authorization: `Bearer ${readFileSync(ownerToken, "utf8").trim()}` } });
    expect(authorised.status).toBe(200);

    const status = await runCli(["--json", "--state", state, "status"], { cwd: repo, env: warm });
    expect(status.code, status.stderr).toBe(0);
    expect(status.stderr).not.toContain("starting the local coordinator");
    expect(recordOf()?.pid).toBe(record?.pid);
  });

  it("serve --stop stops it by its pid", async () => {
    const pid = recordOf()?.pid ?? 0;
    const stop = await runCli(["--json", "--state", state, "serve", "--stop"], { cwd: repo });
    expect(stop.code, stop.stderr).toBe(0);
    expect(JSON.parse(stop.stdout)).toMatchObject({ stopped: pid });
    expect(isProcessAlive(pid)).toBe(false);
    expect(recordOf()).toBeNull();
    expect(JSON.parse((await runCli(["--json", "--state", state, "serve", "--stop"], { cwd: repo })).stdout)).toMatchObject({ stopped: null });
  });

  it("one of another version is replaced", async () => {
    await runCli(["--state", state, "status"], { cwd: repo, env: warm });
    const old = recordOf();
    if (!old) throw new Error("no warm coordinator");
    noteStarted(old.pid);
    writeFileSync(path.join(state, "coordinator.json"), JSON.stringify({ ...old, version: "0.0.0-old" }));
    const status = await runCli(["--state", state, "status"], { cwd: repo, env: warm });
    expect(status.code, status.stderr).toBe(0);
    expect(status.stderr).toContain("the warm local coordinator runs version 0.0.0-old: restarting it");
    const replaced = recordOf();
    if (replaced) noteStarted(replaced.pid);
    expect(replaced?.pid).not.toBe(old.pid);
    expect(isProcessAlive(old.pid)).toBe(false);
    await runCli(["--state", state, "serve", "--stop"], { cwd: repo });
  });

  it("two commands at once start one, and it stops itself after its idle period", async () => {
    const fresh = path.join(tmp.dir, "fresh-state");
    const brief = { LOOPWARDEN_IDLE: "3s" };
    // An unknown loop: each command connects, and is told so by the one coordinator.
    const unknown = `lp_${"0".repeat(24)}`;
    const results = await Promise.all([
      runCli(["--state", fresh, "status", unknown], { cwd: repo, env: brief }),
      runCli(["--state", fresh, "status", unknown], { cwd: repo, env: brief }),
    ]);
    for (const result of results) expect(result.stderr).toContain("no such loop");
    const record = recordOf(fresh);
    if (!record) throw new Error(`no warm coordinator: ${results.map((result) => result.stderr).join("\n")}`);
    noteStarted(record.pid);
    const daemons = execFileSync("ps", ["-eo", "args"], { encoding: "utf8" })
      .split("\n")
      .filter((line) => line.includes("serve --daemon") && line.includes(fresh));
    expect(daemons, daemons.join("\n")).toHaveLength(1);
    await waitFor(() => !isProcessAlive(record.pid), "the warm coordinator to stop after 3 s without use", 30_000);
    expect(recordOf(fresh)).toBeNull();
  });
});
