import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { verifyChain, type LoopEvent } from "#shared/engine/index.js";
import { rederive } from "#shared/receipts/verify.js";
import { sha256Hex } from "#shared/hash.js";
import { api, clonesOf, exitOf, gitIn, loopEvents, makeRepo, recordedLoopId, runCli, sharedCoordinator, startCli, waitFor } from "../support/cli.js";
import { dirsHolding, killListed, processesWith, survivorsAfter } from "../support/zone-markers.js";
import { timedWorkProject } from "../support/timed-work-project.js";
import { mulberry32 } from "../support/prng.js";
import { CALC, CALC_TESTS } from "../support/two-runner-project.js";

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
    // --skip-doctor: this reference is compared on its halt and verdicts only; oracle.test.ts covers the precondition.
    // It runs while the shared loop does (issue 30's suite time): a loop of its own, in a repository of its own,
    // whose metric is a wait (timedWorkProject), not a computation the other loop's processes could slow.
    const reference = startCli(["--json", "--server", coordinator.url, "run", "--labels", "pool=shared", "--skip-doctor"], { cwd: single });
    let referenceStdout = "";
    reference.stdout?.on("data", (chunk: Buffer) => (referenceStdout += chunk.toString()));

    const proposer = makeRepo(path.join(tmp.dir, "proposer"), optimizeProject());
    // The runners' checkouts hold t0 only: candidates reach them as bundles through the coordinator.
    const checkouts = [1, 2, 3].map((index) => {
      const dir = path.join(tmp.dir, `runner-${index}`);
      execFileSync("git", ["clone", "-q", proposer, dir]);
      return dir;
    });

    const run = startCli(["--json", "--server", coordinator.url, "run"], { cwd: proposer });
    const started = [reference, run];
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

      expect(await exitOf(reference), reference.output()).toBe(12);
      const referenceHalt = (JSON.parse(referenceStdout) as { halt_reason: string }).halt_reason;
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

// ---- one runner's jobs: one job's end is never the runner's ------------------------------------------

/**
 * What a held candidate leaves at the root of its evaluation clone when its gate's test process imports
 * it, and what the test writes there to let it go on. The clone is the one directory the exec zone lets a
 * gate write (DESIGN §6.7), and the host sees it at the same path: the test finds it under the runner's
 * `clonesOf(pid)`.
 */
const HOLD = { held: "calc.held", release: "calc.release" } as const;

/**
 * calc.js with the named functions fixed. With `hold`, importing it (the gate's test process does) first
 * leaves `calc.held` in its clone, then waits until `calc.release` is there: a gate that stays busy until
 * the test says otherwise, in every clone it is evaluated in.
 */
function calcSource(fixed: readonly string[], hold = false): string {
  const held = hold
    ? [
        "import { existsSync, writeFileSync } from 'node:fs';",
        `writeFileSync(new URL(${JSON.stringify(`../${HOLD.held}`)}, import.meta.url), '');`,
        `while (!existsSync(new URL(${JSON.stringify(`../${HOLD.release}`)}, import.meta.url))) await new Promise((resolve) => setTimeout(resolve, 50));`,
      ]
    : [];
  const functions = ["add", "mul", "neg"].map((name, index) => (fixed.includes(name) ? CALC.fixed[index] : CALC.buggy[index]));
  return `${[...held, ...functions].join("\n")}\n`;
}

/**
 * A check_fixpoint project with three failing tests whose agent changes nothing; only a `pool=shared`
 * runner evaluates. Its gate's node processes (the test runner and the test process it starts, which
 * inherits its options) carry `title` as their whole command line: the host finds them by it
 * (`pgrep -f`), as their pids in the exec zone are not the host's.
 */
function calcProject(name: string, title: string): Record<string, string> {
  return {
    "package.json": '{ "name": "calc", "private": true, "type": "module" }\n',
    "src/calc.js": calcSource([]),
    "test/calc.test.js": CALC_TESTS,
    "loop.yaml": [
      `name: ${name}`,
      "mode: check_fixpoint",
      "gates:",
      "  - name: unit",
      `    run: node --title=${title} --test --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap`,
      "    tests: { tap: .loopwarden/out/tests.tap }",
      "    timeout: 5m",
      "stop:",
      "  max_iterations: 8",
      "agent:",
      "  run: 'true'",
      "evaluate:",
      "  labels: { pool: shared }",
      "",
    ].join("\n"),
    ".gitignore": ".loopwarden/\n",
  };
}

