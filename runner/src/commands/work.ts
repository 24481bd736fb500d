import { randomBytes } from "node:crypto";
import os from "node:os";
import type { Lease, LoopSummary } from "../../../shared/wire/api.js";
import type { Labels } from "../../../shared/wire/contract.js";
import { CoordinatorError, type Client } from "../client.js";
import { removeStaleClones } from "../clone.js";
import { connect, type ServerOptions } from "../connect.js";
import { contractDifferences, type LoadedContract } from "../contract-file.js";
import { resolveContract, type ContractOptions } from "../contract-resolution.js";
import { UserError } from "../errors.js";
import { excludeStateDir, repoRoot } from "../git.js";
import { parseLabels } from "../labels.js";
import { evaluateLease, LONG_POLL_MS, verdictLine, type JobContext } from "../lease-job.js";
import { emitResult, progress, type OutputMode } from "../output.js";
import { drainOnFirstSignal } from "../shutdown.js";
import { ensureCandidateCommit, ensureCommits } from "../candidate-bundles.js";
import { confirmAgainstT0 } from "../confirm-job.js";
import { BASELINE_ID } from "../../../shared/engine/index.js";
import { failureLine } from "../candidate-evidence.js";
import { foldLoop } from "../event-log.js";

// `loopwarden work` (DESIGN §1.2, §13): a runner for shared loops. It leases evaluation jobs from the
// loops it may see whose pinned contract is this checkout's (invariant 4: it runs only what its own
// checkout pins), evaluates each in a fresh clone of the candidate commit, reports, and goes on.
// Idle, it waits in long-polls (25 s each), never a poll loop. The first SIGINT/SIGTERM lets the jobs in
// hand finish and then exits; a second stops them at once (their leases then expire and are re-queued).

/** Options of `loopwarden work`. */
export interface WorkOptions extends ContractOptions, ServerOptions, OutputMode {
  cwd: string;
  labels?: string | undefined;
  loop?: string | undefined;
  concurrency?: number | undefined;
}

/** How often the list of loops to serve is read again while none has a job. */
const RELIST_MS = 10_000;

/** The loops this runner serves: the one named, or the running ones pinned to its contract, re-read now and then. */
class LoopDirectory {
  private loops: string[] = [];
  private readAt = 0;
  private turn = 0;

  constructor(
    private readonly client: Client,
    private readonly contractHash: string,
    private readonly only: string | undefined,
  ) {}

  /** The next loop to ask for a job (in turn, so every loop is served), or null when none is running. */
  async next(): Promise<string | null> {
    if (Date.now() - this.readAt > RELIST_MS) await this.refresh();
    if (this.loops.length === 0) return null;
    return this.loops[this.turn++ % this.loops.length] ?? null;
  }

  /** Reads the list again at the next `next()` (a loop halted, or answered 404). */
  stale(): void {
    this.readAt = 0;
  }

  private async refresh(): Promise<void> {
    this.readAt = Date.now();
    if (this.only !== undefined) {
      const loop = await this.client.getLoop(this.only);
      this.loops = loop.status === "running" ? [loop.loop_id] : [];
      return;
    }
    const found: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.client.listLoops({ status: "running", contract_hash: this.contractHash, limit: 100, ...(cursor ? { cursor } : {}) });
      found.push(...page.loops.map((loop) => loop.loop_id));
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
    this.loops = found;
  }
}

/** The named loop, checked before any job is taken: it must exist for this token and pin this checkout's contract. */
async function checkNamedLoop(client: Client, loopId: string, loaded: LoadedContract): Promise<void> {
  const loop = await client.getLoop(loopId);
  if (loop.contract_hash === loaded.hash) return;
  const differences = contractDifferences(await client.pinnedContract(loopId), loaded.contract);
  throw new UserError(
    `loop ${loopId} pins another contract than ${loaded.source} in this checkout (${differences.slice(0, 5).join("; ")}); a runner evaluates only the contract its own checkout pins — check out the loop's contract, or give work the same contract flags as the run`,
  );
}

/**
 * `loopwarden work`: leases, evaluates and reports jobs until stopped (or, with `--loop`, until that
 * loop halts). `--concurrency N` runs N jobs at once, each under a runner id of its own.
 */
export async function workCommand(options: WorkOptions): Promise<number> {
  const mode: OutputMode = options;
  const repo = await repoRoot(options.cwd);
  await excludeStateDir(repo);
  await removeStaleClones();
  const loaded = await resolveContract(repo, options);
  const labels = parseLabels(options.labels);
  const concurrency = options.concurrency ?? 1;
  const connection = await connect(options, mode);
  const stopping = new AbortController();
  const removeDrain = drainOnFirstSignal(() => stopping.abort(new Error("stopping")));
  const counts = { jobs: 0, promoted: 0, rejected: 0, lost: 0 };
  try {
    if (options.loop) await checkNamedLoop(connection.client, options.loop, loaded);
    const directory = new LoopDirectory(connection.client, loaded.hash, options.loop);
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
        context = { client: connection.client, loop: { loop_id: loopId }, repo, loaded, mode };
        contexts.set(loopId, context);
      }
      return context;
    };
    const slot = async (index: number) => {
      const runnerId = `${host}-${instance}-${index + 1}`;
      while (!stopping.signal.aborted) {
        const loopId = await directory.next();
        if (!loopId) {
          if (options.loop) return; // the named loop halted: nothing more to do
          await sleep(RELIST_MS, stopping.signal);
          continue;
        }
        const lease = await leaseOrNull(connection.client, loopId, { runner_id: runnerId, labels }, stopping.signal, () => directory.stale());
        if (!lease) continue;
        const label = `[${runnerId}] ${lease.job.candidate_id}`;
        const context = contextOf(loopId);
        await ensureCandidateCommit(context, lease, (text) => progress(mode, `${label} ${text}`));
        const result = await evaluateLease(context, lease, label);
        counts.jobs++;
        if (!result) {
          counts.lost++;
          continue;
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
          await confirmHalted(context, result.loop, (text) => progress(mode, `${label} ${text}`));
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, (_, index) => slot(index)));
  } finally {
    removeDrain();
    await connection.close();
  }
  emitResult(mode, { status: "ok", ...counts, ...(options.loop ? { loop_id: options.loop } : {}) }, [
    `stopped after ${counts.jobs} job(s): ${counts.promoted} promoted, ${counts.rejected} rejected, ${counts.lost} lost or re-queued`,
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

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** The confirm measurement of a loop this runner's report halted, with the commits it needs fetched first. */
async function confirmHalted(context: JobContext, loop: LoopSummary, note: (text: string) => void): Promise<void> {
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
