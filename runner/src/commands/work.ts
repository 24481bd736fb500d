import { useCommandHelper } from "../process/spawner.js";
import { randomBytes } from "node:crypto";
import os from "node:os";
import type { Lease, LoopSummary } from "#shared/wire/api.js";
import type { Labels } from "#shared/wire/contract.js";
import { CoordinatorError, type Client } from "../coordinator/client.js";
import { removeStaleClones } from "../evaluation/clone.js";
import { preflightZones } from "../zones/isolation.js";
import { connect, type ServerOptions } from "../coordinator/connect.js";
import { contractDifferences, type LoadedContract } from "../contract/contract-file.js";
import { resolveContract, type ContractOptions } from "../contract/contract-resolution.js";
import { JobRefused, UserError } from "../errors.js";
import { excludeStateDir, repoRoot } from "../process/git.js";
import { parseLabels } from "../contract/labels.js";
import { evaluateLease, LONG_POLL_MS, verdictLine, type JobContext } from "../loop/lease-job.js";
import { emitResult, progress, type OutputMode } from "../output.js";
import { drainOnFirstSignal } from "../process/shutdown.js";
import { pause } from "../process/pause.js";
import { ensureCandidateCommit, ensureCommits } from "../loop/candidate-bundles.js";
import { confirmAgainstT0 } from "../loop/confirm-job.js";
import { measureLeasedBaseline } from "../loop/baseline.js";
import { LoopDirectory, namedLoop, RELIST_MS } from "../loop/loop-directory.js";
import { BASELINE_ID } from "#shared/engine/index.js";
import { failureLine } from "#shared/explain/gate-failure.js";
import { foldLoop } from "../loop/event-log.js";

// `loopwarden work` (DESIGN §1.2, §13): a runner for shared loops. It leases evaluation jobs from the
// loops it may see whose pinned contract is this checkout's (invariant 4: it runs only what its own
// checkout pins), evaluates each in a fresh clone of the candidate commit, reports, and goes on.
// Idle, it waits in long-polls (25 s each), never a poll loop. The first SIGINT/SIGTERM lets the jobs in
// hand finish and then exits; a second stops them at once and gives their leases back, so their jobs
// are queued again at once rather than when the leases run out.
//
// One job's failure is that job's, never the runner's: a job whose loop halted meanwhile (its report or
// heartbeat answered 409 loop_halted) just ends; a job this checkout can never run (`JobRefused`: a
// contract hash not its own, a commit it lacks with no bundle) is given back and its loop is no longer
// served by this process — as a CI runner refuses a job it cannot take and serves others, rather than
// take the same job again and again — and with `--loop` the runner stops with that error; any other
// failure (a bundle that does not match, git, storage, a refusal of the report) is printed with the
// job's label, the lease is given back, and the slot goes on after a pause that grows while jobs keep
// failing (1 s, doubling up to a minute). Only what is not one job's — the coordinator unreachable for
// a minute, a token refused — ends the runner, once the other slots have finished their jobs in hand.

/** Options of `loopwarden work`. */
export interface WorkOptions extends ContractOptions, ServerOptions, OutputMode {
  cwd: string;
  labels?: string | undefined;
  loop?: string | undefined;
  concurrency?: number | undefined;
}

/** The longest pause after failed jobs (1 s after the first, doubling while they keep failing). */
const MAX_FAILURE_PAUSE_MS = 60_000;

/** How long a runner stopped at once waits for the coordinator to take each lease back. */
const RELEASE_ON_STOP_MS = 5_000;

/**
 * The named loop, checked before any job is taken: it must exist for this token and pin this checkout's
 * contract. (A loop awaiting its baseline has no log to read the contract from yet: its job names the
 * contract's hash, which `refuseForeignContract` checks.)
 */
