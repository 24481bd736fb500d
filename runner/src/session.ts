import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { formatDuration } from "../../shared/duration.js";
import { foldEvents, LoopEvent, type AgentRun, type LoopState, type Proposer, type Verdict } from "../../shared/engine/index.js";
import type { AgentReport } from "../../shared/wire/agent-report.js";
import type { Contract } from "../../shared/wire/contract.js";
import { ProposeCandidateRequest, type Lease, type LoopSummary } from "../../shared/wire/api.js";
import type { Observation } from "../../shared/wire/observation.js";
import { CoordinatorError, type Client } from "./client.js";
import { connect, type Connection, type ServerOptions } from "./connect.js";
import { contractDifferences, contractFileOf, contractHash, loadContractFile, validateContract, type LoadedContract } from "./contract-file.js";
import { UserError } from "./errors.js";
import { removeStaleClones, withClone } from "./clone.js";
import { evaluateIn, hardGatesPassed, uploadLogs, type Evaluation, type EvaluationOptions } from "./evaluate.js";
import { faultPoint } from "./fault.js";
import { clearPendingCreate, loadPendingCreate, savePendingCreate } from "./pending-create.js";
import { sampleAlone, samplePairs, type PairedSamples } from "./sampling.js";
import {
  currentBranch,
  diffOf,
  dirtyPaths,
  excludeStateDir,
  headCommit,
  loopBranch,
  readTrailers,
  rejectedRef,
  repoRoot,
  revertTo,
  setAsideChanges,
  snapshotCandidate,
  switchToLoopBranch,
} from "./git.js";
import { liveStatus, paint, progress, type OutputMode } from "./output.js";
import { contractSourceOf, FLAGS_SOURCE, loadWorkspace, saveWorkspaceState, type WorkspaceState } from "./workspace.js";
import { formatList } from "../../shared/format-list.js";

// What `run` and `step` share: finding the contract, creating or resuming the loop, committing a
// candidate, having it evaluated and applying the coordinator's verdict to the working tree.

/** Where the contract comes from: `--check`/`--exec` flags, else a file (default `loop.yaml`). */
export interface ContractOptions {
  contract?: string | undefined;
  check?: string | undefined;
  exec?: string | undefined;
  maxIterations?: number | undefined;
  name?: string | undefined;
  checkTimeout?: string | undefined;
  agentTimeout?: string | undefined;
  /** Start another loop even when one is recorded for this contract (DESIGN §6.6). */
  new?: boolean | undefined;
}

/** An open loop in a repository, connected to its coordinator. */
export interface Session {
  repo: string;
  loaded: LoadedContract;
  connection: Connection;
  client: Client;
  mode: OutputMode;
  workspace: WorkspaceState;
  loop: LoopSummary;
  /** True when an existing loop was picked up rather than created. */
  resumed: boolean;
  /** The loop's state as last folded, and the last event folded into it: later reads fetch only what follows. */
  folded?: { seq: number; state: LoopState } | undefined;
}

const short = (commit: string) => commit.slice(0, 10);

/** Trailers a candidate commit carries, so a restarted runner can propose it again exactly. */
const TRAILER = { loop: "Loopwarden-Loop", iteration: "Loopwarden-Iteration", proposal: "Loopwarden-Proposal", agent: "Loopwarden-Agent" } as const;

/** Loads the contract: from flags (flag-only mode, DESIGN §5) or from the contract file. */
export async function resolveContract(repo: string, options: ContractOptions): Promise<LoadedContract> {
  const flagOnly = options.check !== undefined || options.exec !== undefined;
  if (!flagOnly) {
    const loaded = await loadContractFile(repo, options.contract ?? "loop.yaml");
    if (options.maxIterations !== undefined) {
      return validateContract(
        { ...loaded.contract, stop: { ...loaded.contract.stop, max_iterations: options.maxIterations } },
        loaded.source,
      );
    }
    return loaded;
  }
  if (!options.check || !options.exec) {
    throw new UserError("flag-only mode needs both --check CMD and --exec CMD (or neither, to use loop.yaml)", 2);
  }
  if (options.contract !== undefined) throw new UserError("use either --contract FILE or --check/--exec, not both", 2);
  return validateContract(
    {
      name: options.name ?? path.basename(repo),
      mode: "check_fixpoint",
      gates: [{ name: "check", run: options.check, ...(options.checkTimeout ? { timeout: options.checkTimeout } : {}) }],
      stop: { max_iterations: options.maxIterations ?? 50, no_progress: 10 },
      agent: { run: options.exec, ...(options.agentTimeout ? { timeout: options.agentTimeout } : {}) },
    },
    "flags",
  );
}

