import { createHash } from "node:crypto";
import { readFile, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Client } from "../../runner/src/coordinator/client.js";
import { startLocalCoordinator, type LocalCoordinator } from "../../runner/src/coordinator/local-coordinator.js";
import { isProcessAlive } from "../../runner/src/process/processes.js";
import { Contract } from "#shared/wire/contract.js";
import { TEST_OWNER_TOKEN, tempDir } from "../support/cli.js";

// The local coordinator's fast start (runner/src/coordinator/runtime-snapshot.ts): a start through
// Miniflare keeps what it gave workerd in the state directory, and a later start with the same inputs
// spawns workerd from it directly. What a user must not notice, but for the time: the same state served,
// the same token accepted, a changed setting in effect, workerd stopped with the coordinator, and a
// damaged snapshot costing a slower start, never a failed one.

const tmp = tempDir("runtime-snapshot");
afterAll(() => tmp.cleanup());

const started: LocalCoordinator[] = [];
afterEach(async () => {
  for (const coordinator of started.splice(0)) await coordinator.stop().catch(() => undefined);
  delete process.env.LOOPWARDEN_LEASE_TTL;
});

process.env.LOOPWARDEN_OWNER_TOKEN = TEST_OWNER_TOKEN;

const files = (stateDir: string) => ({
  record: path.join(stateDir, "runtime", "workerd.json"),
  config: path.join(stateDir, "runtime", "workerd.capnp"),
  log: path.join(stateDir, "logs", "coordinator.log"),
});

/** Starts the coordinator on `stateDir`; answers it and how its workerd was started, from its log line. */
async function start(stateDir: string): Promise<{ coordinator: LocalCoordinator; how: "snapshot" | "miniflare" }> {
  const coordinator = await startLocalCoordinator({ stateDir });
  started.push(coordinator);
  const lines = (await readFile(files(stateDir).log, "utf8")).split("\n").filter((line) => line.includes(`coordinator listening on ${coordinator.url}`));
  const line = lines.at(-1) ?? "";
  if (line.includes("workerd from the state's runtime snapshot")) return { coordinator, how: "snapshot" };
  if (line.includes("workerd through Miniflare")) return { coordinator, how: "miniflare" };
  throw new Error(`the coordinator's log does not say how its workerd started: ${line}`);
}

async function stop(coordinator: LocalCoordinator): Promise<void> {
  started.splice(started.indexOf(coordinator), 1);
  await coordinator.stop();
}

const createLoop = (url: string, name: string) =>
  new Client(url, { token: TEST_OWNER_TOKEN }).createLoop({
    idempotency_key: `snapshot-${name}`,
    contract: Contract.parse({ name, mode: "check_fixpoint", gates: [{ name: "check", run: "true" }], agent: { run: "true" } }),
    t0: {
      commit: "0".repeat(40),
      observation: {
        gates: [{ name: "check", exit_code: 1, signal: null, timed_out: false, duration_ms: 1, log: null }],
        tests: { passing: [], failing: [] },
      },
    },
  });

const workerdCommand = async (pid: number | null) => (pid === null ? "" : await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => ""));

/** The lease lifetime the coordinator grants: a new loop's baseline, leased (LEASE_TTL's effect). */
async function leaseTtl(url: string, name: string): Promise<number | undefined> {
  const client = new Client(url, { token: TEST_OWNER_TOKEN });
  const created = await client.createLoop({
    idempotency_key: `snapshot-ttl-${name}`,
    contract: Contract.parse({ name, mode: "check_fixpoint", gates: [{ name: "check", run: "true" }], agent: { run: "true" } }),
    t0_commit: "0".repeat(40),
  });
  if (!("awaiting_baseline" in created)) throw new Error("a creation with t0_commit should await its baseline");
  return (await client.leaseJob(created.awaiting_baseline.loop_id, { runner_id: `runner-${name}` }))?.ttl_ms;
}

