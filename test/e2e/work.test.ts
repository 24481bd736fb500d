import { execFileSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { verifyChain, type LoopEvent } from "../../shared/engine/index.js";
import { rederive } from "../../shared/receipts/verify.js";
import { exitOf, loopEvents, makeRepo, recordedLoopId, runCli, sharedCoordinator, startCli, waitFor } from "../support/cli.js";
import { timedWorkProject } from "../support/timed-work-project.js";
import { mulberry32 } from "../support/prng.js";

// Team-shared loops end to end (DESIGN §1.2): one agent proposing with `run`, three `loopwarden work`
// runners in checkouts of their own (which have only t0: every candidate reaches them as a git bundle),
// one of them SIGKILLed mid-job. The loop must halt exactly as a single-runner run of the same contract
// does, its log must verify, and no candidate may be judged twice or promoted on a stale comparison.

/** An optimize project whose agent makes a real 2x speed-up, then a no-op, then another 2x speed-up. */
function optimizeProject(): Record<string, string> {
  return {
    ...timedWorkProject(),
    "agent.mjs": [
      "import { readFileSync, writeFileSync } from 'node:fs';",
      "const file = 'src/work.js';",
      "const source = readFileSync(file, 'utf8');",
      "const iteration = process.env.LOOPWARDEN_ITERATION;",
      "const next = iteration === '1' ? source.replace('DELAY = 40', 'DELAY = 20') : iteration === '3' ? source.replace('DELAY = 20', 'DELAY = 10') : `// tidied\\n${source}`;",
      "writeFileSync(file, next);",
    ].join("\n"),
    // Evaluation needs a label the proposer's machine lacks: `run` proposes, `work` runners evaluate.
    "loop.yaml": [
      "name: shared-work",
      "mode: optimize",
      "gates:",
      "  - name: unit",
      "    run: node --test",
      "metric:",
      "  run: node bench.mjs",
      "  name: work_ms",
      "  direction: lower",
      "  min_effect: 5%",
      "  samples: { min: 5, max: 20 }",
      "stop:",
      "  max_iterations: 3",
      "agent:",
      "  run: node agent.mjs",
      "evaluate:",
      "  labels: { pool: shared }",
      "",
    ].join("\n"),
    ".gitignore": ".loopwarden/\n",
  };
}

function finalVerdicts(events: readonly LoopEvent[]): { candidate_id: string; decision: string }[] {
  return events.flatMap((event) => (event.type === "verdict" && event.data.decision !== "need_samples" ? [event.data] : []));
}

describe("loopwarden work", () => {
  // Leases live 4 s here, so a killed runner's job is re-queued within the test (heartbeats every second).
  const { tmp, coordinator } = sharedCoordinator("work", { LOOPWARDEN_LEASE_TTL: "4s" });

  it("three runners evaluate one agent's candidates; one SIGKILLed mid-job changes nothing but who finishes it", async () => {
    const seed = Number(process.env.LOOPWARDEN_TEST_SEED ?? Date.now() % 100_000);
    const random = mulberry32(seed);
    console.log(`work.test seed ${seed} (LOOPWARDEN_TEST_SEED=${seed} replays it)`);

    // The single-runner reference: the same contract, with `run` holding the label itself.
    const single = makeRepo(path.join(tmp.dir, "single"), optimizeProject());
    const reference = await runCli(["--json", "--server", coordinator.url, "run", "--labels", "pool=shared"], { cwd: single });
    expect(reference.code, reference.stderr).toBe(12);
    const referenceHalt = (JSON.parse(reference.stdout) as { halt_reason: string }).halt_reason;

    const proposer = makeRepo(path.join(tmp.dir, "proposer"), optimizeProject());
    // The runners' checkouts hold t0 only: candidates reach them as bundles through the coordinator.
    const checkouts = [1, 2, 3].map((index) => {
      const dir = path.join(tmp.dir, `runner-${index}`);
      execFileSync("git", ["clone", "-q", proposer, dir]);
      return dir;
    });

    const run = startCli(["--json", "--server", coordinator.url, "run"], { cwd: proposer });
    const started = [run];
    try {
      await waitFor(() => {
        try {
          return recordedLoopId(proposer, "loop.yaml").length > 0;
        } catch {
          return false;
        }
      }, "the loop's creation");
      const loopId = recordedLoopId(proposer, "loop.yaml");
      const workers = checkouts.map((dir) => startCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loopId], { cwd: dir }));
      started.push(...workers);

      // Kill one runner while it holds a job: the first to start evaluating, after a random delay.
      await waitFor(() => workers.some((worker) => worker.output().includes("evaluating")), "a runner to take a job", 120_000);
      await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * 1_500)));
      const victim = workers.find((worker) => worker.output().includes("evaluating"));
      if (!victim?.pid) throw new Error("no runner to kill");
      victim.kill("SIGKILL");
      await exitOf(victim);

      const code = await exitOf(run);
      const survivors = workers.filter((worker) => worker !== victim);
      // With --loop, a runner stops once its loop halts.
      const survivorCodes = await Promise.all(survivors.map((worker) => exitOf(worker)));
      expect(code, run.output()).toBe(12);
      expect(survivorCodes, survivors.map((worker) => worker.output()).join("\n---\n")).toEqual([0, 0]);

      const events = await loopEvents(coordinator.url, loopId);
      const halted = events.find((event) => event.type === "halted");
      expect(halted?.type === "halted" ? halted.data.halt_reason : null).toBe(referenceHalt);
      expect(verifyChain(events as unknown as Record<string, unknown>[]).ok).toBe(true);
      // Every verdict re-derived from the evidence: none on a stale comparison, none different.
      const rederived = rederive(events);
      expect(rederived, JSON.stringify(rederived).slice(0, 500)).toMatchObject({ ok: true });
      // No candidate judged twice; each of the three judged once.
      const finals = finalVerdicts(events);
      expect(new Set(finals.map((verdict) => verdict.candidate_id)).size).toBe(finals.length);
      expect(finals.map((verdict) => verdict.candidate_id)).toEqual(["c1", "c2", "c3"]);
      expect(finals.map((verdict) => verdict.decision)).toEqual(
        finalVerdicts(await loopEvents(coordinator.url, recordedLoopId(single, "loop.yaml"))).map((v) => v.decision),
      );
      // Every promotion was measured against the best it was promoted over.
      for (const event of events) {
        if (event.type !== "verdict" || event.data.decision !== "promoted") continue;
        const lastLease = events.filter((e) => e.seq < event.seq && e.type === "lease_granted" && e.data.candidate_id === event.data.candidate_id).at(-1);
        const bestBefore = events.filter((e) => e.seq < event.seq && e.type === "verdict" && e.data.decision === "promoted").at(-1);
        expect(lastLease?.type === "lease_granted" ? lastLease.data.compare_to?.candidate_id : null).toBe(
          bestBefore?.type === "verdict" ? bestBefore.data.candidate_id : "t0",
        );
      }
      // The jobs were spread over the runners, none to `run` (it lacks the label), and the killed
      // runner's lease ran out and was re-queued, then finished by another.
      const leases = events.flatMap((event) => (event.type === "lease_granted" ? [event.data] : []));
      expect(new Set(leases.map((lease) => lease.runner_id)).size).toBeGreaterThanOrEqual(2);
      const expired = events.flatMap((event) => (event.type === "lease_expired" ? [event.data] : []));
      expect(expired.length).toBeGreaterThanOrEqual(1);
      for (const lease of expired) expect(finals.some((verdict) => verdict.candidate_id === lease.candidate_id)).toBe(true);
      // The gain over t0 was confirmed once, by the runner whose report halted the loop (it has the
      // labels; the proposer does not), as the single-runner run confirmed its own.
      expect(events.filter((event) => event.type === "confirm_measured")).toHaveLength(1);
      expect(survivors.some((worker) => worker.output().includes("confirmed against t0"))).toBe(true);
      // The candidate commits came to the runners' checkouts as bundles.
      expect(survivors.some((worker) => worker.output().includes("from its bundle"))).toBe(true);
    } finally {
      // Whatever failed, nothing this test started outlives it.
      for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
  });

  it("an idle runner stops on SIGINT at once, exit 0; one outside a checkout with the contract is refused", async () => {
    const repo = makeRepo(path.join(tmp.dir, "idle"), optimizeProject());
    const worker = startCli(["--server", coordinator.url, "work", "--labels", "pool=shared"], { cwd: repo });
    try {
      await waitFor(() => worker.output().includes("working for every running loop"), "the runner to start");
      worker.kill("SIGINT");
      expect(await exitOf(worker)).toBe(0);
      expect(worker.output()).toContain("stopped after 0 job(s)");
    } finally {
      if (worker.exitCode === null) worker.kill("SIGKILL");
    }
    const bare = makeRepo(path.join(tmp.dir, "bare"), { "README.md": "no contract here\n" });
    const refused = await runCli(["--server", coordinator.url, "work"], { cwd: bare });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/loop\.yaml/);
  });
});