function newRunnerId(): string {
  return `${os.hostname().replace(/[^A-Za-z0-9_.:-]/g, "-").slice(0, 60)}-${randomBytes(4).toString("hex")}`;
}

function describeDirty(dirty: string[]): string {
  return formatList(dirty);
}

/** The contract flags given, by flag, and the pinned contract with their values put in (flag-only mode's mapping). */
function withContractFlags(pinned: Contract, options: ContractOptions): { flags: string[]; wanted: Contract } {
  const [gate, ...gates] = pinned.gates;
  const flags: [string, unknown][] = [
    ["--check", options.check],
    ["--exec", options.exec],
    ["--max-iterations", options.maxIterations],
    ["--name", options.name],
    ["--check-timeout", options.checkTimeout],
    ["--agent-timeout", options.agentTimeout],
  ];
  const wanted: Contract = {
    ...pinned,
    name: options.name ?? pinned.name,
    gates: gate ? [{ ...gate, run: options.check ?? gate.run, timeout: options.checkTimeout ?? gate.timeout }, ...gates] : pinned.gates,
    stop: { ...pinned.stop, max_iterations: options.maxIterations ?? pinned.stop.max_iterations },
    agent: { ...pinned.agent, run: options.exec ?? pinned.agent.run, timeout: options.agentTimeout ?? pinned.agent.timeout },
  };
  return { flags: flags.filter(([, value]) => value !== undefined).map(([flag]) => flag), wanted };
}

/**
 * The contract a running loop resumes with (DESIGN §6.6): always the one it pinned. Flags that would
 * change it, or a contract file that no longer matches it, are refused with the exact difference; a
 * new loop needs `--new`.
 */
async function resumedContract(repo: string, source: string, options: ContractOptions, loopId: string, pinned: Contract): Promise<LoadedContract> {
  const refuse = (what: string, differences: string[]) =>
    new UserError(
      `loop ${loopId} (${source === FLAGS_SOURCE ? "flag-only" : source}) is still running, and ${what} would change the contract it pinned:\n` +
        differences.slice(0, 12).map((line) => `  ${line}`).join("\n") +
        "\nresume it with `loopwarden run` and no contract flags, or start another loop with --new",
      2,
    );
  if (source !== FLAGS_SOURCE) {
    // The file as it is now, against the pinned contract (whose limit may have come from --max-iterations).
    const file = (await loadContractFile(repo, source)).contract;
    const fileDifferences = contractDifferences(pinned, { ...file, stop: { ...file.stop, max_iterations: pinned.stop.max_iterations } });
    if (fileDifferences.length > 0) throw refuse(`${source} as it is now`, fileDifferences);
  }
  const { flags, wanted } = withContractFlags(pinned, options);
  const flagDifferences = contractDifferences(pinned, wanted);
  if (flagDifferences.length > 0) throw refuse(flags.join(", "), flagDifferences);
  return validateContract(pinned, source);
}

/**
 * The commit a new loop's t0 may be taken from (DESIGN §6.6): one the user made, never a candidate
 * commit (it carries loopwarden's trailers) nor a loop's branch, where an unjudged proposal may sit.
 */
async function refuseCandidateBaseline(repo: string): Promise<void> {
  const head = await headCommit(repo);
  const branch = await currentBranch(repo);
  const trailers = await readTrailers(repo, head);
  const loopId = trailers[TRAILER.loop] ?? (branch?.startsWith("loopwarden/") ? branch.slice("loopwarden/".length) : undefined);
  if (loopId === undefined) return;
  const where = trailers[TRAILER.loop] ? `HEAD (${short(head)}) is a candidate commit of loop ${loopId}` : `the working tree is on ${branch}, the branch of loop ${loopId}`;
  throw new UserError(
    `${where}; a new loop's baseline must be a commit you made. Switch to your own branch (git switch main), ` +
      `after merging what you want to keep of the loop (git merge --no-ff ${loopBranch(loopId)})`,
  );
}