describe("a restart of the local coordinator on the same state directory", () => {
  it("spawns workerd from the snapshot the first start kept: the same loops served, the same owner token accepted, workerd stopped with it", async () => {
    const stateDir = path.join(tmp.dir, "restart");
    const first = await start(stateDir);
    expect(first.how).toBe("miniflare");
    const created = await createLoop(first.coordinator.url, "kept");
    await stop(first.coordinator);
    // The snapshot holds the worker's secrets: readable by their owner only, in a directory of theirs.
    expect((await stat(path.dirname(files(stateDir).record))).mode & 0o777).toBe(0o700);
    expect((await stat(files(stateDir).config)).mode & 0o777).toBe(0o600);
    expect((await stat(files(stateDir).record)).mode & 0o777).toBe(0o600);

    const second = await start(stateDir);
    expect(second.how).toBe("snapshot");
    expect(await workerdCommand(second.coordinator.runtimePid)).toContain("workerd");
    const again = await createLoop(second.coordinator.url, "kept");
    expect(again.loop.loop_id).toBe(created.loop.loop_id);
    const other = await createLoop(second.coordinator.url, "another");
    expect(other.loop.loop_id).not.toBe(created.loop.loop_id);
    const refused = await fetch(`${second.coordinator.url}/v1/loops`, { headers: { authorization: "Bearer lwo_not-the-owner-token-0123456789abcdef" } });
    expect(refused.status).toBe(401);
    const runtimePid = second.coordinator.runtimePid;
    await stop(second.coordinator);
    expect(runtimePid !== null && isProcessAlive(runtimePid)).toBe(false);
    expect(await new Client(second.coordinator.url).isHealthy()).toBe(false);
  });

  it("goes through Miniflare again when a setting changed, and the new setting is in effect", async () => {
    const stateDir = path.join(tmp.dir, "setting");
    const first = await start(stateDir);
    expect(await leaseTtl(first.coordinator.url, "default")).toBe(120_000);
    await stop(first.coordinator);

    process.env.LOOPWARDEN_LEASE_TTL = "7s";
    const changed = await start(stateDir);
    expect(changed.how).toBe("miniflare");
    expect(await leaseTtl(changed.coordinator.url, "changed")).toBe(7_000);
    await stop(changed.coordinator);

    // Its own snapshot serves the same setting again.
    const again = await start(stateDir);
    expect(again.how).toBe("snapshot");
    expect(await leaseTtl(again.coordinator.url, "again")).toBe(7_000);
  });

  it("starts through Miniflare, and keeps a new snapshot, when the snapshot is damaged or its workerd does not start", async () => {
    const stateDir = path.join(tmp.dir, "damaged");
    await stop((await start(stateDir)).coordinator);

    // One byte changed: the record's digest no longer matches, so the snapshot is not used.
    const config = await readFile(files(stateDir).config);
    const middle = config.length >> 1;
    config.writeUInt8((config.readUInt8(middle) ^ 0xff) & 0xff, middle);
    await writeFile(files(stateDir).config, config);
    const afterDamage = await start(stateDir);
    expect(afterDamage.how).toBe("miniflare");
    await stop(afterDamage.coordinator);

    // A configuration workerd cannot read, its digest recorded: workerd exits before it listens.
    const record = JSON.parse(await readFile(files(stateDir).record, "utf8")) as { config_sha256: string };
    const garbage = Buffer.from("not a Cap'n Proto message");
    await writeFile(files(stateDir).config, garbage);
    await writeFile(files(stateDir).record, JSON.stringify({ ...record, config_sha256: createHash("sha256").update(garbage).digest("hex") }));
    const afterFailure = await start(stateDir);
    expect(afterFailure.how).toBe("miniflare");
    expect(await readFile(files(stateDir).log, "utf8")).toContain("the start from the runtime snapshot failed, starting through Miniflare");
    expect(await new Client(afterFailure.coordinator.url).isHealthy()).toBe(true);
    await stop(afterFailure.coordinator);

    expect((await start(stateDir)).how).toBe("snapshot");
  });
});
