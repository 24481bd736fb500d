import { spawn } from "node:child_process";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

// `loopwarden status | head -1`: the reader closes the pipe after one line, and the command's next write
// fails with EPIPE. Unhandled, that crashed the runner with "Unhandled 'error' event" and a stack trace;
// handled (`surviveClosedPipes`), the output goes nowhere and the command ends as it would have, with its
// usual exit code; one that would only go on printing asks `stdoutClosed()` and ends.

const SHUTDOWN = pathToFileURL(path.resolve("runner/src/process/shutdown.ts")).href;

/** Runs a script, closes its stdout after the first data, and answers how it ended. */
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
  it("costs the command its output, not its work: it ends quietly with its usual exit code", async () => {
    const { code, stderr } = await closeAfterFirstLine(`
      import { surviveClosedPipes } from ${JSON.stringify(SHUTDOWN)};
      surviveClosedPipes();
      // Lines written long after the reader left, then the command's own exit code (a halt class, say).
      for (let line = 0; line < 40; line++) {
        process.stdout.write("a line of status\\n");
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      process.exitCode = 12;
    `);
    expect(stderr).toBe("");
    expect(code).toBe(12);
  });

  it("a command that only prints (watch) learns its reader left, and ends", async () => {
    const { code, stderr } = await closeAfterFirstLine(`
      import { stdoutClosed, surviveClosedPipes } from ${JSON.stringify(SHUTDOWN)};
      surviveClosedPipes();
      while (!stdoutClosed()) {
        process.stdout.write("an event\\n");
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    `);
    expect(stderr).toBe("");
    expect(code).toBe(0);
  });

  it("without the handler, the same write crashes with a stack trace (what users saw)", async () => {
    const { code, stderr } = await closeAfterFirstLine(`setInterval(() => process.stdout.write("a line of status\\n"), 5);`);
    expect(code).not.toBe(0);
    expect(stderr).toMatch(/EPIPE/);
  });
});