/** Measures t0 (DESIGN §2): the gates, the guard readings and, in optimize mode, the metric, in a clean clone of `commit`. */
async function measureBaseline(repo: string, commit: string, loaded: LoadedContract, mode: OutputMode): Promise<Evaluation> {
  progress(mode, `capturing the baseline at ${short(commit)}: running ${loaded.contract.gates.length} gate(s) in a clean clone…`);
  liveStatus(mode, "baseline: running gates");
  return withClone(repo, commit, "t0", async (clone) => {
    const evaluation = await evaluateIn(clone, {
      contract: loaded.contract,
      guards: { contractFile: contractFileOf(loaded) },
      onNote: (text) => progress(mode, `baseline: ${text}`),
    });
    const metric = loaded.contract.metric;
    if (metric) {
      // The baseline's own readings: what the first comparison's best-so-far is measured against.
      progress(mode, `baseline: measuring ${metric.name} ${metric.samples.min} times…`);
      evaluation.observation.samples = hardGatesPassed(loaded.contract, evaluation)
        ? await sampleAlone(clone, loaded.contract, metric.samples.min)
        : { best: [], candidate: [], error: "a hard gate failed at t0: the metric was not measured" };
    }
    return evaluation;
  });
}

/**
 * Opens the repository's loop for its contract (DESIGN §6.6). The loop recorded for the contract in
 * `.loopwarden/state.json` is resumed whatever the flags when it is running (flags that would change
 * its pinned contract are refused), and reported as it is when it has halted; a new loop is created only
 * when none is recorded, the coordinator no longer knows it, or `--new` asks for one — with t0 measured
 * at HEAD, which must be a commit the user made. `run` refuses a dirty tree for a new loop (a revert
 * must never touch the user's work); `step` evaluates exactly that.
 */
export async function openSession(
  options: ContractOptions & ServerOptions & OutputMode & { cwd: string; purpose: "run" | "step" },
): Promise<Session> {
  const mode: OutputMode = options;
  const repo = await repoRoot(options.cwd);
  await headCommit(repo);
  await excludeStateDir(repo);
  await removeStaleClones();

  const loops = await loadWorkspace(repo);
  const source = contractSourceOf(repo, options, loops);
  const previous = loops[source] ?? null;
  const server: ServerOptions = {
    server: options.server ?? (previous && !options.new ? (previous.server ?? undefined) : undefined),
    state: options.state ?? (previous && !options.new ? (previous.state_dir ?? undefined) : undefined),
    token: options.token,
  };

  // A new loop's contract is checked before any coordinator is reached (a bad contract starts nothing);
  // a recorded loop's is compared with what it pinned once the coordinator answers.
  const fresh = previous === null || options.new === true ? await resolveContract(repo, options) : null;
  const connection = await connect(server, mode);
  try {
    if (previous && !options.new) {
      const loop = await connection.client.getLoop(previous.loop_id).catch((error: unknown) => {
        if (error instanceof CoordinatorError && error.status === 404) return null;
        throw error;
      });
      if (loop) {
        if (loop.status === "running") {
          const loaded = await resumedContract(repo, source, options, loop.loop_id, await connection.client.pinnedContract(loop.loop_id));
          progress(mode, `resuming loop ${loop.loop_id} (iteration ${loop.iteration} of ${loop.max_iterations})`);
          return { repo, loaded, connection, client: connection.client, mode, workspace: previous, loop, resumed: true };
        }
        // A halted loop stays halted: reported with its reason and class, never silently replaced.
        const loaded = validateContract(await connection.client.pinnedContract(loop.loop_id), source);
        return { repo, loaded, connection, client: connection.client, mode, workspace: previous, loop, resumed: true };
      }
      progress(mode, `loop ${previous.loop_id} is unknown to the coordinator at ${connection.url}: starting a new loop`);
    }
    if (previous && options.new) progress(mode, `--new: loop ${previous.loop_id} is left as it is on its coordinator; this repository now follows a new loop`);
    const loaded = fresh ?? (await resolveContract(repo, options));
    if (options.purpose === "run") {
      const dirty = await dirtyPaths(repo);
      if (dirty.length > 0) {
        throw new UserError(
          `the working tree has uncommitted changes (${describeDirty(dirty)}); commit or stash them first, so a revert never loses your work`,
        );
      }
    }
    await refuseCandidateBaseline(repo);
    const startedFrom = await currentBranch(repo);
    const t0Commit = await headCommit(repo);
    // A creation an interrupted runner left in flight is finished with its very request (DESIGN §6.6):
    // the coordinator answers the loop it may already have created, rather than a second one.
    let pending = await loadPendingCreate(repo, source);
    if (pending && (contractHash(pending.request.contract) !== loaded.hash || pending.request.t0.commit !== t0Commit)) {
      progress(mode, "an interrupted loop creation no longer matches the contract or HEAD: measuring a new baseline");
      pending = null;
    }
    if (pending) {
      progress(mode, `finishing the interrupted creation of a loop (baseline at ${short(t0Commit)}, already measured)`);
    } else {
      const baseline = await measureBaseline(repo, t0Commit, loaded, mode);
      pending = {
        request: { idempotency_key: `run-${randomBytes(16).toString("hex")}`, contract: loaded.contract, t0: { commit: t0Commit, observation: baseline.observation } },
        logs: baseline.logs,
      };
      await savePendingCreate(repo, source, pending);
    }
    const created = await connection.client.createLoop(pending.request);
    const loop = created.loop;
    await uploadLogs(connection.client, loop.loop_id, pending.logs);
    faultPoint("loop-created");
    const workspace: WorkspaceState = {
      loop_id: loop.loop_id,
      server: connection.local ? null : connection.url,
      state_dir: connection.local ? (server.state ?? null) : null,
      branch: loopBranch(loop.loop_id),
      started_from: startedFrom,
      contract_hash: loaded.hash,
      runner_id: newRunnerId(),
    };
    await saveWorkspaceState(repo, source, workspace);
    await clearPendingCreate(repo, source);
    progress(mode, `loop ${loop.loop_id} (contract ${loaded.source}): the baseline has ${loop.t0.failing} failing test(s)`);
    return { repo, loaded, connection, client: connection.client, mode, workspace, loop, resumed: false };
  } catch (error) {
    await connection.close();
    throw error;
  }
}

