import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { foldEvents, verifyChain, type LoopEvent } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { rederive } from "#shared/receipts/verify.js";
import { uploadCandidateBundle } from "../../runner/src/loop/candidate-bundles.js";
import { Client } from "../../runner/src/coordinator/client.js";
import {
  TEST_OWNER_TOKEN,
  clonesOf,
  exitOf,
  gitIn,
  loopEvents,
  makeRepo,
  recordedLoopId,
  runCli,
  sharedCoordinator,
  startCli,
  waitFor,
} from "../support/cli.js";
import { holdGates, holdingGateLines, type GateFiles } from "../support/held-gates.js";

// Parallel evaluation end to end (issue "team-shared loops", item 4): two proposers put two candidates
// into one loop, two `loopwarden work` runners evaluate them at the same time, and the test decides
// the order in which their reports arrive. Each gate blocks until the test releases its candidate, so
// the overlap and the order are forced, never left to timing: c1 (the faster change) is
// released and promoted first, then c2, measured against t0 by a lease granted before c1's promotion,
// reports a comparison that has gone stale. Judged, its readings (30% better than t0) would make it the
// best over a faster c1; it must be re-queued instead, measured again against c1, and rejected.

const HOLD_ENV = "LW_PARALLEL_HOLD";
/** What a held gate leaves in its clone (naming its candidate), and what the test writes there to let it go on. */
const GATE = { started: "gate.started", go: "gate.go" } as const satisfies GateFiles;

/**
 * An optimize project whose metric is read from `speed.txt` (lower is better, ±0.25% noise) and whose
 * one gate, in a runner started with `LW_PARALLEL_HOLD=1`, leaves `gate.started` (naming the candidate)
 * in its evaluation clone and blocks until `gate.go` exists there: the candidate is what `which.txt`
 * names (t0 never blocks). The clone is the one directory the exec zone lets a gate write (DESIGN §6.7),
 * and the host sees it at the same path. Evaluation needs a label no proposer has.
 */
function parallelProject(): Record<string, string> {
  return {
    "which.txt": "t0\n",
    "speed.txt": "100\n",
    "gate.mjs": [
      "import { readFileSync } from 'node:fs';",
      "const name = readFileSync('which.txt', 'utf8').trim();",
      ...holdingGateLines(GATE, `process.env.${HOLD_ENV} === '1' && name !== 't0'`, "name"),
      "",
    ].join("\n"),
    "bench.mjs": [
      "import { readFileSync } from 'node:fs';",
      "const speed = Number(readFileSync('speed.txt', 'utf8'));",
      "console.log(`METRIC work_ms=${(speed * (1 + (Math.random() - 0.5) / 200)).toFixed(4)}`);",
      "",
    ].join("\n"),
    "loop.yaml": [
      "name: parallel-evaluation",
      "mode: optimize",
      "gates:",
      "  - name: gate",
      "    run: node gate.mjs",
      "    timeout: 2m",
      "metric:",
      "  run: node bench.mjs",
      "  name: work_ms",
      "  direction: lower",
      "  min_effect: 5%",
      "  samples: { min: 6, max: 20 }",
      "stop:",
      "  max_iterations: 2",
      "agent:",
      "  run: node -e 0",
      "evaluate:",
      "  labels: { pool: shared }",
      "",
    ].join("\n"),
    ".gitignore": ".loopwarden/\n",
  };
}

