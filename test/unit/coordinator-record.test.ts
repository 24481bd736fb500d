import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { findRunningCoordinator, type CoordinatorRecord } from "../../runner/src/coordinator/local-coordinator.js";
import { isProcessAlive, isSameProcess, processStartTicks } from "../../runner/src/process/processes.js";

// coordinator.json names the processes of a coordinator by pid, and a later command stops a workerd its
// host left behind by that pid. Pids come round again: on a machine that starts many processes and
// threads, within minutes. A pid recorded earlier is taken for the recorded process only while that
// process's start time still matches, so another program given the pid since is never signalled.

let dir: string;
const children: ChildProcess[] = [];
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), "lw-coordinator-record-"));
});
afterEach(() => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

/** A long-lived process whose command line says `workerd`, as a coordinator's runtime's does. */
function fakeWorkerd(): ChildProcess {
  const child = spawn("/bin/bash", ["-c", "exec -a workerd sleep 60"], { stdio: "ignore" });
  children.push(child);
  return child;
}

/** A pid no process has: one that ran and was reaped. */
async function deadPid(): Promise<number> {
  const child = spawn("/bin/true", { stdio: "ignore" });
  await new Promise((resolve) => child.once("exit", resolve));
  return child.pid ?? 0;
}

async function writeRecord(record: CoordinatorRecord): Promise<void> {
  await writeFile(path.join(dir, "coordinator.json"), JSON.stringify(record));
}

const waitFor = async (condition: () => boolean) => {
  for (let i = 0; i < 100 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
};

describe.runIf(process.platform === "linux")("a coordinator's recorded pids", () => {
  it("name a process only while its start time matches the one recorded", async () => {
    const started = processStartTicks(process.pid);
    expect(started).not.toBeNull();
    expect(isSameProcess(process.pid, started)).toBe(true);
    expect(isSameProcess(process.pid, (started ?? 0) + 1)).toBe(false);
    // A record without a start time (written by an older version) is taken as it was.
    expect(isSameProcess(process.pid, undefined)).toBe(true);
    expect(isSameProcess(await deadPid(), started)).toBe(false);
  });

  it("stop the workerd a dead host left behind, and only that one: its pid given to another workerd since is left alone", async () => {
    const other = fakeWorkerd();
    const pid = other.pid ?? 0;
    await waitFor(() => (processStartTicks(pid) ?? 0) > 0);
    const ticks = processStartTicks(pid);
    // The record's workerd started at another time: the pid is another process's now.
    await writeRecord({ url: "http://127.0.0.1:1", pid: await deadPid(), runtime_pid: pid, runtime_started: (ticks ?? 0) - 1 });
    expect(await findRunningCoordinator(dir)).toBeNull();
    expect(isProcessAlive(pid)).toBe(true);

    // The very process recorded: stopped, as a workerd whose host died is.
    const exited = new Promise((resolve) => other.once("exit", resolve));
    await writeRecord({ url: "http://127.0.0.1:1", pid: await deadPid(), runtime_pid: pid, runtime_started: ticks });
    expect(await findRunningCoordinator(dir)).toBeNull();
    await exited;
    expect(isProcessAlive(pid)).toBe(false);
  });

  it("whose host's pid was given to another process since are not taken for a running coordinator", async () => {
    const started = processStartTicks(process.pid);
    // This process is alive and answers nothing at this URL either way; with another start time it is
    // not the recorded host at all, and the record goes.
    await writeRecord({ url: "http://127.0.0.1:1", pid: process.pid, started: (started ?? 0) + 1 });
    expect(await findRunningCoordinator(dir)).toBeNull();
    expect(existsSync(path.join(dir, "coordinator.json"))).toBe(false);
  });
});