/** Puts the working tree on the loop's branch (carrying uncommitted changes along, for `step`). */
export async function enterLoopBranch(session: Session): Promise<void> {
  const branch = loopBranch(session.loop.loop_id);
  if ((await currentBranch(session.repo)) === branch) return;
  try {
    await switchToLoopBranch(session.repo, session.loop.loop_id, session.loop.best.commit);
  } catch (error) {
    throw new UserError(`cannot switch to ${branch}: ${(error as Error).message.split("\n")[0]}; commit or stash your changes and retry`);
  }
  progress(session.mode, `working on branch ${branch}${session.workspace.started_from ? ` (from ${session.workspace.started_from})` : ""}`);
}

/**
 * The loop's full state, folded by the same engine the coordinator uses from its public event log. Only
 * the events after the last fold are fetched (`?after=seq`) and folded onto it, so an iteration or an
 * idle poll costs what happened since, not the loop's whole history (DESIGN §4 invariant 9).
 */
export async function foldLoop(session: Session): Promise<LoopState> {
  const after = session.folded?.seq ?? 0;
  const events = (await session.client.eventLines(session.loop.loop_id, after)).map((line) => LoopEvent.parse(JSON.parse(line)));
  const last = events.at(-1);
  if (last && last.seq !== after + events.length) throw new Error(`loop ${session.loop.loop_id}: events after ${after} are not contiguous (last is ${last.seq})`);
  const state = events.length === 0 ? (session.folded?.state ?? null) : foldEvents(events, session.folded?.state ?? null);
  if (!state) throw new Error(`loop ${session.loop.loop_id} has no events`);
  session.folded = { seq: last?.seq ?? after, state };
  return state;
}

/** Commits the working tree as a candidate on the loop branch, with trailers that let a restart re-propose it. */
export async function commitCandidate(session: Session, iteration: number, agent: AgentRun | null): Promise<{ commit: string; key: string }> {
  const key = `cand-${randomBytes(12).toString("hex")}`;
  const agentTrailer = agent ? `exit=${agent.exit_code ?? "signal"} timed_out=${agent.timed_out} duration_ms=${agent.duration_ms}` : "none";
  const commit = await snapshotCandidate(
    session.repo,
    [
      `loopwarden: candidate of iteration ${iteration}`,
      "",
      `${TRAILER.loop}: ${session.loop.loop_id}`,
      `${TRAILER.iteration}: ${iteration}`,
      `${TRAILER.proposal}: ${key}`,
      `${TRAILER.agent}: ${agentTrailer}`,
      "",
    ].join("\n"),
  );
  return { commit, key };
}

