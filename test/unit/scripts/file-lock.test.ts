import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { acquireFileLock } from "../../../scripts/lib/file-lock.js";

// The one lock the runner (starting a warm coordinator) and the build (the worker bundle) share: one
// holder at a time, a dead holder's lock taken over at once, and a wait that ends when the work it
// waited for is done by the holder.

const dir = mkdtempSync(path.join(os.tmpdir(), "lw-file-lock-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A pid no process has: one that has just exited (pids are not reused that fast). */
function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" });
  return Number(child.stdout);
}

describe("acquireFileLock", () => {
  it("lets one holder at a time in, the next once the first releases, and names the holder's pid", async () => {
    const file = path.join(dir, "one.lock");
    const order: string[] = [];
    const first = await acquireFileLock(file, { timeoutMs: 10_000, pollMs: 10, what: "the first" });
    if (!("lock" in first)) throw new Error("no lock");
    expect(readFileSync(file, "utf8")).toBe(String(process.pid));
    const second = acquireFileLock(file, { timeoutMs: 10_000, pollMs: 10, what: "the first holder" }).then(async (taken) => {
      order.push("second in");
      if ("lock" in taken) await taken.lock.release();
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    order.push("first out");
    await first.lock.release();
    await second;
    expect(order).toEqual(["first out", "second in"]);
    expect(existsSync(file)).toBe(false);
  });

  it("takes over at once a lock whose holder died", async () => {
    const file = path.join(dir, "dead.lock");
    writeFileSync(file, String(deadPid()));
    const taken = await acquireFileLock(file, { timeoutMs: 1_000, pollMs: 10, what: "a dead holder" });
    expect("lock" in taken).toBe(true);
    expect(readFileSync(file, "utf8")).toBe(String(process.pid));
    if ("lock" in taken) await taken.lock.release();
  });

  it("ends the wait without the lock when what it waited for is done, and times out naming it otherwise", async () => {
    const file = path.join(dir, "busy.lock");
    const holder = await acquireFileLock(file, { timeoutMs: 1_000, pollMs: 10, what: "nothing" });
    let asked = 0;
    const done = await acquireFileLock(file, { timeoutMs: 10_000, pollMs: 10, what: "the holder", instead: async () => (++asked >= 3 ? "started" : null) });
    expect(done).toEqual({ instead: "started" });
    await expect(acquireFileLock(file, { timeoutMs: 50, pollMs: 10, what: "another process to build the worker bundle" })).rejects.toThrow(
      /waited 0s for another process to build the worker bundle/,
    );
    if ("lock" in holder) await holder.lock.release();
  });
});
