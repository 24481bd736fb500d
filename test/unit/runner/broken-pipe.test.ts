import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

// `loopwarden status | head -1`: the reader closes the pipe after one line, and the command's next write
// fails with EPIPE. Unhandled, that crashed the runner with "Unhandled 'error' event" and a stack trace;
// handled (`exitOnBrokenPipe`), the command stops as a Unix tool does on SIGPIPE: what it started is
// stopped, and it exits 141, without a word.

const SHUTDOWN = pathToFileURL(path.resolve("runner/src/shutdown.ts")).href;
const dir = mkdtempSync(path.join(tmpdir(), "lw-broken-pipe-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs a script that writes a line every few ms, closes its stdout after the first data, and answers how it ended. */
function closeAfterFirstLine(script: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.once("data", () => child.stdout.destroy());
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the script did not end once its reader went away; stderr: ${stderr}`));
    }, 20_000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe("a reader that stops early", () => {
  it("ends the command quietly with 141, after stopping what it started", async () => {
    const marker = path.join(dir, "cleaned-up");
    const { code, stderr } = await closeAfterFirstLine(`
      import { writeFileSync } from "node:fs";
      import { exitOnBrokenPipe, onShutdown } from ${JSON.stringify(SHUTDOWN)};
      exitOnBrokenPipe();
      onShutdown(() => writeFileSync(${JSON.stringify(marker)}, "stopped"));
      setInterval(() => process.stdout.write("a line of status\\n"), 5);
    `);
    expect(stderr).not.toMatch(/Unhandled|EPIPE|at /);
    expect(code).toBe(141);
    expect(existsSync(marker)).toBe(true);
  });

  it("without the handler, the same write crashes with a stack trace (what users saw)", async () => {
    const { code, stderr } = await closeAfterFirstLine(`setInterval(() => process.stdout.write("a line of status\\n"), 5);`);
    expect(code).not.toBe(0);
    expect(stderr).toMatch(/EPIPE/);
  });
});