/** Reads back a candidate commit's trailers; null when the commit is not a candidate of this loop. */
export async function candidateTrailers(
  session: Session,
  commit: string,
): Promise<{ key: string; iteration: number; agent: AgentRun | null } | null> {
  const trailers = await readTrailers(session.repo, commit);
  const key = trailers[TRAILER.proposal];
  if (trailers[TRAILER.loop] !== session.loop.loop_id || !key) return null;
  const agentMatch = /^exit=(\S+) timed_out=(true|false) duration_ms=(\d+)$/.exec(trailers[TRAILER.agent] ?? "");
  const agent: AgentRun | null = agentMatch
    ? {
        exit_code: agentMatch[1] === "signal" ? null : Number(agentMatch[1]),
        timed_out: agentMatch[2] === "true",
        duration_ms: Number(agentMatch[3]),
      }
    : null;
  return { key, iteration: Number(trailers[TRAILER.iteration] ?? "0"), agent };
}

/** Where an interrupted iteration's edits and undecided candidates are kept (nothing is ever lost). */
function interruptedRefPrefix(session: Session): string {
  return `refs/loopwarden/interrupted/${session.loop.loop_id}`;
}

function verdictLine(iteration: number, verdict: Verdict): string {
  const word = verdict.decision === "promoted" ? paint("promoted", "green") : paint("rejected", "red");
  return `[${iteration}] ${verdict.candidate_id} ${word} (${verdict.reason}): ${verdict.detail}`;
}

/** Runs one leased evaluation with heartbeats and reports it; null when the lease was lost (the job is re-queued). */
async function evaluateLease(session: Session, lease: Lease, iteration: number): Promise<{ verdict: Verdict; loop: LoopSummary } | null> {
  const { client, mode } = session;
  if (lease.job.contract_hash !== session.loaded.hash) {
    // Invariant 4: run only the contract pinned in this checkout.
    throw new UserError(
      `refusing the job for ${lease.job.candidate_id}: its contract hash ${lease.job.contract_hash.slice(0, 12)} differs from this checkout's ${session.loaded.hash.slice(0, 12)}`,
    );
  }
  let lost = false;
  const heartbeat = setInterval(() => {
    client.heartbeat(lease.lease_id, { fencing_token: lease.fencing_token }).catch((error: unknown) => {
      if (error instanceof CoordinatorError && error.status === 409) lost = true;
      else progress(mode, `heartbeat failed (${(error as Error).message}); will retry`);
    });
  }, Math.max(1_000, Math.floor(lease.ttl_ms / 4)));
  const label = `[${iteration}] ${lease.job.candidate_id}`;
  try {
    progress(mode, `${label} evaluating ${short(lease.job.commit)} in a clean clone…`);
    const contract = session.loaded.contract;
    return await withClone(session.repo, lease.job.commit, lease.job.candidate_id, async (clone) => {
      const evaluation = await evaluateIn(clone, { ...evaluationOptions(session, label), contract });
      if (lost) return null;
      await uploadLogs(client, lease.loop_id, evaluation.logs);
      const report = (observation: Observation) => {
        liveStatus(mode, `${label} reporting`);
        return client.report(lease.lease_id, { fencing_token: lease.fencing_token, observation });
      };
      if (!contract.metric) return report(evaluation.observation);
      if (!hardGatesPassed(contract, evaluation)) {
        return report({ ...evaluation.observation, samples: { best: [], candidate: [], error: "a hard gate failed: the metric was not measured" } });
      }
      // Optimize mode: readings of the best-so-far and the candidate, interleaved on this runner, until
      // the coordinator's sequential test decides (DESIGN §6.3).
      const metric = contract.metric;
      return withClone(session.repo, session.loop.best.commit, `${lease.job.candidate_id}-best`, async (bestClone) => {
        const samples: PairedSamples = { best: [], candidate: [] };
        let wanted = metric.samples.min;
        for (;;) {
          await samplePairs(samples, wanted, { best: bestClone, candidate: clone }, contract, (done, of) =>
            liveStatus(mode, `${label} ${metric.name}: pair ${done}/${of} (best, then candidate)`),
          );
          if (lost) return null;
          const answer = await report({ ...evaluation.observation, samples: { ...samples } });
          const { verdict } = answer;
          if (verdict.decision !== "need_samples") return answer;
          progress(mode, `${label}   ${verdict.detail}`);
          wanted = samples.best.length + Math.max(1, verdict.metric?.more ?? 1);
        }
      });
    });  } catch (error) {
    if (error instanceof CoordinatorError && error.status === 409 && error.code !== "loop_halted") {
      progress(mode, `${label} lease lost (${error.code}); leasing again`);
      return null;
    }
    throw error;
  } finally {
    clearInterval(heartbeat);
  }
}

