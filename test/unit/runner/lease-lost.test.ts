import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { foldEvents } from "#shared/engine/index.js";
import type { Lease } from "#shared/wire/api.js";
import { CoordinatorError, type Client } from "../../../runner/src/coordinator/client.js";
import { validateContract } from "../../../runner/src/contract/contract-file.js";
import { evaluateLease } from "../../../runner/src/loop/lease-job.js";
import { gitIn, makeRepo, tempDir } from "../../support/cli.js";
import { killListed, processesWith, survivorsAfter } from "../../support/zone-markers.js";
import { LoopHarness } from "../engine-harness.js";

// A heartbeat answered 409 means the lease is someone else's now (reclaimed, or superseded by a newer
// fencing token): the runner must stop the job's processes at once and abandon it, never report.

const tmp = tempDir("lease-lost");
afterAll(() => tmp.cleanup());

describe("a lost lease", () => {
  it("kills the running gate's process group and abandons the job without reporting", async () => {
    // The gate (its shell) starts a child, then waits far longer than the test. Both carry a marker on
    // their command lines: inside the exec zone their pids are not the host's (DESIGN §6.7).
    const marker = `lw-lease-lost-${process.pid}`;
    const repo = makeRepo(path.join(tmp.dir, "repo"), {
      [`${marker}.sh`]: `node -e 'setTimeout(() => {}, 300000)' ${marker}-child &\nwait\n`,
    });
    const commit = gitIn(repo, "rev-parse", "HEAD").trim();
    const loaded = validateContract(
      { name: "lost", mode: "check_fixpoint", gates: [{ name: "slow", run: `sh ${marker}.sh`, timeout: "10m" }], agent: { run: "true" } },
      "loop.yaml",
    );
    const harness = new LoopHarness(["suite.a"]);
    let reports = 0;
    let heartbeats = 0;
    // Seen running while the job is in hand: the shell and its child.
    let seen = 0;
    const client = {
      heartbeat: async () => {
        heartbeats++;
        // The lease is lost once the gate and its child run: on a loaded machine the clone and the zone
        // can take longer than the first heartbeat's second, and a lease lost before the gate started
        // would test nothing of how it is stopped.
        for (const started = Date.now(); seen < 2 && Date.now() - started < 60_000;) await new Promise((resolve) => setTimeout(resolve, 20));
        throw new CoordinatorError(409, "stale_lease", "the lease was reclaimed or superseded; stop this job");
      },
      report: async () => {
        reports++;
        throw new Error("a lost lease must never report");
      },
      uploadArtifact: async () => {
        throw new Error("a lost lease uploads nothing");
      },
    } as unknown as Client;
    const lease: Lease = {
      lease_id: "lp_0123456789abcdef01234567-L1",
      loop_id: "lp_0123456789abcdef01234567",
      fencing_token: 1,
      expires_at: new Date(Date.now() + 4_000).toISOString(),
      ttl_ms: 4_000,
      job: { kind: "evaluate", candidate_id: "c1", commit, contract_hash: loaded.hash, compare_to: { candidate_id: "t0", commit }, bundles: [] },
    };
    const folded = foldEvents(harness.events);
    if (!folded) throw new Error("no state");
    const watching = setInterval(() => (seen = Math.max(seen, processesWith(marker).filter((line) => !line.includes("pgrep")).length)), 20);
    const result = await evaluateLease(
      { client, loop: { loop_id: lease.loop_id }, folded: { seq: harness.events.length, state: folded }, repo, loaded, mode: { json: false, quiet: true } },
      lease,
      "[test] c1",
    );
    clearInterval(watching);
    expect(result).toBeNull();
    expect(heartbeats).toBeGreaterThanOrEqual(1);
    expect(reports).toBe(0);
    // The gate and the child it started were both stopped: the whole process group, not just the shell.
    expect(seen).toBeGreaterThanOrEqual(2);
    const left = await survivorsAfter(marker);
    killListed(left);
    expect(left).toEqual([]);
    // A clone, the exec zone and two processes: a few seconds on a loaded 2-core machine, past vitest's
    // default 5 s, and the heartbeat above waits up to a minute for the gate to run.
  }, 90_000);
});