async function checkNamedLoop(client: Client, loopId: string, loaded: LoadedContract): Promise<void> {
  const loop = await namedLoop(client, loopId);
  if (loop === "awaiting_baseline" || loop.contract_hash === loaded.hash) return;
  const differences = contractDifferences(await client.pinnedContract(loopId), loaded.contract);
  throw new UserError(
    `loop ${loopId} pins another contract than ${loaded.source} in this checkout (${differences.slice(0, 5).join("; ")}); a runner evaluates only the contract its own checkout pins — check out the loop's contract, or give work the same contract flags as the run`,
  );
}

/** A job in hand: its lease, the label its lines carry, and what stops it at once. */
interface JobInHand {
  lease: Lease;
  label: string;
  cancel: AbortController;
}

/** How a job ended, for the slot: `failed` (on this runner's side) pauses the slot before its next lease. */
type JobEnd = "done" | "failed";

/**
 * `loopwarden work`: leases, evaluates and reports jobs until stopped (or, with `--loop`, until that
 * loop halts). `--concurrency N` runs N jobs at once, each under a runner id of its own.
 */
export async function workCommand(options: WorkOptions): Promise<number> {
  // Many git commands follow: run from a small helper process (spawner.ts).
  useCommandHelper();
  const mode: OutputMode = options;
  const repo = await repoRoot(options.cwd);
  await excludeStateDir(repo);
  await removeStaleClones();
  const loaded = await resolveContract(repo, options);
  // Refused here, not job by job, where the exec zone cannot be built (DESIGN §6.7).
  const unconfined = await preflightZones(loaded.contract);
  if (unconfined) progress(mode, unconfined);
  const labels = parseLabels(options.labels);
  const concurrency = options.concurrency ?? 1;
  const connection = await connect(options, mode);
  const client = connection.client;
  const stopping = new AbortController();
  const jobs = new Map<string, JobInHand>();
  let interrupted = false;
  /** What ends the runner once every slot has stopped: an error that is not one job's. */
  let fatal: unknown = null;
  const counts = { jobs: 0, baselines: 0, promoted: 0, rejected: 0, lost: 0, halted: 0, failed: 0 };

  /** Gives a lease back so its job is queued at once; a refusal (the lease was lost anyway) is only said. */
  const release = async (job: Pick<JobInHand, "lease" | "label">, signal?: AbortSignal): Promise<void> => {
    try {
      await client.releaseLease(job.lease.lease_id, { fencing_token: job.lease.fencing_token }, signal);
      progress(mode, `${job.label} lease given back: ${job.lease.job.candidate_id} is queued again`);
    } catch (error) {
      progress(mode, `${job.label} could not give the lease back (${(error as Error).message}); the coordinator queues the job again when the lease runs out`);
    }
  };
  // The second signal: every job in hand is stopped (its process groups killed, nothing reported after)
  // and its lease given back while the coordinator still runs; then the other cleanups, and exit.
  let stoppedNow: Promise<void> | null = null;
  const stopNow = (): Promise<void> =>
    (stoppedNow ??= (async () => {
      interrupted = true;
      if (!stopping.signal.aborted) stopping.abort(new Error("stopping"));
      const inHand = [...jobs.values()];
      for (const job of inHand) job.cancel.abort(new Error("stopped at once"));
      await Promise.all(inHand.map((job) => release(job, AbortSignal.timeout(RELEASE_ON_STOP_MS))));
    })());
  const removeDrain = drainOnFirstSignal(() => stopping.abort(new Error("stopping")), stopNow);
  try {
    if (options.loop) await checkNamedLoop(client, options.loop, loaded);
    const directory = new LoopDirectory(client, loaded.hash, options.loop);
    const host = os
      .hostname()
      .replace(/[^A-Za-z0-9_.:-]/g, "-")
      .slice(0, 60);
    const instance = randomBytes(3).toString("hex");
    const describe = Object.entries(labels)
      .map(([key, value]) => `${key}=${value}`)
      .join(",");
    progress(
      mode,
      `working for ${options.loop ? `loop ${options.loop}` : `every running loop pinned to ${loaded.source} (${loaded.hash.slice(0, 12)})`} at ${connection.url}` +
        `${describe ? ` with labels ${describe}` : ""}, ${concurrency} job(s) at a time; Ctrl-C finishes the jobs in hand and stops`,
    );
    const contexts = new Map<string, JobContext>();
    const contextOf = (loopId: string): JobContext => {
      let context = contexts.get(loopId);
      if (!context) {
        context = { client, loop: { loop_id: loopId }, repo, loaded, mode };
        contexts.set(loopId, context);
      }
      return context;
    };
    let saidHalted = false;

    /** One leased job, start to end: whatever it throws is this job's, never the runner's. */
    const runJob = async (runnerId: string, lease: Lease): Promise<JobEnd> => {
      const job: JobInHand = { lease, label: `[${runnerId}] ${lease.job.candidate_id}`, cancel: new AbortController() };
      const { label } = job;
      const note = (text: string) => progress(mode, `${label} ${text}`);
      const context = contextOf(lease.loop_id);
      /** Whether the lease is still this runner's to give back: not once reported, lost or re-queued. */
      let holding = true;
      jobs.set(lease.lease_id, job);
      try {
        await ensureCandidateCommit(context, lease, note);
        job.cancel.signal.throwIfAborted();
        if (lease.job.kind === "baseline") {
          const loop = await measureLeasedBaseline(context, lease, label, job.cancel.signal);
          holding = false;
          jobs.delete(lease.lease_id);
          counts.jobs++;
          // Running now (or halted at once, when t0 already meets the goal): its jobs are listed anew.
          directory.stale();
          if (!loop) {
            counts.lost++;
            return "done";
          }
          counts.baselines++;
          progress(mode, `${label} baseline recorded: loop ${loop.loop_id} is created from it (${loop.t0.failing} failing at t0, ${loop.status})`);
          return "done";
        }
        const result = await evaluateLease(context, lease, label, job.cancel.signal);
        holding = false;
        jobs.delete(lease.lease_id);
        counts.jobs++;
        if (!result) {
          counts.lost++;
          return "done";
        }
        if (result.verdict.decision === "promoted") counts.promoted++;
        else counts.rejected++;
        progress(mode, `${verdictLine(`${lease.loop_id}`, result.verdict)}`);
        if (result.verdict.decision === "rejected") {
          const why = failureLine((await foldLoop(context)).candidates[result.verdict.candidate_id]);
          if (why) progress(mode, `${label}   ${why}`);
        }
        if (result.loop.status === "halted") {
          directory.stale();
          // The runner whose report halted an optimize loop measures t0 against the final best (DESIGN
          // §6.3): it has the contract's labels, and exactly one runner reports a halt.
          await confirmHalted({ ...context, labels }, result.loop, note);
        }
        return "done";
      } catch (error) {
        jobs.delete(lease.lease_id);
        // Stopped at once: `stopNow` gives the lease back, and the process exits.
        if (interrupted) return "done";
        if (error instanceof CoordinatorError && error.status === 409 && error.code === "loop_halted") {
          // Another runner's report halted the loop first: this job can never be judged. Nothing to give back.
          if (holding) {
            counts.jobs++;
            counts.halted++;
          }
          note(`not judged: loop ${lease.loop_id} halted meanwhile (${error.message}); the job ends`);
          directory.stale();
          return "done";
        }
        if (error instanceof JobRefused) {
          note(`refused: ${error.message}`);
          if (holding) await release(job);
          directory.refuse(lease.loop_id, error.message);
          if (options.loop) {
            fatal ??= error;
            if (!stopping.signal.aborted) stopping.abort(new Error("stopping"));
          } else note(`this runner serves loop ${lease.loop_id} no more (start work again once this checkout can run its jobs)`);
          return "done";
        }
        const code = error instanceof CoordinatorError ? ` (${error.code})` : "";
        note(`failed: ${(error as Error).message}${code}`);
        if (!holding) return "done";
        counts.jobs++;
        counts.failed++;
        await release(job);
        return "failed";
      }
    };

    const slot = async (index: number) => {
      const runnerId = `${host}-${instance}-${index + 1}`;
      let failures = 0;
      try {
        while (!stopping.signal.aborted) {
          const loopId = await directory.next();
          if (!loopId) {
            if (options.loop) {
              // The named loop halted (or this checkout cannot run it): nothing more to do.
              const halted = directory.halted;
              if (halted?.halt && !saidHalted) {
                saidHalted = true;
                progress(mode, `loop ${halted.loop_id} halted (${halted.halt.halt_reason}): nothing more to evaluate`);
              }
              return;
            }
            await pause(RELIST_MS, stopping.signal);
            continue;
          }
          const lease = await leaseOrNull(client, loopId, { runner_id: runnerId, labels }, stopping.signal, () => directory.stale());
          if (!lease) continue;
          if ((await runJob(runnerId, lease)) === "failed") {
            failures++;
            await pause(Math.min(MAX_FAILURE_PAUSE_MS, 1_000 * 2 ** (failures - 1)), stopping.signal);
          } else failures = 0;
        }
      } catch (error) {
        // Not one job's failure: the runner stops once the other slots have finished their jobs in hand.
        fatal ??= error;
        if (!stopping.signal.aborted) stopping.abort(new Error("stopping"));
      }
    };
    await Promise.all(Array.from({ length: concurrency }, (_, index) => slot(index)));
    if (fatal) throw fatal;
  } finally {
    removeDrain();
    if (stoppedNow) {
      // Stopped at once: the leases are given back while the coordinator still runs; the shutdown then
      // stops the rest and exits (130 or 143), so nothing more is said or done here.
      await stoppedNow;
      await new Promise<never>(() => undefined);
    }
    await connection.close();
  }
  const baselines = counts.baselines > 0 ? `${counts.baselines} baseline(s) measured, ` : "";
  const unjudged = [counts.halted > 0 ? `${counts.halted} not judged (the loop halted)` : "", counts.failed > 0 ? `${counts.failed} failed here` : ""]
    .filter(Boolean)
    .map((part) => `, ${part}`)
    .join("");
  emitResult(mode, { status: "ok", ...counts, ...(options.loop ? { loop_id: options.loop } : {}) }, [
    `stopped after ${counts.jobs} job(s): ${baselines}${counts.promoted} promoted, ${counts.rejected} rejected, ${counts.lost} lost or re-queued${unjudged}`,
  ]);
  return 0;
}