/** Polls the loop's log every 200 ms until `condition` holds of it; fails naming `what`. */
async function untilLog(url: string, loopId: string, condition: (events: LoopEvent[]) => boolean, what: string, timeoutMs = 60_000): Promise<LoopEvent[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const events = await loopEvents(url, loopId);
    if (condition(events)) return events;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; the log: ${events.map((event) => event.type).join(", ")}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe("parallel evaluation: two candidates evaluated at once, promotions serialised", () => {
  const { tmp, coordinator } = sharedCoordinator("parallel");

  it("the second report, compared with a best that changed while it ran, is re-queued, measured again against the new best and decided once", async () => {
    const first = makeRepo(path.join(tmp.dir, "proposer-1"), parallelProject());
    const t0 = gitIn(first, "rev-parse", "HEAD").trim();
    // The second proposer and both runners work in checkouts of their own, holding t0 only.
    const cloneOf = (name: string) => {
      const dir = path.join(tmp.dir, name);
      execFileSync("git", ["clone", "-q", first, dir]);
      return dir;
    };
    const second = cloneOf("proposer-2");
    const checkouts = [cloneOf("runner-1"), cloneOf("runner-2")];

    // Proposer 1: `loopwarden step` creates the loop (t0 = HEAD, measured by a runner with the label; its
    // gate does not block) and proposes c1, twice as fast as t0, with its bundle; lacking the label, it
    // waits for a runner's verdict.
    writeFileSync(path.join(first, "which.txt"), "c1\n");
    writeFileSync(path.join(first, "speed.txt"), "50\n");
    const step = startCli(["--server", coordinator.url, "step"], { cwd: first });
    const started = [step];
    const gates = holdGates(() => started.slice(1).flatMap((worker) => (worker.pid ? [clonesOf(worker.pid)] : [])), GATE);
    try {
      await waitFor(() => {
        try {
          return recordedLoopId(first, "loop.yaml").length > 0;
        } catch {
          return false;
        }
      }, "the loop's creation");
      const loopId = recordedLoopId(first, "loop.yaml");
      // Two runners, each in a checkout without either candidate's commit; one of them measures t0 first
      // (the proposer lacks the label), and then each leases one candidate.
      const workers = checkouts.map((dir) =>
        startCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loopId], { cwd: dir, env: { [HOLD_ENV]: "1" } }),
      );
      started.push(...workers);
      await untilLog(coordinator.url, loopId, (events) => events.some((event) => event.type === "candidate_proposed"), "c1's proposal");

      // Proposer 2, in its own checkout: c2, 30% faster than t0 but slower than c1, proposed over the API
      // with its commits as a bundle, as the runner's proposer code does.
      writeFileSync(path.join(second, "which.txt"), "c2\n");
      writeFileSync(path.join(second, "speed.txt"), "70\n");
      gitIn(second, "-c", "user.name=second", "-c", "user.email=second@localhost", "commit", "-q", "-am", "c2: faster");
      const c2Commit = gitIn(second, "rev-parse", "HEAD").trim();
      const client = new Client(coordinator.url, { token: TEST_OWNER_TOKEN, retryForMs: 5_000 });
      const bundle = await uploadCandidateBundle(client, loopId, second, c2Commit, t0);
      const proposed = await client.proposeCandidate(loopId, {
        idempotency_key: `second-proposer-${c2Commit}`,
        commit: c2Commit,
        diff_sha256: sha256Hex(gitIn(second, "diff", t0, c2Commit)),
        empty: false,
        proposer: { kind: "step" },
        agent: null,
        bundle,
      });
      // Queued, or already leased by the runner that was waiting for a job.
      expect(proposed.candidate).toMatchObject({ candidate_id: "c2", parent: "t0" });
      expect(["queued", "leased"]).toContain(proposed.candidate.status);

      // Both gates are running at once: each runner holds one candidate's lease, both against t0.
      // Both runners' output in the failure, should a runner stop or a gate never start. (The intermittent
      // timeout here under a full suite's load was a marker read empty, between its creation and its
      // write, and so never counted: see holdGates.)
      await waitFor(() => gates.runs("c1") === 1 && gates.runs("c2") === 1, "both candidates' gates to start", 90_000).catch((error: unknown) => {
        const outputs = workers.map((worker, index) => `runner-${index + 1} (exit ${worker.exitCode}):\n${worker.output()}`).join("\n");
        throw new Error(`${(error as Error).message}; gate runs c1=${gates.runs("c1")} c2=${gates.runs("c2")}\n${outputs}`);
      });
      const overlapping = await loopEvents(coordinator.url, loopId);
      const leasesNow = overlapping.flatMap((event) => (event.type === "lease_granted" ? [event.data] : []));
      expect(leasesNow.map((lease) => [lease.candidate_id, lease.compare_to?.candidate_id]).sort()).toEqual([
        ["c1", "t0"],
        ["c2", "t0"],
      ]);
      expect(new Set(leasesNow.map((lease) => lease.runner_id)).size).toBe(2);
      expect(overlapping.some((event) => event.type === "observation_reported" || event.type === "verdict")).toBe(false);
      const staleLease = leasesNow.find((lease) => lease.candidate_id === "c2");
      if (!staleLease) throw new Error("no lease for c2");

      // c1's report comes first: promoted against t0, and proposer 1's step ends with it.
      gates.release("c1");
      expect(await exitOf(step), step.output()).toBe(0);
      const promoted = await loopEvents(coordinator.url, loopId);
      const c1Proposal = promoted.find((event) => event.type === "candidate_proposed" && event.data.candidate_id === "c1");
      const c1Commit = c1Proposal?.type === "candidate_proposed" ? c1Proposal.data.commit : "";
      // Proposer 1 kept the promoted change: its checkout is at c1.
      expect(gitIn(first, "rev-parse", "HEAD").trim()).toBe(c1Commit);
      expect(promoted.flatMap((event) => (event.type === "verdict" ? [[event.data.candidate_id, event.data.decision]] : []))).toEqual([["c1", "promoted"]]);
      expect(gates.runs("c2")).toBe(1);

      // Then c2's, whose lease compared it with t0: re-queued, leased again against c1, and decided.
      gates.release("c2");
      // With --loop, a runner stops once its loop halts: here at max_iterations, after c2's verdict.
      const codes = await Promise.all(workers.map((worker) => exitOf(worker)));
      expect(codes, workers.map((worker) => worker.output()).join("\n---\n")).toEqual([0, 0]);

      const events = await loopEvents(coordinator.url, loopId);
      const C1 = { candidate_id: "c1", commit: c1Commit };
      const T0 = { candidate_id: "t0", commit: t0 };
      // Each candidate decided exactly once: c1 promoted; c2, measured against c1, not an improvement.
      const finals = events.flatMap((event) => (event.type === "verdict" && event.data.decision !== "need_samples" ? [event.data] : []));
      expect(finals.map((verdict) => [verdict.candidate_id, verdict.decision, verdict.reason])).toEqual([
        ["c1", "promoted", "improved"],
        ["c2", "rejected", "not_improved"],
      ]);
      // One re-queue: c2's first report, stale, with nothing of it recorded.
      const requeues = events.flatMap((event) => (event.type === "lease_requeued" ? [event.data] : []));
      expect(requeues).toEqual([
        expect.objectContaining({ lease_id: staleLease.lease_id, candidate_id: "c2", compare_to: T0, compared_to: t0, best: C1, reason: "stale_comparison" }),
      ]);
      expect(events.some((event) => event.type === "observation_reported" && event.data.lease_id === staleLease.lease_id)).toBe(false);
      // Leased again against c1 under a higher fencing token, and its gate ran a second time.
      const c2Leases = events.flatMap((event) => (event.type === "lease_granted" && event.data.candidate_id === "c2" ? [event.data] : []));
      expect(c2Leases.map((lease) => lease.compare_to)).toEqual([T0, C1]);
      expect(c2Leases[1]?.fencing_token).toBeGreaterThan(staleLease.fencing_token);
      expect([gates.runs("c1"), gates.runs("c2")]).toEqual([1, 2]);
      // The runner that held the stale lease was told why, and went on.
      expect(workers.some((worker) => worker.output().includes("not judged: the best is now c1"))).toBe(true);
      // c2's only recorded readings are the second lease's, paired with c1.
      const c2Reports = events.flatMap((event) => (event.type === "observation_reported" && event.data.candidate_id === "c2" ? [event.data] : []));
      expect(new Set(c2Reports.map((report) => report.lease_id))).toEqual(new Set([c2Leases[1]?.lease_id]));
      expect(new Set(c2Reports.map((report) => report.observation.compared_to))).toEqual(new Set([c1Commit]));
      // Every promotion rests on readings of the best at the time it was decided, under a lease that named it.
      events.forEach((event, index) => {
        if (event.type !== "verdict" || event.data.decision !== "promoted") return;
        const reported = events[index - 1];
        const before = foldEvents(events.slice(0, index - 1));
        if (reported?.type !== "observation_reported" || !before) throw new Error(`promotion of ${event.data.candidate_id} without its observation`);
        const lease = events.find((other) => other.type === "lease_granted" && other.data.lease_id === reported.data.lease_id);
        expect(lease?.type === "lease_granted" ? lease.data.compare_to : null).toEqual({ candidate_id: before.best.candidate_id, commit: before.best.commit });
        expect(reported.data.observation.compared_to).toBe(before.best.commit);
      });
      const halted = events.find((event) => event.type === "halted");
      expect(halted?.type === "halted" ? halted.data.halt_reason : null).toBe("max_iterations_reached");

      // The chain verifies, every verdict and the re-queue re-derive, and so does the final receipt.
      expect(verifyChain(events as unknown as Record<string, unknown>[]).ok).toBe(true);
      const rederived = rederive(events);
      expect(rederived, JSON.stringify(rederived).slice(0, 500)).toMatchObject({ ok: true });
      const loop = await client.getLoop(loopId);
      expect(loop).toMatchObject({ status: "halted", best: { candidate_id: "c1" }, receipt_id: expect.any(String) });
      const verified = await runCli(["verify", `${coordinator.url}/r/${loop.receipt_id ?? ""}`], { cwd: tmp.dir });
      expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    } finally {
      // Whatever failed, nothing this test started outlives it: a blocked gate is released first.
      for (const name of ["c1", "c2"]) gates.release(name);
      gates.stop();
      for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
  });
});
