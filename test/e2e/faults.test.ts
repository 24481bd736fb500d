import path from "node:path";
import { describe, expect, it } from "vitest";
import { verifyChain } from "#shared/engine/index.js";
import { LoopList } from "#shared/wire/api.js";
import { rederive } from "#shared/receipts/verify.js";
import { api, demoRepo, loopEvents, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";
import { startFaultProxy } from "../support/fault-proxy.js";

// A reduced fault-injection run (DESIGN §4 invariant 6): the demo loop through a proxy that sends some
// mutating requests twice and drops some answers after the coordinator acted. The runner retries what it
// never heard back about; every retry must land on the stored outcome. The loop must end exactly as it
// does without faults: same halt, a chain that verifies, every verdict re-derived, one final verdict per
// candidate, and one loop, not a second one orphaned by a lost creation answer.

const FLAGS = ["run", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"];

describe("faults on the wire", () => {
  const { tmp, coordinator } = sharedCoordinator("faults");

  it("duplicated requests and lost answers change nothing: the same halt, one loop, one verdict per candidate", async () => {
    const seed = Number(process.env.LOOPWARDEN_TEST_SEED ?? Date.now() % 100_000);
    console.log(`faults.test seed ${seed} (LOOPWARDEN_TEST_SEED=${seed} replays it)`);

    const reference = await runCli(["--json", "--server", coordinator.url, ...FLAGS], { cwd: demoRepo(path.join(tmp.dir, "reference")) });
    expect(reference.code, reference.stderr).toBe(10);
    const expected = JSON.parse(reference.stdout) as { halt_reason: string; iteration: number };

    const proxy = await startFaultProxy(coordinator.url, { seed, duplicate: 0.25, drop: 0.25, atLeastOne: true });
    try {
      const repo = demoRepo(path.join(tmp.dir, "faulty"));
      const faulty = await runCli(["--json", "--server", proxy.url, ...FLAGS], { cwd: repo });
      console.log(`faults.test proxy: ${JSON.stringify(proxy.counts)}`);
      expect(faulty.code, `${faulty.stderr}\nproxy: ${JSON.stringify(proxy.counts)}`).toBe(10);
      const outcome = JSON.parse(faulty.stdout) as { halt_reason: string; iteration: number };
      expect(outcome).toMatchObject({ halt_reason: expected.halt_reason, iteration: expected.iteration });
      // The faults happened: several requests were duplicated, several answers lost.
      expect(proxy.counts.duplicated, JSON.stringify(proxy.counts)).toBeGreaterThan(0);
      expect(proxy.counts.dropped, JSON.stringify(proxy.counts)).toBeGreaterThan(0);

      const loopId = recordedLoopId(repo);
      const events = await loopEvents(coordinator.url, loopId);
      expect(verifyChain(events as unknown as Record<string, unknown>[]).ok).toBe(true);
      expect(rederive(events)).toMatchObject({ ok: true });
      const finals = events.flatMap((event) => (event.type === "verdict" && event.data.decision !== "need_samples" ? [event.data.candidate_id] : []));
      expect(new Set(finals).size).toBe(finals.length);
      expect(finals).toHaveLength(events.filter((event) => event.type === "candidate_proposed").length);
      // One loop for the faulty repository, not one per lost creation answer.
      const list = LoopList.parse(await (await api(`${coordinator.url}/v1/loops?limit=100`)).json());
      const created = events[0];
      const name = created?.type === "loop_created" ? created.data.contract.name : "";
      expect(list.loops.filter((loop) => loop.name === name).map((loop) => loop.loop_id)).toEqual([loopId]);
    } finally {
      await proxy.stop();
    }
  });
});