/**
 * A running loop of `calcProject(name)` and a runner's checkout of it: `run --once --labels pool=shared`
 * creates the loop (with the label, it measures t0 itself rather than wait for a runner to; its agent
 * changes nothing: c1 is rejected unevaluated), and candidates are then proposed straight to the
 * API as commits of the runner's checkout, so several are queued at once. `title` is its gate's
 * processes' command line, unique to this loop.
 */
async function queueableLoop(dir: string, name: string, url: string): Promise<{ loopId: string; checkout: string; t0: string; title: string }> {
  const title = `lw-gate-${name}-${randomBytes(4).toString("hex")}`;
  const proposer = makeRepo(path.join(dir, "proposer"), calcProject(name, title));
  // --skip-doctor: these tests are about the runner's jobs; oracle.test.ts covers the precondition.
  const created = await runCli(["--server", url, "run", "--once", "--labels", "pool=shared", "--skip-doctor"], { cwd: proposer });
  expect(created.code, created.stderr).toBe(0);
  const checkout = path.join(dir, "runner");
  execFileSync("git", ["clone", "-q", proposer, checkout]);
  return { loopId: recordedLoopId(proposer, "loop.yaml"), checkout, t0: gitIn(checkout, "rev-parse", "HEAD").trim(), title };
}

/** Commits `source` as src/calc.js on a branch of its own from t0 (the working tree is left at t0) and proposes it. */
async function proposeCalc(url: string, loop: { loopId: string; checkout: string; t0: string }, name: string, source: string): Promise<string> {
  const git = (...args: string[]) => gitIn(loop.checkout, ...args);
  git("checkout", "-q", "-b", name, loop.t0);
  writeFileSync(path.join(loop.checkout, "src", "calc.js"), source);
  git("-c", "user.name=test", "-c", "user.email=test@localhost", "commit", "-q", "-am", name);
  const commit = git("rev-parse", "HEAD").trim();
  git("checkout", "-q", "main");
  return proposeCommit(url, loop.loopId, name, commit);
}

