import { randomBytes } from "node:crypto";
import { mkdir, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { labelsSatisfy, LoopEvent, type AgentRun, type BundleRef, type Proposer, type Verdict } from "../../shared/engine/index.js";
import { formatList } from "../../shared/format-list.js";
import type { AgentReport } from "../../shared/wire/agent-report.js";
import type { InlineEvidence, ProposeCandidateRequest } from "../../shared/wire/api.js";
import { refuseCandidateBaseline } from "./candidate-commits.js";
import { CoordinatorError } from "./client.js";
import { cloneAhead, dropCloneAhead, evaluationStarted, removeStaleClones, withClone, type Clone } from "./clone.js";
import { connect, type Connection, type ServerOptions } from "./connect.js";
import { contractFileOf, contractHash, validateContract, type LoadedContract } from "./contract-file.js";
import { resolveContract, resumedContract, type ContractOptions } from "./contract-resolution.js";
import { UserError } from "./errors.js";
import { evaluateIn, hardGatesPassed, uploadLogs } from "./evaluate.js";
import type { Evaluation, GateHooks } from "./evaluation.js";
import { readGuardsBeforeGates } from "./guard-readings.js";
import { faultPoint } from "./fault.js";
import { currentBranch, dirtyPaths, excludeStateDir, headCommit, repoRoot, repositoryName, shortCommit } from "./git.js";
import { diffOf, loopBranch, rejectedRef, revertTo, switchToLoopBranch, type Diff } from "./git-commits.js";
import { evaluateUntilDecided, verdictLine } from "./lease-job.js";
import { liveStatus, progress, type OutputMode } from "./output.js";
import {
  clearPendingCreate,
  loadPendingCreate,
  savePendingCreate,
  stageBaselineFiles,
  uploadPendingFiles,
  type PendingCreate,
  type PendingFiles,
} from "./pending-create.js";
import { MetricLog, sampleAlone } from "./sampling.js";
import { sha256Hex } from "../../shared/hash.js";
import { parseLabels } from "./labels.js";
import { failureLine } from "./candidate-evidence.js";
import { diffSummary } from "./agent-context.js";
import { timed } from "./timings.js";
import { foldAnswered, stateAtHead } from "./event-log.js";
import { proposalBundle, withBundleUploaded } from "./candidate-bundles.js";
import { evidenceRefusal } from "./artifact-files.js";
import type { Contract } from "../../shared/wire/contract.js";
import { contractSourceOf, loadWorkspace, saveWorkspaceState, type WorkspaceState } from "./workspace.js";
import { settleStaleWorkspaces } from "./zones/agent-zone.js";
import { hideFromZones } from "./zones/sandbox.js";
import type { FullObservation } from "../../shared/wire/observation.js";
import type { Session } from "./session-type.js";

// `Session` lives in session-type.ts, so that the modules this one calls (lease-job.ts,
// candidate-commits.ts) can name it without importing this file back; re-exported for its callers.
export type { Session };

// What `run` and `step` share: finding the contract, creating or resuming the loop, committing a
// candidate, having it evaluated and applying the coordinator's verdict to the working tree.

function newRunnerId(): string {
  return `${os
    .hostname()
    .replace(/[^A-Za-z0-9_.:-]/g, "-")
    .slice(0, 60)}-${randomBytes(4).toString("hex")}`;
}

/**
 * Measures t0 (DESIGN §2): the gates, the guard readings and, in optimize mode, the metric, in a clean
 * clone of `commit`; and keeps what a candidate's evaluation stores (DESIGN §10) — the metric command's
 * output with the gate logs, and the files the contract's `artifacts` globs match, copied out of the
 * clone before it is removed — all cited by the observation and uploaded once the loop exists.
 */
async function measureBaseline(
  repo: string,
  source: string,
  commit: string,
  loaded: LoadedContract,
  mode: OutputMode,
): Promise<Evaluation & { files?: PendingFiles | undefined }> {
  progress(mode, `capturing the baseline at ${shortCommit(commit)}: running ${loaded.contract.gates.length} gate(s) in a clean clone…`);
  liveStatus(mode, "baseline: running gates");
  return withClone(repo, commit, "t0", async (clone) => {
    const evaluation = await evaluateIn(clone, {
      contract: loaded.contract,
      guards: { contractFile: contractFileOf(loaded), baseline: commit },
      onNote: (text) => progress(mode, `baseline: ${text}`),
    });
    const metric = loaded.contract.metric;
    const metricLog = new MetricLog();
    if (metric) {
      // The baseline's own readings: what the first comparison's best-so-far is measured against.
      progress(mode, `baseline: measuring ${metric.name} ${metric.samples.min} times…`);
      evaluation.observation.samples = hardGatesPassed(loaded.contract, evaluation)
        ? await sampleAlone(clone, loaded.contract, metric.samples.min, metricLog)
        : { best: [], candidate: [], error: "a hard gate failed at t0: the metric was not measured" };
    }
    // Matched after the metric ran, as a candidate's are: a benchmark may write the profile.
    const files = await stageBaselineFiles(repo, source, clone.dir, loaded.contract.artifacts ?? []);
    const logs = [...evaluation.logs];
    const artifacts = [...(files?.refs ?? [])];
    if (!metricLog.isEmpty) {
      const bytes = Buffer.from(metricLog.bytes());
      const ref = { sha256: sha256Hex(bytes), size: bytes.length, name: "metric.log", content_type: "text/plain; charset=utf-8" };
      logs.push({ ref, bytes });
      artifacts.push(ref);
    }
    if (artifacts.length > 0) evaluation.observation.artifacts = artifacts;
    return { observation: evaluation.observation, logs, files };
  });
}

/**
 * Everything a new loop's creation needs before the coordinator is asked (DESIGN §6.6): a clean tree for
 * `run`, a t0 that is a commit the user made, and the creation request — the one an interrupted runner
 * left in flight when it still fits, else a new one with the baseline measured — saved before it is sent.
 */
async function prepareCreation(
  repo: string,
  source: string,
  loaded: LoadedContract,
  options: { purpose: "run" | "step" },
  mode: OutputMode,
): Promise<{ pending: PendingCreate; startedFrom: string | null }> {
  if (options.purpose === "run") {
    const dirty = await dirtyPaths(repo);
    if (dirty.length > 0) {
      throw new UserError(`the working tree has uncommitted changes (${formatList(dirty)}); commit or stash them first, so a revert never loses your work`);
    }
  }
  const startedFrom = await currentBranch(repo);
  const t0Commit = await headCommit(repo);
  await refuseCandidateBaseline(repo, t0Commit, startedFrom);
  // A creation an interrupted runner left in flight is finished with its very request (DESIGN §6.6):
  // the coordinator answers the loop it may already have created, rather than a second one.
  let pending = await loadPendingCreate(repo, source);
  if (pending && (contractHash(pending.request.contract) !== loaded.hash || pending.request.t0.commit !== t0Commit)) {
    progress(mode, "an interrupted loop creation no longer matches the contract or HEAD: measuring a new baseline");
    pending = null;
  }
  if (pending) {
    progress(mode, `finishing the interrupted creation of a loop (baseline at ${shortCommit(t0Commit)}, already measured)`);
    return { pending, startedFrom };
  }
  const baseline = await timed("t0", () => measureBaseline(repo, source, t0Commit, loaded, mode));
  pending = await savePendingCreate(repo, source, {
    request: {
      idempotency_key: `run-${randomBytes(16).toString("hex")}`,
      contract: loaded.contract,
      t0: { commit: t0Commit, observation: baseline.observation },
      repository: await repositoryName(repo),
    },
    logs: baseline.logs,
    ...(baseline.files ? { files: baseline.files } : {}),
  });
  return { pending, startedFrom };
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
  options: ContractOptions &
    ServerOptions &
    OutputMode & {
      cwd: string;
      purpose: "run" | "step";
      labels?: string | undefined;
      /** Checks a new loop's contract before anything runs (its zones, DESIGN §6.7): a refusal creates no loop. */
      preflight?: ((contract: Contract) => Promise<void>) | undefined;
    },
): Promise<Session> {
  const labels = parseLabels(options.labels);
  const mode: OutputMode = options;
  const repo = await repoRoot(options.cwd);
  await headCommit(repo);
  await excludeStateDir(repo);
  const [, setAside] = await Promise.all([removeStaleClones(), settleStaleWorkspaces(repo)]);
  // An agent's edits that a killed runner left in its workspace are kept, never lost (DESIGN §6.6).
  for (const ref of setAside) progress(options, `set aside the edits an interrupted agent run left in its workspace at ${ref}`);
  // Neither zone ever sees the user's repository (DESIGN §6.7).
  hideFromZones(repo);

  const loops = await loadWorkspace(repo);
  const source = contractSourceOf(repo, options, loops);
  const previous = loops[source] ?? null;
  const server: ServerOptions = {
    server: options.server ?? (previous && !options.new ? (previous.server ?? undefined) : undefined),
    state: options.state ?? (previous && !options.new ? (previous.state_dir ?? undefined) : undefined),
    token: options.token,
  };

  // A new loop's contract is checked before any coordinator is reached (a bad contract starts nothing);
  // a recorded loop's is compared with what it pinned once the coordinator answers. A loop that is new
  // for certain has its baseline measured while the coordinator starts (DESIGN §12: the on-demand start
  // overlapped with t0, not added to it).
  const fresh = previous === null || options.new === true ? await resolveContract(repo, options) : null;
  if (fresh) await options.preflight?.(fresh.contract);
  const preparing = fresh ? prepareCreation(repo, source, fresh, options, mode) : null;
  // Awaited below; until then a refusal (a dirty tree) must not count as unhandled.
  preparing?.catch(() => undefined);
  let connection: Connection;
  try {
    connection = await timed("coordinator", () => connect(server, mode));
  } catch (error) {
    await preparing?.catch(() => undefined);
    throw error;
  }
  try {
    if (previous && !options.new) {
      const loop = await connection.client.getLoop(previous.loop_id).catch((error: unknown) => {
        if (error instanceof CoordinatorError && error.status === 404) return null;
        throw error;
      });
      if (loop) {
        if (loop.status === "running") {
          const loaded = await resumedContract(repo, source, options, loop.loop_id, await connection.client.pinnedContract(loop.loop_id));
          progress(mode, `resuming loop ${loop.loop_id} (${loop.iteration} of ${loop.max_iterations} iterations done)`);
          return { repo, source, loaded, connection, client: connection.client, mode, workspace: previous, loop, resumed: true, labels };
        }
        // A halted loop stays halted: reported with its reason and class, never silently replaced.
        const loaded = validateContract(await connection.client.pinnedContract(loop.loop_id), source);
        return { repo, source, loaded, connection, client: connection.client, mode, workspace: previous, loop, resumed: true, labels };
      }
      progress(mode, `loop ${previous.loop_id} is unknown to the coordinator at ${connection.url}: starting a new loop`);
    }
    const loaded = fresh ?? (await resolveContract(repo, options));
    const { pending, startedFrom } = await timed("baseline", () => preparing ?? prepareCreation(repo, source, loaded, options, mode));
    faultPoint("create-saved");
    const created = await timed("create", () => connection.client.createLoop(pending.request));
    const loop = created.loop;
    faultPoint("create-answered");
    // What t0's observation cites, stored now that the loop exists (artifacts are scoped to a loop): from
    // the creation kept on disk, so a runner killed before this point stores them on its next run.
    await uploadLogs(connection.client, loop.loop_id, pending.logs);
    const lost = await uploadPendingFiles(connection.client, loop.loop_id, pending.files, (text) => progress(mode, `baseline: ${text}`));
    if (lost.length > 0) progress(mode, `baseline: not stored, changed or removed on disk since t0 was measured: ${formatList(lost)}`);
    faultPoint("loop-created");
    const workspace: WorkspaceState = {
      loop_id: loop.loop_id,
      server: connection.local ? null : connection.url,
      state_dir: connection.local ? (server.state ?? null) : null,
      started_from: startedFrom,
      runner_id: newRunnerId(),
      // Nothing decided yet to show: a run that resumes this loop shows every verdict after its creation.
      seen_seq: loop.head.seq,
    };
    await saveWorkspaceState(repo, source, workspace);
    await clearPendingCreate(repo, source);
    // Said once it is so: a --new refused before the loop exists (HEAD a candidate commit) changed nothing.
    if (previous && options.new) {
      progress(mode, `--new: loop ${previous.loop_id} is left as it is on its coordinator; this repository now follows loop ${loop.loop_id}`);
    }
    progress(mode, `loop ${loop.loop_id} (contract ${loaded.source}): the baseline has ${baselineFailures(pending.request.t0.observation)}`);
    return { repo, source, loaded, connection, client: connection.client, mode, workspace, loop, resumed: false, labels };
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

/** Where a proposal waits until its verdict is applied, so a restarted runner re-sends it byte for byte. */
export function pendingProposalFile(session: Session, key: string): string {
  return path.join(session.repo, ".loopwarden", "proposals", `${key}.json`);
}

function agentFailed(agent: AgentRun | null): boolean {
  return agent !== null && (agent.timed_out || agent.exit_code !== 0);
}

/**
 * What fails at t0, as the gates' own lines count it: the failing tests their reports name, and the
 * gates that failed (each also one test to the ratchet, DESIGN §5), e.g. `3 failing test(s), 1 failing
 * gate(s)` for a 3-test suite whose gate exits 1 — not "4 failing tests".
 */
function baselineFailures(observation: FullObservation): string {
  const tests = observation.tests.failing.length;
  const gates = observation.gates.filter((gate) => gate.exit_code !== 0 || gate.timed_out || gate.report_error !== undefined).length;
  const parts = [...(tests > 0 || gates === 0 ? [`${tests} failing test(s)`] : []), ...(gates > 0 ? [`${gates} failing gate(s)`] : [])];
  return parts.join(", ");
}

/**
 * Whether this runner evaluates the candidate an agent run left: one whose agent failed is rejected
 * unevaluated, and the contract's `evaluate.labels` must admit the runner.
 */
export function evaluatesOwnCandidate(session: Session, agent: AgentRun | null): boolean {
  return !agentFailed(agent) && labelsSatisfy(session.loaded.contract.evaluate?.labels ?? {}, session.labels);
}

/**
 * Begins evaluating a candidate this runner evaluates itself (`evaluatesOwnCandidate`), before it is
 * proposed: its clone is made, its guards read as soon as it is checked out, and, when it is known to
 * change something (`diff`), its gates run while it is proposed. The proposal asks for the lease too,
 * which is this runner's, for this candidate, unless the loop halted or another job was queued first;
 * then the evaluation is stopped unused (decideCandidate gives the clone back, as it does when an empty
 * candidate is rejected unevaluated). The verdict is still the coordinator's, on what the leased job
 * reports (DESIGN §4, invariant 1).
 */
export function beginOwnEvaluation(session: Session, commit: string, diff?: Diff): void {
  const { contract } = session.loaded;
  const guards = { contractFile: contractFileOf(session.loaded), baseline: session.loop.t0.commit };
  cloneAhead(session.repo, commit, {
    readGuards: (dir) => readGuardsBeforeGates(dir, contract, guards),
    ...(diff && !diff.empty ? { evaluate: (clone: Clone, hooks: GateHooks) => evaluateIn(clone, { contract, guards, ...hooks }) } : {}),
  });
}

/** The proposal for a committed candidate: its diff from the best commit and how the agent run went. */
export async function buildProposal(
  session: Session,
  candidate: {
    commit: string;
    key: string;
    proposer: Proposer;
    agent: AgentRun | null;
    report?: { report: AgentReport | null; error?: string };
    /** Its change from the best commit, when already taken (`commitCandidate`). */
    diff?: Diff;
  },
): Promise<ProposeCandidateRequest> {
  const failed = agentFailed(candidate.agent);
  const evaluatesOwn = evaluatesOwnCandidate(session, candidate.agent);
  if (evaluatesOwn) beginOwnEvaluation(session, candidate.commit, candidate.diff);
  // Its one-line summary for the agent's history is ready by the next iteration.
  void diffSummary(session.repo, session.loop.best.commit, candidate.commit);
  try {
    // A candidate another runner may evaluate travels with its commits as a bundle, so a runner in another
    // checkout can evaluate it: on a shared coordinator (--server), or when the contract asks for runner
    // labels. On the local coordinator this process evaluates its own candidates, and a bundle would only
    // cost time (a git spawn and an upload an iteration). One the coordinator rejects unevaluated — its
    // agent failed, or it turns out empty — needs none; the bundle is made (and, unless it is small enough
    // to travel inside the proposal, sent) while the diff is taken, as only an empty candidate (the rarer
    // case) turns out not to need it.
    // An evaluation begun ahead has its clone checked out and its guards read first: the bundle and the
    // proposal, which only need to arrive before the report, do not compete with them for the machine.
    await evaluationStarted(session.repo, candidate.commit);
    const shared = !session.connection.local || session.loaded.contract.evaluate !== undefined;
    const bundling = failed || !shared ? null : proposalBundle(session.client, session.loop.loop_id, session.repo, candidate.commit, session.loop.t0.commit);
    bundling?.catch(() => undefined);
    const diff = candidate.diff ?? (await diffOf(session.repo, session.loop.best.commit, candidate.commit));
    let bundled: { bundle: BundleRef; evidence?: InlineEvidence[] } | undefined;
    if (!diff.empty) bundled = (await bundling) ?? undefined;
    else await bundling?.catch(() => undefined); // unused, but not left running behind the proposal
    return {
      idempotency_key: candidate.key,
      commit: candidate.commit,
      diff_sha256: diff.sha256,
      empty: diff.empty,
      proposer: candidate.proposer,
      agent: candidate.agent,
      ...(candidate.report?.report ? { agent_report: candidate.report.report } : {}),
      ...(candidate.report?.error ? { agent_report_error: candidate.report.error } : {}),
      ...(bundled ? { bundle: bundled.bundle } : {}),
      ...(bundled?.evidence ? { evidence: bundled.evidence } : {}),
      ...(evaluatesOwn && !diff.empty ? { lease: { runner_id: session.workspace.runner_id, labels: session.labels } } : {}),
    };
  } catch (error) {
    await dropCloneAhead(session.repo, candidate.commit);
    throw error;
  }
}

/**
 * Records that this checkout has shown every verdict up to the log as last folded, so that a resumed
 * `run` prints only those decided after it (`showVerdictsWhileAway`).
 */
async function noteVerdictsShown(session: Session): Promise<void> {
  const seq = session.folded?.seq;
  if (seq === undefined || seq <= (session.workspace.seen_seq ?? -1)) return;
  session.workspace = { ...session.workspace, seen_seq: seq };
  await saveWorkspaceState(session.repo, session.source, session.workspace);
}

/** How many of the verdicts decided while a run was away it prints on resume; the rest are counted. */
const AWAY_VERDICTS_SHOWN = 20;

/**
 * Prints first, when a run resumes, the verdicts the loop reached while it was away — another runner's
 * evaluation of its candidate, a loop that halted meanwhile — from the log after the last one this
 * checkout showed, and records them as shown. Answers whether it could: a state written before runs
 * recorded what they showed shows none, and starts recording.
 */
export async function showVerdictsWhileAway(session: Session): Promise<boolean> {
  const seen = session.workspace.seen_seq;
  if (seen === undefined) {
    // Recorded from now on: the next resume knows what this one found.
    session.workspace = { ...session.workspace, seen_seq: session.loop.head.seq };
    await saveWorkspaceState(session.repo, session.source, session.workspace);
    return false;
  }
  if (seen >= session.loop.head.seq) return true;
  const events = (await session.client.eventLines(session.loop.loop_id, seen)).map((line) => LoopEvent.parse(JSON.parse(line)));
  const verdicts = events.flatMap((event) => (event.type === "verdict" && event.data.decision !== "need_samples" ? [event.data] : []));
  if (verdicts.length > 0) {
    progress(session.mode, `while this run was away, the loop decided ${verdicts.length} candidate(s):`);
    const shown = verdicts.slice(-AWAY_VERDICTS_SHOWN);
    if (shown.length < verdicts.length) progress(session.mode, `  (${verdicts.length - shown.length} earlier ones: loopwarden watch lists them)`);
    for (const verdict of shown) progress(session.mode, verdictLine("away", verdict));
  }
  const last = events.at(-1)?.seq;
  if (last !== undefined) {
    session.workspace = { ...session.workspace, seen_seq: last };
    await saveWorkspaceState(session.repo, session.source, session.workspace);
  }
  return true;
}

/**
 * Waits for the working tree's return to the best commit that `decideCandidate` left running, and
 * answers its failure, if any: due before anything else moves the loop's branch, and before the
 * process ends.
 */
export async function workingTreeRestored(session: Session): Promise<void> {
  const restoring = session.restoring;
  session.restoring = undefined;
  await restoring;
}

/**
 * Proposes a committed candidate (idempotently, by its key), has it decided, and applies the verdict:
 * a promotion stays on the branch; a rejection is kept under its ref and the tree goes back to the best.
 * With `restoreLater`, the tree's return is left running (`session.restoring`) for the caller to await
 * with `workingTreeRestored`: `run` overlaps it with the next agent run, which works in a workspace of
 * its own and never reads the working tree. A runner killed meanwhile finds the rejected candidate at
 * HEAD and applies its verdict again (`settleInterruptedIteration`).
 */
export async function decideCandidate(
  session: Session,
  proposal: ProposeCandidateRequest,
  iteration: number,
  options: { restoreLater?: boolean } = {},
): Promise<Verdict> {
  const pending = pendingProposalFile(session, proposal.idempotency_key);
  await mkdir(path.dirname(pending), { recursive: true });
  await writeFile(pending, JSON.stringify(proposal));
  try {
    // The answer carries what the log gained since the last fold (this proposal, its lease): no read of
    // the log is needed to know the state.
    const after = session.folded?.seq;
    const propose = (request: ProposeCandidateRequest) => session.client.proposeCandidate(session.loop.loop_id, request, after);
    const proposed = await timed("propose", () =>
      propose(proposal).catch(async (error: unknown) => {
        // Refused for its inline bundle (S3 mode, an older coordinator, the loop's quota): sent again with
        // the bundle uploaded first, where a refusal is the upload's own. The proposal is the same one.
        const refusal = proposal.evidence ? evidenceRefusal(error) : null;
        if (!refusal) throw error;
        if (refusal === "not_taken") session.client.refuseEvidence();
        return propose(await withBundleUploaded(session.client, session.loop.loop_id, proposal));
      }),
    );
    foldAnswered(session, after, proposed.events);
    session.loop = proposed.loop;
    // An evaluation begun ahead that the answer did not lease (the loop halted, another job came first,
    // the candidate was judged unevaluated) is stopped now, not left running until the verdict.
    if (proposed.lease?.job.commit !== proposal.commit) await dropCloneAhead(session.repo, proposal.commit);
    let verdict = proposed.candidate.verdict;
    if (!verdict) {
      const decided = await timed("evaluate", () => evaluateUntilDecided(session, proposed.candidate.candidate_id, iteration, proposed.lease));
      verdict = decided.verdict;
      session.loop = decided.loop;
    }
    progress(session.mode, verdictLine(iteration, verdict));
    await noteVerdictsShown(session);
    if (verdict.decision === "rejected") {
      // Why, in the gates' own terms, and where the output is (a candidate rejected unevaluated has no
      // report): read from the log while the working tree is restored.
      // A candidate that changed nothing is the best commit's tree again: there is nothing to keep of it.
      const ref = verdict.reason === "no_change" ? null : rejectedRef(session.loop.loop_id, verdict.candidate_id);
      const best = session.loop.best.commit;
      const restoring = timed("revert", () => revertTo(session.repo, best, ref ? { ref, commit: proposal.commit } : null));
      // Awaited by whoever waits for it, but never an unhandled rejection meanwhile.
      restoring.catch(() => undefined);
      if (options.restoreLater) {
        session.restoring = restoring;
        faultPoint("restore-begun");
      }
      const [state] = await Promise.all([stateAtHead(session), options.restoreLater ? null : restoring]);
      const why = failureLine(state.candidates[verdict.candidate_id]);
      if (why) progress(session.mode, `[${iteration}]   ${why}`);
      progress(
        session.mode,
        `[${iteration}] ${options.restoreLater ? "the working tree goes back" : "restored the working tree"} to ${shortCommit(best)}; ${ref ? `the candidate is kept at ${ref}` : "the candidate changed nothing, so nothing of it is kept"}`,
      );
    }
    await rm(pending, { force: true });
    return verdict;
  } finally {
    await dropCloneAhead(session.repo, proposal.commit);
  }
}
