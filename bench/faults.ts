// `npm run test:faults`: the full fault-injection suite (issue 14, item 5). Loops run while their runners
// and their coordinator are SIGKILLed at random points, while a proxy on 127.0.0.1 drops answers and sends
// requests twice, and after a stored artifact's bytes are overwritten. Two kinds of loop: single-runner
// demo loops (`run` proposes and evaluates) and two-runner loops (`run` proposes, a `loopwarden work`
// runner evaluates, because the contract requires a label only it has). A killed process is restarted
// with the same command until the loop halts; a killed coordinator on the same state and port.
//
// After each scenario: the halt reason is the fault-free reference's, the event chain verifies, every
// verdict re-derives, each candidate has exactly one final verdict, candidate ids are unique, every
// promoted commit is on the loop's branch, the coordinator lists exactly one loop and it is halted, and
// an interim receipt verifies (`loopwarden receipt`, `loopwarden verify <url>`). A corrupted artifact must
// be refused where the runner promises digests are checked. Exits 1 on any failure; writes
// bench/results/faults.md. LOOPWARDEN_TEST_SEED replays a run's fault plan; LOOPWARDEN_FAULTS_ONLY=<name
// prefix> runs only matching scenarios (their results are not written).
import { rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync, spawnSync, type ChildProcess } from "node:child_process";
import { verifyChain } from "#shared/engine/index.js";
import { rederive } from "#shared/receipts/verify.js";
import { LoopList } from "#shared/wire/api.js";
import {
  ROOT,
  api,
  clonesOf,
  demoRepo,
  exitOf,
  gitIn,
  loopEvents,
  makeRepo,
  recordedLoopId,
  runCli,
  startCli,
  startCoordinator,
  tempDir,
  type TestCoordinator,
} from "../test/support/cli.js";
import { startFaultProxy, type FaultProxy } from "../test/support/fault-proxy.js";
import { mulberry32 } from "../test/support/prng.js";
import { corruptStoredArtifact } from "../test/support/stored-blobs.js";
import { twoRunnerProject } from "../test/support/two-runner-project.js";

const SEED = Number(process.env.LOOPWARDEN_TEST_SEED ?? Date.now() % 1_000_000);
const ONLY = process.env.LOOPWARDEN_FAULTS_ONLY;
/** Short leases, so a lease whose grant was lost (or whose runner was killed) is re-queued within seconds. */
const COORDINATOR_ENV = { LOOPWARDEN_LEASE_TTL: "4s" };
/** The most times one process is killed in a scenario; after that it runs to the halt. */
const MAX_KILLS = 3;
/** A scenario that has not halted by then is a hang, and a failure. */
const SCENARIO_TIMEOUT_MS = 180_000;

type Project = "demo" | "two-runner";
type FaultKind = "run_sigkill" | "work_sigkill" | "coordinator_sigkill" | "dropped_answer" | "duplicated_request" | "corrupted_artifact";
const FAULT_KINDS: FaultKind[] = ["run_sigkill", "work_sigkill", "coordinator_sigkill", "dropped_answer", "duplicated_request", "corrupted_artifact"];

/** One scenario of the plan: a project, the proxy's rates and which processes are killed. */
interface Scenario {
  name: string;
  project: Project;
  drop: number;
  duplicate: number;
  kill: ("run" | "work" | "coordinator")[];
  /** A stored gate log, overwritten after the halt; or the first candidate's git bundle, before any runner fetched it. */
  corrupt: "log" | "bundle" | null;
}

interface Outcome {
  scenario: Scenario;
  seed: number;
  faults: Record<FaultKind, number>;
  halt: string | null;
  reference: string;
  candidates: number;
  finals: number;
  /** The final verdicts in order, e.g. `c1 rejected, c2 promoted`. */
  verdicts: string;
  referenceVerdicts: string;
  kills: KillPhase[];
  lost: number;
  duplicated: number;
  orphaned: number;
  failures: string[];
  seconds: number;
}

// ---------------------------------------------------------------------------------------------------------
// The projects

const DEMO_FLAGS = ["run", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"];

// ---------------------------------------------------------------------------------------------------------
// Helpers

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function loopIdIn(repo: string, source: string): string | null {
  try {
    return recordedLoopId(repo, source);
  } catch {
    return null;
  }
}

/** Every process a scenario started, so that none outlives it, whatever failed. */
class Processes {
  private readonly children = new Set<ChildProcess>();
  readonly runnerPids: number[] = [];

  track<T extends ChildProcess>(child: T): T {
    this.children.add(child);
    if (child.pid !== undefined) this.runnerPids.push(child.pid);
    return child;
  }

  /** SIGKILL, then wait for the exit. */
  async kill(child: ChildProcess): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = exitOf(child);
    child.kill("SIGKILL");
    await exited;
  }

  async stopAll(): Promise<void> {
    for (const child of this.children) await this.kill(child);
    // A killed runner leaves its evaluation clones behind (the next start of a runner removes stale ones).
    for (const pid of this.runnerPids) rmSync(clonesOf(pid), { recursive: true, force: true });
  }
}

