import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { readFile, utimes, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { loadRuntimeSnapshot, removeRuntimeSnapshot, saveRuntimeSnapshot, type RuntimeLaunch } from "../../runner/src/coordinator/runtime-snapshot.js";

// What a start may spawn workerd from (runner/src/coordinator/runtime-snapshot.ts): only a snapshot kept
// under the same key, with the workerd binary it was made with and its configuration whole; and only a
// launch whose arguments it knows how to reproduce is kept at all. The end-to-end side (a real workerd,
// a damaged file, a changed setting) is test/e2e/runtime-snapshot.test.ts.

const KEY = "a".repeat(64);
const OTHER_KEY = "b".repeat(64);
const ARGS = ["serve", "--binary", "--experimental", "--socket-addr=entry=127.0.0.1:0", "--external-addr=loopback=127.0.0.1:41234", "--control-fd=3", "-"];

let dir: string;
let workerd: string;
beforeEach(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), "lw-runtime-snapshot-"));
  workerd = path.join(dir, "workerd");
  await writeFile(workerd, "a stand-in for the workerd binary");
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const launch = (args = ARGS): RuntimeLaunch => ({ command: workerd, args, config: Buffer.from("an encoded configuration"), child: {} as ChildProcess });
const state = () => path.join(dir, "state");

describe("the runtime snapshot", () => {
  it("is loaded under the key it was kept with, with its command, arguments and configuration", async () => {
    expect(await saveRuntimeSnapshot(state(), KEY, launch())).toBe(true);
    const snapshot = await loadRuntimeSnapshot(state(), KEY);
    expect(snapshot).toEqual({ command: workerd, args: ARGS, config: Buffer.from("an encoded configuration") });
    expect(await loadRuntimeSnapshot(state(), OTHER_KEY)).toBeNull();
  });

  it("is not used once the workerd binary it was made with changed, or its record is unreadable", async () => {
    await saveRuntimeSnapshot(state(), KEY, launch());
    const later = new Date(Date.now() + 60_000);
    await utimes(workerd, later, later);
    expect(await loadRuntimeSnapshot(state(), KEY)).toBeNull();

    await saveRuntimeSnapshot(state(), KEY, launch());
    const record = path.join(state(), "runtime", "workerd.json");
    await writeFile(record, (await readFile(record, "utf8")).slice(0, 20));
    expect(await loadRuntimeSnapshot(state(), KEY)).toBeNull();
  });

  it("is not kept for a launch with arguments it does not know (another Miniflare's, an inspector's)", async () => {
    expect(await saveRuntimeSnapshot(state(), KEY, launch([...ARGS.slice(0, -1), "--inspector-addr=localhost:9229", "-"]))).toBe(false);
    expect(await saveRuntimeSnapshot(state(), KEY, launch(ARGS.filter((arg) => !arg.startsWith("--external-addr"))))).toBe(false);
    expect(await loadRuntimeSnapshot(state(), KEY)).toBeNull();
  });

  it("is gone once removed", async () => {
    await saveRuntimeSnapshot(state(), KEY, launch());
    await removeRuntimeSnapshot(state());
    expect(await loadRuntimeSnapshot(state(), KEY)).toBeNull();
  });
});