/** The evaluation options of a loop's evaluations: guard readings, and progress lines for each gate. */
function evaluationOptions(session: Session, label: string): Omit<EvaluationOptions, "contract"> {
  const { mode } = session;
  return {
    guards: { contractFile: contractFileOf(session.loaded) },
    onNote: (text) => progress(mode, `${label}   ${text}`),
    onGateStart: (gate) => liveStatus(mode, `${label} gate ${gate.name}: ${gate.run}`),
    onGate: ({ gate, result, tests, metricErrors }) => {
      const outcome = result.timed_out ? `timed out after ${gate.timeout}` : `exit ${result.exit_code ?? result.signal}`;
      const testCounts = tests ? `, ${tests.passing} passing / ${tests.failing} failing tests` : "";
      const report = result.report_error ? `, report unreadable: ${result.report_error}` : "";
      const metrics = result.metrics ? `, ${Object.entries(result.metrics).map(([name, value]) => `${name}=${value}`).join(" ")}` : "";
      progress(mode, `${label}   gate ${gate.name}: ${outcome} (${formatDuration(result.duration_ms)})${testCounts}${metrics}${report}`);
      for (const error of metricErrors) progress(mode, `${label}   gate ${gate.name}: malformed METRIC ${error}`);
    },
  };
}

/** Evaluates leased jobs until `candidateId` has its verdict (a local loop has only its own job queued). */
async function evaluateUntilDecided(session: Session, candidateId: string, iteration: number): Promise<{ verdict: Verdict; loop: LoopSummary }> {
  for (;;) {
    const lease = await session.client.leaseJob(session.loop.loop_id, { runner_id: session.workspace.runner_id });
    if (!lease) {
      const loop = await session.client.getLoop(session.loop.loop_id);
      const candidate = (await foldLoop(session)).candidates[candidateId];
      if (candidate?.verdict) return { verdict: candidate.verdict, loop };
      if (loop.status === "halted") throw new UserError(`the loop halted (${loop.halt?.halt_reason}) before ${candidateId} was decided`);
      liveStatus(session.mode, `[${iteration}] ${candidateId} waiting for its evaluation job`);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      continue;
    }
    const result = await evaluateLease(session, lease, iteration);
    if (result && lease.job.candidate_id === candidateId) return result;
  }
}

/** Where a proposal waits until its verdict is applied, so a restarted runner re-sends it byte for byte. */
function pendingProposalFile(session: Session, key: string): string {
  return path.join(session.repo, ".loopwarden", "proposals", `${key}.json`);
}

/** The proposal for a committed candidate: its diff from the best commit and how the agent run went. */
export async function buildProposal(
  session: Session,
  candidate: { commit: string; key: string; proposer: Proposer; agent: AgentRun | null; report?: { report: AgentReport | null; error?: string } },
): Promise<ProposeCandidateRequest> {
  const diff = await diffOf(session.repo, session.loop.best.commit, candidate.commit);
  return {
    idempotency_key: candidate.key,
    commit: candidate.commit,
    diff_sha256: diff.sha256,
    empty: diff.empty,
    proposer: candidate.proposer,
    agent: candidate.agent,
    ...(candidate.report?.report ? { agent_report: candidate.report.report } : {}),
    ...(candidate.report?.error ? { agent_report_error: candidate.report.error } : {}),
  };
}

/**
 * Proposes a committed candidate (idempotently, by its key), has it decided, and applies the verdict:
 * a promotion stays on the branch; a rejection is kept under its ref and the tree goes back to the best.
 */