/** A coordinator that may be crashed and restarted on the same state directory and port. */
class RestartableCoordinator {
  private constructor(
    private current: TestCoordinator,
    readonly url: string,
  ) {}

  static async start(stateDir: string): Promise<RestartableCoordinator> {
    const started = await startCoordinator(stateDir, undefined, COORDINATOR_ENV);
    return new RestartableCoordinator(started, started.url);
  }

  get stateDir(): string {
    return this.current.stateDir;
  }

  async crashAndRestart(downMs: number): Promise<void> {
    await this.current.crash();
    await sleep(downMs);
    this.current = await startCoordinator(this.current.stateDir, this.current.port, COORDINATOR_ENV);
  }

  stop(): Promise<void> {
    return this.current.stop();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Running a loop under faults

interface LoopRun {
  repo: string;
  source: string;
  loopId: string;
  coordinator: RestartableCoordinator;
  kills: Record<"run" | "work" | "coordinator", number>;
  /** Where in the loop each kill fell: the process, and the type of the loop's last event then. */
  killPhases: KillPhase[];
  /** Invariants broken on the way (a corrupted bundle not refused). */
  failures: string[];
}

/** What was killed, and the loop's last event at that moment ("before creation" when there was no loop yet). */
interface KillPhase {
  what: "run" | "work" | "coordinator";
  after: string;
}

/** How far the loop is: its last event's seq and type, read from the coordinator itself (not through the proxy). */
async function progressOf(url: string, loopId: string | null, previous: Progress): Promise<Progress> {
  if (!loopId) return { seq: 0, type: "before creation" };
  try {
    const response = await api(`${url}/v1/loops/${loopId}/events`, { signal: AbortSignal.timeout(2_000) });
    if (!response.ok) return previous;
    const lines = (await response.text()).trim().split("\n");
    const last = JSON.parse(lines.at(-1) ?? "{}") as { seq?: number; type?: string };
    return { seq: last.seq ?? 0, type: last.type ?? "unknown" };
  } catch {
    // The coordinator is down (being restarted): the loop is where it was.
    return previous;
  }
}

interface Progress {
  seq: number;
  type: string;
}

/** When a process is next killed: once the loop's log reaches `atSeq` events, `delayMs` later. */
interface KillPoint {
  atSeq: number;
  delayMs: number;
  reachedAt: number | null;
}

/**
 * Overwrites the first candidate's git bundle before any runner has fetched it, then starts a `work`
 * runner: it must refuse the bundle (digest mismatch), fetch nothing, give the job back and go on (one
 * job's trouble never stops a runner). The runner's checkout is then given the commit the way its error
 * says (git fetch from the proposer), and the same runner evaluates it when the job comes back. Answers
 * the failures and the runner, which serves the rest of the loop.
 */
async function corruptBundleFirst(
  coordinator: RestartableCoordinator,
  loopId: string,
  proposer: string,
  checkout: string,
  startWork: () => ChildProcess & { output(): string },
  random: () => number,
  deadline: number,
): Promise<{ failures: string[]; runner: (ChildProcess & { output(): string }) | null }> {
  let bundle: { sha256: string } | undefined;
  let commit = "";
  while (!bundle) {
    if (Date.now() > deadline) return { failures: ["the first candidate was never proposed with a bundle"], runner: null };
    const events = await loopEvents(coordinator.url, loopId).catch(() => []);
    const first = events.find((event) => event.type === "candidate_proposed");
    if (first?.type === "candidate_proposed") {
      bundle = first.data.bundle;
      commit = first.data.commit;
      if (!bundle) return { failures: [`${first.data.candidate_id} was proposed without a bundle`], runner: null };
    } else await sleep(100);
  }
  corruptStoredArtifact(coordinator.stateDir, bundle.sha256, random());
  const refusing = startWork();
  const refusedDeadline = Date.now() + 60_000;
  const refused = () => /does not match its digest/.test(refusing.output());
  while (!refused() && refusing.exitCode === null && Date.now() < refusedDeadline) await sleep(100);
  const failures: string[] = [];
  if (!refused()) failures.push(`a work runner given a corrupted bundle did not name the digest mismatch:\n${refusing.output().slice(-1500)}`);
  else if (refusing.exitCode !== null)
    failures.push(`a work runner given a corrupted bundle stopped (${refusing.exitCode}) instead of going on:\n${refusing.output().slice(-1500)}`);
  // Nothing may have been fetched from the corrupted bundle.
  if (spawnSync("git", ["cat-file", "-e", `${commit}^{commit}`], { cwd: checkout, stdio: "ignore" }).status === 0)
    failures.push(`the corrupted bundle's commit ${commit} reached the runner's checkout`);
  gitIn(checkout, "fetch", "-q", proposer, "+refs/heads/*:refs/remotes/proposer/*", "+refs/loopwarden/*:refs/proposer/loopwarden/*");
  return { failures, runner: refusing.exitCode === null ? refusing : null };
}

/**
 * Runs one loop to its halt: `run` (and a `work` runner for the two-runner project) through `proxy`,
 * killing the processes the scenario names at random points and restarting them, up to MAX_KILLS each.
 */
async function runLoop(
  scenario: Scenario,
  dir: string,
  coordinator: RestartableCoordinator,
  proxy: FaultProxy | null,
  random: () => number,
  referenceEvents: number,
  processes: Processes,
): Promise<LoopRun> {
  const server = proxy?.url ?? coordinator.url;
  const twoRunner = scenario.project === "two-runner";
  const repo = twoRunner ? makeRepo(path.join(dir, "proposer"), twoRunnerProject()) : demoRepo(path.join(dir, "repo"));
  const source = twoRunner ? "loop.yaml" : "flags";
  // Not --json: the progress lines say what `run` was doing when something failed.
  const runArgs = ["--server", server, ...(twoRunner ? ["run"] : DEMO_FLAGS)];
  const checkout = twoRunner ? path.join(dir, "runner") : null;
  if (checkout) execFileSync("git", ["clone", "-q", repo, checkout]);
  const kills = { run: 0, work: 0, coordinator: 0 };
  const killPhases: KillPhase[] = [];
  const failures: string[] = [];
  const deadline = Date.now() + SCENARIO_TIMEOUT_MS;

  let run = processes.track(startCli(runArgs, { cwd: repo }));
  let work: (ChildProcess & { output(): string }) | null = null;
  const startWork = (loopId: string) =>
    processes.track(startCli(["--server", server, "work", "--labels", "pool=shared", "--loop", loopId], { cwd: checkout ?? repo }));
  // Kill points are drawn over the loop's progress, not over time, so that they spread over its phases (the
  // baseline before creation, proposals, evaluations, verdicts) rather than fall mostly on the baseline that
  // every restarted `run` measures again: a number of events, uniform between where the loop is and the
  // fault-free run's total less its last two (the halt's receipt), then a delay of up to 0.8 s.
  let progress: Progress = { seq: 0, type: "before creation" };
  const nextKill = (what: KillPhase["what"]): KillPoint | null =>
    scenario.kill.includes(what) && kills[what] < MAX_KILLS
      ? { atSeq: progress.seq + Math.floor(random() * (Math.max(0, referenceEvents - 2 - progress.seq) + 1)), delayMs: random() * 800, reachedAt: null }
      : null;
  const isDue = (point: KillPoint | null): boolean => {
    if (!point || progress.seq < point.atSeq) return false;
    point.reachedAt ??= Date.now();
    return Date.now() - point.reachedAt >= point.delayMs;
  };
  const due: Record<KillPhase["what"], KillPoint | null> = { run: nextKill("run"), work: null, coordinator: nextKill("coordinator") };

  for (;;) {
    if (Date.now() > deadline) throw new Error(`no halt after ${SCENARIO_TIMEOUT_MS / 1000} s (hang); run's output:\n${run.output().slice(-3000)}`);
    const loopId = loopIdIn(repo, source);
    if (twoRunner && loopId && !work) {
      if (scenario.corrupt === "bundle" && checkout) {
        const corrupted = await corruptBundleFirst(coordinator, loopId, repo, checkout, () => startWork(loopId), random, deadline);
        failures.push(...corrupted.failures);
        work = corrupted.runner;
      }
      work ??= startWork(loopId);
      due.work = nextKill("work");
    }
    if (run.exitCode !== null) {
      // Exit codes 10-50 are halts; anything else (1, 2) is a runtime error, which is a failure.
      if (run.exitCode < 10) {
        const log = await loopEvents(coordinator.url, loopId ?? "").catch(() => []);
        const summary = log.map((event) => `${event.seq}:${event.type}${"candidate_id" in event.data ? `:${String(event.data.candidate_id)}` : ""}`).join(" ");
        throw new Error(
          `run exited ${run.exitCode} without a halt:\n${run.output().slice(-3000)}\nwork:\n${work?.output().slice(-2000) ?? "(none)"}\nevents: ${summary}`,
        );
      }
      break;
    }
    if (due.run || due.work || due.coordinator) progress = await progressOf(coordinator.url, loopId, progress);
    const after = progress.type;
    if (isDue(due.run)) {
      await processes.kill(run);
      // It may have exited by itself just before: the top of the loop then takes its exit code.
      if (run.signalCode !== "SIGKILL") continue;
      kills.run++;
      killPhases.push({ what: "run", after });
      run = processes.track(startCli(runArgs, { cwd: repo }));
      due.run = nextKill("run");
    } else if (work && isDue(due.work)) {
      if (work.exitCode === null) {
        await processes.kill(work);
        kills.work++;
        killPhases.push({ what: "work", after });
        // Restarted after a moment: its lease is re-queued when it expires, or the restarted runner reports it.
        await sleep(random() * 1_000);
        work = startWork(loopId ?? "");
      }
      due.work = nextKill("work");
    } else if (isDue(due.coordinator)) {
      await coordinator.crashAndRestart(random() * 1_000);
      kills.coordinator++;
      killPhases.push({ what: "coordinator", after });
      due.coordinator = nextKill("coordinator");
    } else {
      await sleep(100);
    }
  }
  if (work) {
    // With --loop, the work runner stops once its loop has halted.
    const workDeadline = Date.now() + 60_000;
    while (work.exitCode === null && Date.now() < workDeadline) await sleep(100);
    if (work.exitCode !== 0) throw new Error(`work did not stop with 0 after the halt (${work.exitCode}):\n${work.output().slice(-3000)}`);
  }
  const loopId = loopIdIn(repo, source);
  if (!loopId) throw new Error(`no loop recorded in ${repo}`);
  return { repo, source, loopId, coordinator, kills, killPhases, failures };
}

/** The invariants every scenario must end with; answers the failures (empty when all hold) and the counts. */
async function checkLoop(
  loop: LoopRun,
  referenceHalt: string,
): Promise<Pick<Outcome, "halt" | "candidates" | "finals" | "verdicts" | "lost" | "duplicated" | "orphaned" | "failures">> {
  const failures: string[] = [];
  const url = loop.coordinator.url;
  const events = await loopEvents(url, loop.loopId);
  const halted = events.find((event) => event.type === "halted");
  const halt = halted?.type === "halted" ? halted.data.halt_reason : null;
  if (halt !== referenceHalt) failures.push(`halt ${halt} ≠ reference ${referenceHalt}`);
  const chain = verifyChain(events as unknown as Record<string, unknown>[]);
  if (!chain.ok) failures.push(`chain does not verify: ${JSON.stringify(chain).slice(0, 300)}`);
  const rederived = rederive(events);
  if (!rederived.ok) failures.push(`rederive: ${JSON.stringify(rederived).slice(0, 300)}`);

  const proposed = events.flatMap((event) => (event.type === "candidate_proposed" ? [event.data] : []));
  const ids = proposed.map((candidate) => candidate.candidate_id);
  const finals = events.flatMap((event) => (event.type === "verdict" && event.data.decision !== "need_samples" ? [event.data.candidate_id] : []));
  const duplicatedCandidates = ids.length - new Set(ids).size;
  const duplicatedVerdicts = finals.length - new Set(finals).size;
  const unjudged = ids.filter((id) => !finals.includes(id)).length;
  if (duplicatedCandidates > 0) failures.push(`${duplicatedCandidates} candidate id(s) proposed twice`);
  if (duplicatedVerdicts > 0) failures.push(`${duplicatedVerdicts} candidate(s) with two final verdicts: ${finals.join(",")}`);
  if (unjudged > 0) failures.push(`${unjudged} candidate(s) never judged`);

  // Every promoted commit is kept in git: on the loop's branch in the proposer's repository.
  const branch = `loopwarden/${loop.loopId}`;
  let lostCommits = 0;
  for (const event of events) {
    if (event.type !== "verdict" || event.data.decision !== "promoted") continue;
    const candidateId = event.data.candidate_id;
    const commit = proposed.find((candidate) => candidate.candidate_id === candidateId)?.commit;
    try {
      gitIn(loop.repo, "merge-base", "--is-ancestor", commit ?? "none", branch);
    } catch {
      lostCommits++;
      failures.push(`promoted ${candidateId} (${commit}) is not on ${branch}`);
    }
  }

  // Exactly one loop on this scenario's coordinator, and it is halted (the list is a projection the alarm writes).
  let orphaned = 0;
  for (let attempt = 0; ; attempt++) {
    const list = LoopList.parse(await (await api(`${url}/v1/loops?limit=100`)).json());
    const others = list.loops.filter((entry) => entry.loop_id !== loop.loopId);
    const mine = list.loops.find((entry) => entry.loop_id === loop.loopId);
    if (others.length === 0 && mine?.status === "halted") break;
    if (attempt >= 50) {
      orphaned = others.length;
      failures.push(`loops listed: ${JSON.stringify(list.loops.map((entry) => [entry.loop_id, entry.status]))}, expected only ${loop.loopId}, halted`);
      break;
    }
    await sleep(200);
  }

  // An interim receipt over the whole log verifies.
  const receipt = await runCli(["--json", "--server", url, "receipt", loop.loopId], { cwd: loop.repo });
  if (receipt.code !== 0) failures.push(`receipt exited ${receipt.code}: ${receipt.stderr.slice(-500)}`);
  else {
    const receiptUrl = (JSON.parse(receipt.stdout) as { receipt_url: string }).receipt_url;
    const verified = await runCli(["verify", receiptUrl], { cwd: loop.repo });
    if (verified.code !== 0) failures.push(`verify ${receiptUrl} exited ${verified.code}: ${(verified.stdout + verified.stderr).slice(-500)}`);
  }
  return {
    halt,
    candidates: ids.length,
    finals: finals.length,
    verdicts: events
      .flatMap((event) => (event.type === "verdict" && event.data.decision !== "need_samples" ? [`${event.data.candidate_id} ${event.data.decision}`] : []))
      .join(", "),
    lost: unjudged + lostCommits,
    duplicated: duplicatedCandidates + duplicatedVerdicts,
    orphaned,
    failures,
  };
}

/**
 * Corrupts one stored gate log of the loop (seeded choice) and checks that it is refused where the runner
 * checks digests: `artifacts --download` and `logs`. The loop's log and receipt are not artifacts and still
 * verify (checked after, by checkLoop).
 */
async function corruptAndCheck(loop: LoopRun, random: () => number): Promise<string[]> {
  const failures: string[] = [];
  const url = loop.coordinator.url;
  const events = await loopEvents(url, loop.loopId);
  // The gate logs of each candidate's last report (the one `artifacts` and `logs` show).
  const lastReports = new Map(
    events.flatMap((event) => (event.type === "observation_reported" ? [[event.data.candidate_id, event.data.observation] as const] : [])),
  );
  const logs = [...lastReports].flatMap(([candidate, observation]) =>
    observation.gates.flatMap((gate) => (gate.log ? [{ candidate, gate: gate.name, log: gate.log }] : [])),
  );
  const chosen = logs[Math.floor(random() * logs.length)];
  if (!chosen) return ["no stored gate log to corrupt"];
  corruptStoredArtifact(loop.coordinator.stateDir, chosen.log.sha256, random());

  const download = path.join(path.dirname(loop.repo), "download");
  const fetched = await runCli(["--server", url, "artifacts", chosen.candidate, "--download", download], { cwd: loop.repo });
  if (fetched.code === 0 || !/does not match its digest/.test(fetched.stderr))
    failures.push(`artifacts --download of corrupted ${chosen.log.name} (${chosen.candidate}) exited ${fetched.code}: ${fetched.stderr.slice(-300)}`);
  const shown = await runCli(["--server", url, "logs", chosen.candidate, "--gate", chosen.gate], { cwd: loop.repo });
  if (shown.code === 0 || !/does not match its digest/.test(shown.stderr))
    failures.push(
      `logs of corrupted ${chosen.log.name} (${chosen.candidate}) exited ${shown.code} without naming the digest mismatch: ${shown.stderr.slice(-300)}`,
    );
  return failures;
}

// ---------------------------------------------------------------------------------------------------------
// The plan, the references, the run

/** The scenarios, in order. Rates are the proxy's per mutating request; every scenario goes through the proxy. */
function plan(): (Scenario & { seed: number })[] {
  const scenarios: Scenario[] = [];
  const add = (count: number, base: Omit<Scenario, "name">, name: string) => {
    for (let index = 1; index <= count; index++) scenarios.push({ ...base, name: `${name}-${index}` });
  };
  add(3, { project: "demo", drop: 0.3, duplicate: 0.3, kill: [], corrupt: null }, "demo-wire");
  add(4, { project: "demo", drop: 0.1, duplicate: 0.1, kill: ["run"], corrupt: null }, "demo-kill-run");
  add(2, { project: "demo", drop: 0.1, duplicate: 0.1, kill: ["coordinator"], corrupt: null }, "demo-kill-coordinator");
  add(2, { project: "demo", drop: 0.1, duplicate: 0.1, kill: ["run", "coordinator"], corrupt: null }, "demo-kill-both");
  add(2, { project: "demo", drop: 0.2, duplicate: 0.2, kill: [], corrupt: "log" }, "demo-corrupt");
  add(1, { project: "two-runner", drop: 0.25, duplicate: 0.25, kill: [], corrupt: null }, "two-wire");
  add(2, { project: "two-runner", drop: 0.1, duplicate: 0.1, kill: ["run"], corrupt: null }, "two-kill-run");
  add(2, { project: "two-runner", drop: 0.1, duplicate: 0.1, kill: ["work"], corrupt: null }, "two-kill-work");
  add(2, { project: "two-runner", drop: 0.1, duplicate: 0.1, kill: ["coordinator"], corrupt: null }, "two-kill-coordinator");
  add(2, { project: "two-runner", drop: 0.1, duplicate: 0.1, kill: ["run", "work", "coordinator"], corrupt: null }, "two-kill-all");
  add(1, { project: "two-runner", drop: 0.1, duplicate: 0.1, kill: [], corrupt: "log" }, "two-corrupt-log");
  add(1, { project: "two-runner", drop: 0.1, duplicate: 0.1, kill: [], corrupt: "bundle" }, "two-corrupt-bundle");
  // Each scenario's seed is fixed by its place in the whole plan, so a filtered run replays the same faults.
  return scenarios.map((scenario, index) => ({ ...scenario, seed: SEED + index })).filter((scenario) => ONLY === undefined || scenario.name.startsWith(ONLY));
}

/** A fault-free run of a project. */
interface Reference {
  halt: string;
  ms: number;
  /** How many events its log has: the range kill points are drawn from. */
  events: number;
  verdicts: string;
}

const emptyFaults = (): Record<FaultKind, number> => ({
  run_sigkill: 0,
  work_sigkill: 0,
  coordinator_sigkill: 0,
  dropped_answer: 0,
  duplicated_request: 0,
  corrupted_artifact: 0,
});

/** The fault-free run of a project: its halt reason and how long it took (the window kills are drawn from). */
async function referenceOf(project: Project, dir: string): Promise<Reference> {
  const coordinator = await RestartableCoordinator.start(path.join(dir, "state"));
  const processes = new Processes();
  try {
    const started = Date.now();
    const loop = await runLoop(
      { name: `reference-${project}`, project, drop: 0, duplicate: 0, kill: [], corrupt: null },
      dir,
      coordinator,
      null,
      () => 0.5,
      0,
      processes,
    );
    const ms = Date.now() - started;
    const events = await loopEvents(coordinator.url, loop.loopId);
    const halted = events.find((event) => event.type === "halted");
    if (halted?.type !== "halted") throw new Error(`the reference ${project} loop did not halt`);
    // The reference itself must satisfy every invariant the faulty runs are held to.
    const checked = await checkLoop(loop, halted.data.halt_reason);
    if (checked.failures.length > 0) throw new Error(`the fault-free ${project} run fails: ${checked.failures.join("; ")}`);
    return { halt: halted.data.halt_reason, ms, events: events.length, verdicts: checked.verdicts };
  } finally {
    await processes.stopAll();
    await coordinator.stop();
  }
}

async function runScenario(scenario: Scenario, seed: number, reference: Reference, tmp: string): Promise<Outcome> {
  const random = mulberry32(seed);
  const dir = path.join(tmp, scenario.name);
  const started = Date.now();
  const faults = emptyFaults();
  const outcome: Outcome = {
    scenario,
    seed,
    faults,
    halt: null,
    reference: reference.halt,
    candidates: 0,
    finals: 0,
    verdicts: "",
    referenceVerdicts: reference.verdicts,
    kills: [],
    lost: 0,
    duplicated: 0,
    orphaned: 0,
    failures: [],
    seconds: 0,
  };
  const processes = new Processes();
  let coordinator: RestartableCoordinator | null = null;
  let proxy: FaultProxy | null = null;
  try {
    coordinator = await RestartableCoordinator.start(path.join(dir, "state"));
    proxy = await startFaultProxy(coordinator.url, { seed, drop: scenario.drop, duplicate: scenario.duplicate });
    const loop = await runLoop(scenario, dir, coordinator, proxy, random, reference.events, processes);
    faults.run_sigkill = loop.kills.run;
    faults.work_sigkill = loop.kills.work;
    faults.coordinator_sigkill = loop.kills.coordinator;
    outcome.kills = loop.killPhases;
    outcome.failures.push(...loop.failures);
    if (scenario.corrupt === "bundle") faults.corrupted_artifact = 1;
    if (scenario.corrupt === "log") {
      outcome.failures.push(...(await corruptAndCheck(loop, random)));
      faults.corrupted_artifact = 1;
    }
    const checked = await checkLoop(loop, reference.halt);
    Object.assign(outcome, checked, { failures: [...outcome.failures, ...checked.failures] });
  } catch (error) {
    outcome.failures.push(error instanceof Error ? error.message : String(error));
  } finally {
    if (proxy) {
      faults.dropped_answer = proxy.counts.dropped;
      faults.duplicated_request = proxy.counts.duplicated;
      await proxy.stop();
    }
    await processes.stopAll();
    await coordinator?.stop();
    outcome.seconds = (Date.now() - started) / 1000;
  }
  return outcome;
}

const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};

const scenarios = plan();
console.log(`faults: seed ${SEED} (LOOPWARDEN_TEST_SEED=${SEED} replays the fault plan), ${scenarios.length} scenario(s)`);
const tmp = tempDir("faults");
const startedAt = Date.now();
const outcomes: Outcome[] = [];
const references = new Map<Project, Reference>();
try {
  for (const project of new Set(scenarios.map((scenario) => scenario.project))) {
    const reference = await referenceOf(project, path.join(tmp.dir, `reference-${project}`));
    references.set(project, reference);
    console.log(`reference ${project}: ${reference.halt} in ${(reference.ms / 1000).toFixed(1)} s; verdicts ${reference.verdicts}`);
  }
  for (const scenario of scenarios) {
    const reference = references.get(scenario.project);
    if (!reference) throw new Error(`no reference for ${scenario.project}`);
    const outcome = await runScenario(scenario, scenario.seed, reference, tmp.dir);
    outcomes.push(outcome);
    const injected = FAULT_KINDS.filter((kind) => outcome.faults[kind] > 0).map((kind) => `${kind} ${outcome.faults[kind]}`);
    console.log(
      `${outcome.failures.length === 0 ? "ok  " : "FAIL"} ${scenario.name} (seed ${outcome.seed}, ${outcome.seconds.toFixed(1)} s): ${injected.join(", ") || "no fault"}; halt ${outcome.halt}; verdicts ${outcome.verdicts}`,
    );
    if (outcome.failures.length > 0) console.log(`     replay: LOOPWARDEN_TEST_SEED=${SEED} LOOPWARDEN_FAULTS_ONLY=${scenario.name} npm run test:faults`);
    for (const failure of outcome.failures) console.log(`     ${failure.split("\n").join("\n     ")}`);
  }
} finally {
  tmp.cleanup();
}
const seconds = (Date.now() - startedAt) / 1000;

const total = (kind: FaultKind, of = outcomes) => of.reduce((sum, outcome) => sum + outcome.faults[kind], 0);
const allFaults = FAULT_KINDS.reduce((sum, kind) => sum + total(kind), 0);
const failed = outcomes.filter((outcome) => outcome.failures.length > 0);
const sum = (field: "lost" | "duplicated" | "orphaned" | "candidates" | "finals", of = outcomes) => of.reduce((acc, outcome) => acc + outcome[field], 0);
const passed = failed.length === 0 && allFaults >= 100 && sum("lost") + sum("duplicated") + sum("orphaned") === 0;

console.log();
say("# Fault injection");
say();
say(
  `\`npm run test:faults\` (\`tsx bench/faults.ts\`), ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? "unknown"}), ${os.platform()}. Seed ${SEED} (\`LOOPWARDEN_TEST_SEED=${SEED} npm run test:faults\` replays the fault plan; the exact interleaving with the processes' own timing does not replay). ${outcomes.length} scenarios in ${seconds.toFixed(0)} s. The CLI is the one compiled from this checkout (dist/cli, \`npm run build:cli\`), as an installed package runs it.`,
);
say();
say(
  `**Result: ${passed ? "pass" : "FAIL"}.** Goal: at least 100 injected faults, and zero lost, duplicated or orphaned loops, candidates or verdicts. Figure: **${allFaults} faults**; lost ${sum("lost")}, duplicated ${sum("duplicated")}, orphaned ${sum("orphaned")}; ${failed.length} of ${outcomes.length} scenarios failed an invariant.`,
);
say();
say("Fault-free references (each on its own coordinator, no proxy):");
say();
for (const [project, reference] of references)
  say(`- ${project}: halts \`${reference.halt}\` in ${(reference.ms / 1000).toFixed(1)} s; final verdicts ${reference.verdicts}`);
say();
say("## Faults by kind");
say();
say("| fault | injected | scenarios with it | halts equal to the reference | lost | duplicated | orphaned |");
say("|---|---:|---:|---:|---:|---:|---:|");
for (const kind of FAULT_KINDS) {
  const withIt = outcomes.filter((outcome) => outcome.faults[kind] > 0);
  const same = withIt.filter((outcome) => outcome.halt === outcome.reference).length;
  say(
    `| ${kind.replace(/_/g, " ")} | ${total(kind)} | ${withIt.length} | ${same} / ${withIt.length} | ${sum("lost", withIt)} | ${sum("duplicated", withIt)} | ${sum("orphaned", withIt)} |`,
  );
}
say(
  `| **total** | **${allFaults}** (goal ≥ 100) | ${outcomes.length} | ${outcomes.filter((o) => o.halt === o.reference).length} / ${outcomes.length} | ${sum("lost")} (goal 0) | ${sum("duplicated")} (goal 0) | ${sum("orphaned")} (goal 0) |`,
);
say();
say("## Where the kills fell");
say();
say(
  "Each SIGKILL by the type of the loop's last event at that moment, as last read from the coordinator before the kill (`before creation`: no loop recorded yet by `run`, e.g. during the baseline; `unknown`: the coordinator did not answer).",
);
say();
const kills = outcomes.flatMap((outcome) => outcome.kills);
const phases = [...new Set(kills.map((kill) => kill.after))].sort();
say("| last event before the kill | run | work | coordinator |");
say("|---|---:|---:|---:|");
for (const phase of phases) {
  const count = (what: KillPhase["what"]) => kills.filter((kill) => kill.after === phase && kill.what === what).length;
  say(`| ${phase} | ${count("run")} | ${count("work")} | ${count("coordinator")} |`);
}
say();
say("## Scenarios");
say();
say(
  "| scenario | project | seed | proxy drop / duplicate | killed | faults | halt (reference) | final verdicts | same verdicts as the reference | time | result |",
);
say("|---|---|---:|---|---|---:|---|---|---|---:|---|");
for (const outcome of outcomes) {
  const { scenario } = outcome;
  const count = FAULT_KINDS.reduce((acc, kind) => acc + outcome.faults[kind], 0);
  const killed = [
    ...(["run", "work", "coordinator"] as const).flatMap((what) => {
      const n = outcome.faults[`${what}_sigkill`];
      return n > 0 ? [`${what} ×${n}`] : [];
    }),
    ...(outcome.faults.corrupted_artifact > 0 ? ["artifact corrupted"] : []),
  ];
  say(
    `| ${scenario.name} | ${scenario.project} | ${outcome.seed} | ${scenario.drop} / ${scenario.duplicate} | ${killed.join(", ") || "—"} | ${count} | \`${outcome.halt}\` (\`${outcome.reference}\`) | ${outcome.verdicts} | ${outcome.verdicts === outcome.referenceVerdicts ? "yes" : "no"} | ${outcome.seconds.toFixed(1)} s | ${outcome.failures.length === 0 ? "ok" : `FAIL: ${outcome.failures.join("; ").replace(/\|/g, "\\|").replace(/\n/g, " ").slice(0, 300)}`} |`,
  );
}
say();
say("## What each scenario asserts");
say();
say(
  "The halt reason equals the fault-free run's; the event chain verifies (`verifyChain`); every verdict re-derives (`rederive`); candidate ids are unique and each proposed candidate has exactly one final verdict (none lost, none judged twice); every promoted candidate's commit is reachable from the loop's branch `loopwarden/<loop-id>` in the proposer's repository; the scenario's coordinator lists exactly one loop and it is halted (no loop orphaned by a lost creation answer or a restart); `loopwarden receipt` then `loopwarden verify <url>` exits 0. A corrupted artifact (one byte changed in the coordinator's R2 blob, same length, so only a digest check can tell) must be refused where the runner promises to check digests: a stored gate log, overwritten after the halt, makes `loopwarden artifacts C --download DIR` and `loopwarden logs C --gate G` fail naming the digest mismatch (`*-corrupt-log`); the first candidate's git bundle, overwritten before any runner fetched it, makes the `work` runner that needs it name the mismatch, with nothing fetched into its checkout, and go on (the job given back: one job's trouble never stops a runner); its checkout is then given the commit the way the error says (`git fetch` from the proposer's repository), the same runner evaluates the candidate when the job comes back, and the loop must still end as the reference does (`two-corrupt-bundle`).",
);
say();
say(
  "Faults are counted as injected: each SIGKILL of a `run`, a `work` runner or the coordinator (its whole process group, workerd included; restarted on the same state directory and port after up to 1 s), each answer the proxy dropped after the coordinator acted, each request it sent twice, each corrupted artifact. Kill points are drawn over the loop's progress: a number of events, uniform between where the loop is and the fault-free run's total, then a delay of up to 0.8 s (so kills spread over the baseline, proposals, evaluations and verdicts instead of falling mostly on the baseline that each restarted `run` measures again); at most 3 per process per scenario; a killed `run` is restarted with the same command in the same repository, a killed `work` runner with the same command in its checkout. Leases live 4 s (`LOOPWARDEN_LEASE_TTL`), so a lease whose grant was lost, or whose runner was killed, is re-queued within the scenario.",
);
say();
say("## Seen once, not reproduced");
say();
say(
  "In one earlier full run (seed 525405, scenario `two-kill-run-2`, before the kill plan changed; no kill had happened yet, the proxy had dropped 2 answers and duplicated 4 requests) the proposing `run` exited 1 instead of 10: `the coordinator refused: the loop has halted (success_condition_met) (loop_halted)`. The loop itself had halted as the reference did, and the work runner stopped with 0. The engine refuses with `loop_halted` only a proposal with a new idempotency key, or a report, once the loop has halted; `run` in a two-runner loop never holds a lease, so it proposed a new candidate after the halt. Not reproduced in 44 further two-runner scenarios with the same fault rates (that run printed only `run`'s JSON line; `run` now runs without `--json`, so a recurrence reports its progress lines, the work runner's output and the loop's events).",
);
say();
say("## Not covered");
say();
say(
  "- Kill points are random (an event count and a delay), not chosen at specific code points (e.g. between a git commit and the proposal, or inside the coordinator's transaction): the seed replays the plan, not the interleaving, and narrow windows are hit by chance only (the table above shows where the kills fell).\n" +
    "- The proxy drops answers after the coordinator acted and duplicates whole requests; it does not delay, reorder, truncate bodies, or drop requests before they arrive (a connection failure the runner retries the same way).\n" +
    "- Only the coordinator's local mode (workerd through Miniflare, R2 on disk) is exercised, not Cloudflare's network or S3 mode; D1 and Durable Object storage files are never corrupted, only R2 blobs.\n" +
    "- A corrupted git bundle is detected, but it is never repaired: the proposer's upload intent for the same digest is answered `exists` (the coordinator compares sizes, not bytes), so no runner that lacks the commit can evaluate that candidate until someone fetches the commit by hand; the loop waits meanwhile (here the suite does the fetch). Corrupted R2 bytes are also served by the coordinator with status 200 (it checks sizes on download, not digests); detection is the runner's.\n" +
    "- Processes a killed runner had started (its agent or gate, in their own process groups) are not killed by the suite; they are short and exit by themselves.",
);
if (ONLY === undefined) {
  writeFileSync(path.join(ROOT, "bench", "results", "faults.md"), `${lines.join("\n")}\n`);
  console.log("\nwritten to bench/results/faults.md");
}
process.exitCode = passed ? 0 : 1;
