import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isGoneWithin } from "../../support/process.js";
import { runCommand } from "../../../runner/src/exec.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "lw-exec-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));


describe("runCommand", () => {
  it("captures stdout and stderr once, in order, with the exit code", async () => {
    const result = await runCommand("echo one; echo two >&2; exit 3", { cwd: dir, timeoutMs: 10_000 });
    expect(result).toMatchObject({ exit_code: 3, signal: null, timed_out: false, truncated: false });
    expect(result.output.toString()).toBe("one\ntwo\n");
  });

  it("kills a hung command and its children at the timeout", async () => {
    const pidFile = path.join(dir, "child.pid");
    const started = performance.now();
    const result = await runCommand(`sleep 300 & echo $! > ${pidFile}; wait`, { cwd: dir, timeoutMs: 500 });
    expect(result.timed_out).toBe(true);
    expect(result.exit_code).toBeNull();
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(await isGoneWithin(Number(readFileSync(pidFile, "utf8")))).toBe(true);
  });

  it("does not wait for a background child that keeps the output open after the shell exits", async () => {
    const pidFile = path.join(dir, "straggler.pid");
    const result = await runCommand(`sleep 300 & echo $! > ${pidFile}; echo done`, { cwd: dir, timeoutMs: 60_000 });
    expect(result).toMatchObject({ exit_code: 0, timed_out: false });
    expect(result.output.toString()).toBe("done\n");
    expect(await isGoneWithin(Number(readFileSync(pidFile, "utf8")))).toBe(true);
  });

  it("keeps the tail of very long output and says it was truncated", async () => {
    const result = await runCommand("head -c 12000000 /dev/zero | tr '\\0' 'x'; echo END", { cwd: dir, timeoutMs: 60_000 });
    expect(result.truncated).toBe(true);
    expect(result.output.length).toBeLessThanOrEqual(8 * 1024 * 1024 + 65_536);
    expect(result.output.toString().endsWith("END\n")).toBe(true);
  });
});
