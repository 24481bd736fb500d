import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ExecFailure, execCommand, helperPid, stopHelper, useCommandHelper } from "../../../runner/src/process/spawner.js";
import { tempDir } from "../../support/cli.js";

// git commands run from a small helper process, so the runner's own (large) process does not fork for
// each: what a caller sees must be what execFile gives — stdout, bytes intact, failures with stderr —
// and a helper that dies never makes a command run twice.

const tmp = tempDir("spawner");
afterAll(() => {
  stopHelper();
  tmp.cleanup();
});

const options = { cwd: process.cwd(), env: process.env, encoding: "utf8" as const, maxBuffer: 1024 * 1024 };

describe("execCommand", () => {
  it("runs commands directly until the helper is ready, then from the helper process", async () => {
    // Before the helper is asked for, and while it starts: run here.
    expect(helperPid()).toBeNull();
    expect(await execCommand("/bin/sh", ["-c", "echo $PPID"], options)).toBe(`${process.pid}\n`);
    useCommandHelper();
    while (helperPid() === null) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await execCommand("/bin/sh", ["-c", "printf 'one\\ntwo'"], options)).toBe("one\ntwo");
    const pid = helperPid();
    expect(pid).not.toBeNull();
    // Started by the helper, not by this process.
    expect(await execCommand("/bin/sh", ["-c", "echo $PPID"], options)).toBe(`${pid}\n`);
    // The same helper serves the next command, and several at once.
    const answers = await Promise.all([1, 2, 3].map((n) => execCommand("/bin/sh", ["-c", `echo ${n}`], options)));
    expect(answers).toEqual(["1\n", "2\n", "3\n"]);
    expect(helperPid()).toBe(pid);
  });

  it("keeps bytes as latin1 characters, one per byte", async () => {
    const out = await execCommand("/bin/sh", ["-c", "printf '\\000\\377\\200A'"], { ...options, encoding: "latin1" });
    expect(Buffer.from(out, "latin1")).toEqual(Buffer.from([0, 255, 128, 65]));
  });

  it("runs in the given directory with the given environment", async () => {
    const out = await execCommand("/bin/sh", ["-c", 'printf "%s %s" "$PWD" "$ONLY_HERE"'], {
      ...options,
      cwd: "/tmp",
      env: { PATH: process.env.PATH, ONLY_HERE: "yes" },
    });
    expect(out).toBe("/tmp yes");
  });

  it("rejects a failing command with what it printed on stderr", async () => {
    const failed = await execCommand("/bin/sh", ["-c", "echo partial; echo 'it broke' >&2; exit 3"], options).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(ExecFailure);
    expect(failed).toMatchObject({ stdout: "partial\n", stderr: "it broke\n" });
  });

  it("does not run again a command whose helper died while it ran, and runs later ones itself", async () => {
    await execCommand("/bin/true", [], options);
    const pid = helperPid();
    if (pid === null) throw new Error("no helper");
    const pidFile = path.join(tmp.dir, "in-flight.pid");
    const inFlight = execCommand("/bin/sh", ["-c", `echo $$ > ${pidFile}; exec sleep 30`], options).catch((error: unknown) => error);
    const started = async (): Promise<number> => {
      for (;;) {
        const text = (() => {
          try {
            return readFileSync(pidFile, "utf8").trim();
          } catch {
            return "";
          }
        })();
        if (text) return Number(text);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const command = await started();
    process.kill(pid, "SIGKILL");
    const failed = await inFlight;
    expect(failed).toBeInstanceOf(ExecFailure);
    expect((failed as ExecFailure).stderr).toMatch(/outcome is unknown/);
    // The command outlived its helper: stopped here, by its pid.
    process.kill(command, "SIGKILL");
    // Later commands run without it.
    expect(await execCommand("/bin/sh", ["-c", "echo direct"], options)).toBe("direct\n");
    expect(helperPid()).toBeNull();
  });
});