/** A long-poll for a job; null when none came, the loop went away (re-listed), or the runner is stopping. */
async function leaseOrNull(
  client: Client,
  loopId: string,
  request: { runner_id: string; labels: Labels },
  signal: AbortSignal,
  onGone: () => void,
): Promise<Lease | null> {
  try {
    const lease = await client.leaseJob(loopId, { ...request, wait_ms: LONG_POLL_MS }, signal);
    // No job in a whole wait: the loop may have halted since it was listed.
    if (!lease) onGone();
    return lease;
  } catch (error) {
    if (signal.aborted) return null;
    if (error instanceof CoordinatorError && error.status === 404) {
      onGone();
      return null;
    }
    throw error;
  }
}

/** The confirm measurement of a loop this runner's report halted, with the commits it needs fetched first. */
async function confirmHalted(context: JobContext & { labels: Labels }, loop: LoopSummary, note: (text: string) => void): Promise<void> {
  if (context.loaded.contract.mode !== "optimize" || loop.best.candidate_id === BASELINE_ID) return;
  const state = await foldLoop(context);
  const best = state.candidates[loop.best.candidate_id];
  await ensureCommits(
    context,
    loop.loop_id,
    [
      { commit: state.t0.commit, bundle: null },
      { commit: loop.best.commit, bundle: best?.bundle ?? null },
    ],
    note,
  );
  await confirmAgainstT0({ ...context, loop });
}