export async function decideCandidate(session: Session, proposal: ProposeCandidateRequest, iteration: number): Promise<Verdict> {
  const pending = pendingProposalFile(session, proposal.idempotency_key);
  await mkdir(path.dirname(pending), { recursive: true });
  await writeFile(pending, JSON.stringify(proposal));
  const proposed = await session.client.proposeCandidate(session.loop.loop_id, proposal);
  session.loop = proposed.loop;
  let verdict = proposed.candidate.verdict;
  if (!verdict) {
    const decided = await evaluateUntilDecided(session, proposed.candidate.candidate_id, iteration);
    verdict = decided.verdict;
    session.loop = decided.loop;
  }
  progress(session.mode, verdictLine(iteration, verdict));
  if (verdict.decision === "rejected") {
    const ref = rejectedRef(session.loop.loop_id, verdict.candidate_id);
    await revertTo(session.repo, session.loop.best.commit, { ref, commit: proposal.commit });
    progress(session.mode, `[${iteration}] restored the working tree to ${short(session.loop.best.commit)}; the candidate is kept at ${ref}`);
  }
  await rm(pending, { force: true });
  return verdict;
}

/**
 * After an interruption (DESIGN §6.6): sets aside an interrupted agent run's uncommitted edits, then
 * settles the candidate HEAD holds when it is not the best commit. One the coordinator already judged
 * has its verdict applied (a crash may have come between the verdict and the revert); one not yet
 * judged is proposed again — idempotently, by the key in its trailers, so never registered twice — and
 * decided, or, when the loop has halted meanwhile, discarded: kept under its interrupted ref, and the
 * tree restored to the best-so-far.
 */
export async function settleInterruptedIteration(session: Session): Promise<void> {
  const dirty = await dirtyPaths(session.repo);
  if (dirty.length > 0) {
    const ref = `${interruptedRefPrefix(session)}/${Date.now()}`;
    await setAsideChanges(session.repo, ref, `loopwarden: edits of an interrupted iteration of ${session.loop.loop_id}`);
    progress(session.mode, `set aside the uncommitted edits of an interrupted iteration (${describeDirty(dirty)}) at ${ref}`);
  }
  const head = await headCommit(session.repo);
  const best = session.loop.best.commit;
  if (head === best) return;
  const trailers = await candidateTrailers(session, head);
  if (!trailers) {
    throw new UserError(
      `HEAD (${short(head)}) on ${loopBranch(session.loop.loop_id)} is neither the loop's best commit nor one of its candidates; reset the branch to ${short(best)} or start a new loop`,
    );
  }
  const state = await foldLoop(session);
  const known = Object.values(state.candidates).find((candidate) => candidate.idempotency_key === trailers.key);
  if (known?.verdict) {
    progress(session.mode, verdictLine(trailers.iteration, known.verdict));
    const ref = rejectedRef(session.loop.loop_id, known.candidate_id);
    await revertTo(session.repo, best, { ref, commit: head });
    progress(session.mode, `[${trailers.iteration}] restored the working tree to ${short(best)}; the candidate is kept at ${ref}`);
    return;
  }
  if (session.loop.status !== "running") {
    const ref = `${interruptedRefPrefix(session)}/${trailers.key}`;
    await revertTo(session.repo, best, { ref, commit: head });
    progress(session.mode, `[${trailers.iteration}] the loop halted before the interrupted candidate at ${short(head)} was judged: kept at ${ref}, the working tree restored to ${short(best)}`);
    return;
  }
  progress(session.mode, `[${trailers.iteration}] finishing the interrupted candidate ${known?.candidate_id ?? "(not yet registered)"} at ${short(head)}`);
  // The proposal as it was first sent, when the crash left it on disk; otherwise rebuilt from the trailers
  // (a crash between the commit and writing the proposal: nothing was sent yet, so nothing can differ).
  const saved = await readFile(pendingProposalFile(session, trailers.key), "utf8").then(
    (text) => ProposeCandidateRequest.parse(JSON.parse(text)),
    () => null,
  );
  const proposal =
    saved ??
    (await buildProposal(session, {
      commit: head,
      key: trailers.key,
      proposer: trailers.agent === null ? { kind: "step" } : { kind: "command", command: session.loaded.contract.agent.run },
      agent: trailers.agent,
    }));
  await decideCandidate(session, proposal, trailers.iteration);
}