/** Proposes a commit straight to the API, as `run` or `step` would (without a bundle unless given one). */
async function proposeCommit(url: string, loopId: string, name: string, commit: string, bundle?: { sha256: string; size: number }): Promise<string> {
  const body = {
    idempotency_key: `candidate-${name}`,
    commit,
    diff_sha256: sha256Hex(name),
    empty: false,
    proposer: { kind: "step" },
    agent: null,
    ...(bundle ? { bundle } : {}),
  };
  const response = await api(`${url}/v1/loops/${loopId}/candidates`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(response.status, await response.clone().text()).toBe(201);
  return ((await response.json()) as { candidate: { candidate_id: string } }).candidate.candidate_id;
}

/** The clones of a runner in which a held candidate is waiting. */
function heldClones(runner: { pid?: number | undefined }): string[] {
  return dirsHolding(clonesOf(runner.pid ?? 0), HOLD.held);
}

describe("loopwarden work, one job at a time", () => {
  // The default lease TTL (2 minutes): a job queued again within the test was released, never expired.
  const { tmp, coordinator } = sharedCoordinator("work-jobs");

  it("--concurrency 2 evaluates two queued candidates of one loop at once; the one whose loop halts meanwhile just ends, and --loop exits 0 saying so", async () => {
    const dir = path.join(tmp.dir, "concurrent");
    const loop = await queueableLoop(dir, "work-concurrent", coordinator.url);
    // c2 fixes one test and is held in its gate; c3 fixes all three: its promotion halts the loop (success).
    const held = await proposeCalc(coordinator.url, loop, "held", calcSource(["add"], true));
    const winner = await proposeCalc(coordinator.url, loop, "winner", calcSource(["add", "mul", "neg"]));
    expect([held, winner]).toEqual(["c2", "c3"]);

    const worker = startCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loop.loopId, "--concurrency", "2"], {
      cwd: loop.checkout,
    });
    try {
      // Both jobs out at once: c2 held in its gate while c3's report halts the loop.
      await waitFor(() => heldClones(worker).length > 0 || worker.exitCode !== null, "the held candidate's gate to start", 120_000);
      let events = await loopEvents(coordinator.url, loop.loopId);
      const deadline = Date.now() + 120_000;
      while (!events.some((event) => event.type === "halted")) {
        if (worker.exitCode !== null || Date.now() > deadline)
          throw new Error(`no halt while c2 is held; work ${worker.exitCode ?? "still running"}:\n${worker.output()}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
        events = await loopEvents(coordinator.url, loop.loopId);
      }
      const [heldClone] = heldClones(worker);
      if (!heldClone) throw new Error(`c2's gate is no longer held:\n${worker.output()}`);
      writeFileSync(path.join(heldClone, HOLD.release), "");
      const code = await exitOf(worker);
      expect(code, worker.output()).toBe(0);
      expect(worker.output()).toMatch(/\] c2 not judged: loop lp_\w+ halted meanwhile \(the loop has halted \(success_condition_met\)\); the job ends/);
      expect(worker.output()).toContain(`loop ${loop.loopId} halted (success_condition_met): nothing more to evaluate`);
      expect(worker.output()).toContain("1 not judged (the loop halted)");

      events = await loopEvents(coordinator.url, loop.loopId);
      expect(rederive(events)).toMatchObject({ ok: true });
      const leases = events.flatMap((event) => (event.type === "lease_granted" ? [event.data] : []));
      // One lease each, to the runner's two slots: evaluated at once, not one after the other.
      expect(leases.map((lease) => lease.candidate_id).sort()).toEqual(["c2", "c3"]);
      expect(new Set(leases.map((lease) => lease.runner_id)).size).toBe(2);
      expect(finalVerdicts(events)).toEqual([
        expect.objectContaining({ candidate_id: "c1", decision: "rejected" }),
        expect.objectContaining({ candidate_id: "c3", decision: "promoted" }),
      ]);
      expect(events.some((event) => event.type === "observation_reported" && event.data.candidate_id === "c2")).toBe(false);
    } finally {
      if (worker.exitCode === null && worker.signalCode === null) worker.kill("SIGKILL");
    }
  });

  it("stopped twice mid-job: the job's processes are killed, its lease given back at once, and another runner finishes it with one verdict", async () => {
    const dir = path.join(tmp.dir, "stopped");
    const loop = await queueableLoop(dir, "work-stopped", coordinator.url);
    expect(await proposeCalc(coordinator.url, loop, "fixes-all", calcSource(["add", "mul", "neg"], true))).toBe("c2");

    const first = startCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loop.loopId], { cwd: loop.checkout });
    // The gate's processes, seen from the host by their command line (their pids in the zone are not the host's).
    let gate: string[] = [];
    try {
      await waitFor(() => heldClones(first).length > 0 || first.exitCode !== null, "the gate to start", 120_000);
      gate = processesWith(loop.title);
      first.kill("SIGTERM");
      await waitFor(() => first.output().includes("finishing what is in hand"), "the first SIGTERM to be taken");
      first.kill("SIGTERM");
      expect(await exitOf(first), first.output()).toBe(143);
    } finally {
      if (first.exitCode === null && first.signalCode === null) first.kill("SIGKILL");
    }
    // The gate's test process and the test runner above it went with the job (never released, it was
    // still held), and so did everything else that carried its command line (the zone, its shell).
    expect(
      gate.filter((line) => line.slice(line.indexOf(" ") + 1) === loop.title),
      gate.join("\n"),
    ).toHaveLength(2);
    const survivors = await survivorsAfter(loop.title, 2_000);
    killListed(survivors);
    expect(survivors).toEqual([]);
    expect(first.output()).toMatch(/\] c2 lease given back: c2 is queued again/);

    const stopped = await loopEvents(coordinator.url, loop.loopId);
    const granted = stopped.filter((event) => event.type === "lease_granted" && event.data.candidate_id === "c2");
    expect(granted).toHaveLength(1);
    const firstLease = granted[0]?.type === "lease_granted" ? granted[0].data : null;
    expect(stopped.at(-1)).toMatchObject({ type: "lease_released", data: { lease_id: firstLease?.lease_id, candidate_id: "c2" } });
    expect(stopped.some((event) => event.type === "observation_reported" || event.type === "lease_expired")).toBe(false);

    // Queued again at once (the lease would live two minutes): a second runner takes it and finishes it,
    // its gate held in a clone of its own until the test lets it go.
    const second = startCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loop.loopId], { cwd: loop.checkout });
    try {
      await waitFor(() => heldClones(second).length > 0 || second.exitCode !== null, "the second runner's gate to start", 120_000);
      for (const clone of heldClones(second)) writeFileSync(path.join(clone, HOLD.release), "");
      expect(await exitOf(second), second.output()).toBe(0);
    } finally {
      if (second.exitCode === null && second.signalCode === null) second.kill("SIGKILL");
    }
    const events = await loopEvents(coordinator.url, loop.loopId);
    expect(rederive(events)).toMatchObject({ ok: true });
    const leases = events.flatMap((event) => (event.type === "lease_granted" && event.data.candidate_id === "c2" ? [event.data] : []));
    expect(leases).toHaveLength(2);
    expect(leases[1]?.fencing_token).toBeGreaterThan(leases[0]?.fencing_token ?? Infinity);
    expect(finalVerdicts(events).filter((verdict) => verdict.candidate_id === "c2")).toEqual([expect.objectContaining({ decision: "promoted" })]);
    expect(events.some((event) => event.type === "lease_expired")).toBe(false);
  });

  it("a job this checkout can never run is given back and its loop served no more: the runner stays up; with --loop it stops with the reason", async () => {
    const dir = path.join(tmp.dir, "refused");
    const loop = await queueableLoop(dir, "work-refused", coordinator.url);
    // A commit the runner's checkout does not have, proposed without a bundle to fetch it from.
    const missing = sha256Hex("a commit no checkout has").slice(0, 40);
    expect(await proposeCommit(coordinator.url, loop.loopId, "missing", missing)).toBe("c2");

    const serving = startCli(["--server", coordinator.url, "work", "--labels", "pool=shared"], { cwd: loop.checkout });
    try {
      await waitFor(
        () => serving.output().includes(`serves loop ${loop.loopId} no more`) || serving.exitCode !== null,
        "the runner to refuse the loop",
        120_000,
      );
      expect(serving.output()).toMatch(/\] c2 refused: this checkout lacks commit/);
      expect(serving.output()).toMatch(/\] c2 lease given back: c2 is queued again/);
      // Still up, serving whatever else comes: it stops as usual.
      expect(serving.exitCode).toBeNull();
      serving.kill("SIGINT");
      expect(await exitOf(serving), serving.output()).toBe(0);
    } finally {
      if (serving.exitCode === null && serving.signalCode === null) serving.kill("SIGKILL");
    }
    const named = await runCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loop.loopId], { cwd: loop.checkout });
    expect(named.code, named.stderr).toBe(1);
    expect(named.stderr).toMatch(/loopwarden: this checkout lacks commit \w+ of loop lp_\w+, and its proposer uploaded no bundle of it/);

    const events = await loopEvents(coordinator.url, loop.loopId);
    const releases = events.filter((event) => event.type === "lease_released");
    expect(releases).toHaveLength(2);
    expect(events.at(-1)?.type).toBe("lease_released");
    expect(rederive(events)).toMatchObject({ ok: true });
  });

  it("a job that fails on the runner's side is said with its label and given back, and the runner goes on", async () => {
    const dir = path.join(tmp.dir, "failing");
    const loop = await queueableLoop(dir, "work-failing", coordinator.url);
    // The candidate's "bundle" is stored and matches its digest, but is no git bundle: fetching from it fails.
    const bytes = new TextEncoder().encode("not a git bundle\n");
    const digest = sha256Hex(bytes);
    const stored = await api(`${coordinator.url}/v1/loops/${loop.loopId}/artifacts/${digest}?name=broken.bundle`, {
      method: "PUT",
      headers: { "content-type": "application/x-git-bundle" },
      body: bytes,
    });
    expect(stored.status, await stored.clone().text()).toBe(201);
    const missing = sha256Hex("a commit only the broken bundle names").slice(0, 40);
    expect(await proposeCommit(coordinator.url, loop.loopId, "broken", missing, { sha256: digest, size: bytes.length })).toBe("c2");

    const worker = startCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loop.loopId], { cwd: loop.checkout });
    try {
      await waitFor(() => worker.output().includes("c2 lease given back") || worker.exitCode !== null, "the failed job to be given back", 120_000);
      expect(worker.output()).toMatch(/\] c2 failed: /);
      expect(worker.exitCode).toBeNull();
      const released = (await loopEvents(coordinator.url, loop.loopId)).filter((event) => event.type === "lease_released");
      expect(released.length).toBeGreaterThanOrEqual(1);
      worker.kill("SIGINT");
      expect(await exitOf(worker), worker.output()).toBe(0);
      expect(worker.output()).toMatch(/stopped after \d+ job\(s\): 0 promoted, 0 rejected, 0 lost or re-queued, \d+ failed here/);
    } finally {
      if (worker.exitCode === null && worker.signalCode === null) worker.kill("SIGKILL");
    }
    const events = await loopEvents(coordinator.url, loop.loopId);
    // Nothing was judged on a job the runner could not evaluate.
    expect(events.some((event) => event.type === "observation_reported")).toBe(false);
    expect(finalVerdicts(events).map((verdict) => verdict.candidate_id)).toEqual(["c1"]);
    expect(rederive(events)).toMatchObject({ ok: true });
  });
});
