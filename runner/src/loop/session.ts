import { mkdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { labelsSatisfy, LoopEvent, type AgentRun, type BundleRef, type Proposer, type Verdict } from "#shared/engine/index.js";
import type { AgentReport } from "#shared/wire/agent-report.js";
import type { ContextManifest, ReviewRequest } from "#shared/wire/review.js";
import type { InlineEvidence, ProposeCandidateRequest } from "#shared/wire/api.js";
import { cloneAhead, dropCloneAhead, evaluationStarted, type Clone } from "../evaluation/clone.js";
import { contractFileOf } from "../contract/contract-file.js";
import { evaluateIn } from "../evaluation/evaluate.js";
import type { GateHooks } from "../evaluation/evaluation.js";
import { readGuardsBeforeGates } from "../evaluation/guard-readings.js";
import { committedFiles, committedFilesAfter, trackedFiles } from "../evaluation/protected-files.js";
import { faultPoint } from "../fault.js";
import { shortCommit } from "../process/git.js";
import { diffOf, rejectedRef, revertTo, type Diff, type PathChange } from "../process/git-commits.js";
import { evaluateUntilDecided, verdictLine } from "./lease-job.js";
import { progress } from "../output.js";
import { failureLine } from "#shared/explain/gate-failure.js";
import { diffSummary } from "./agent-context.js";
import { candidateDiff } from "./context-input.js";
import { timed } from "../timings.js";
import { foldAnswered, stateAtHead } from "./event-log.js";
import { RecentPromises } from "../process/recent-promises.js";
import { bundleOf, proposalBundle, withBundleUploaded } from "./candidate-bundles.js";
import { evidenceRefusal } from "../evaluation/artifact-files.js";
import { saveWorkspaceState } from "./workspace.js";
import type { Session } from "./session-type.js";

// `Session` lives in session-type.ts, so that the modules this one calls (lease-job.ts,
// candidate-commits.ts) can name it without importing this file back; re-exported for its callers.
export type { Session };

// What `run` and `step` share once a loop is open (loop-opening.ts opens it): a candidate proposed,
// evaluated (begun before its lease when this runner evaluates it), and the coordinator's verdict applied
// to the working tree; and what a resumed run shows of the verdicts reached while it was away.

/** Where a proposal waits until its verdict is applied, so a restarted runner re-sends it byte for byte. */
export function pendingProposalFile(session: Session, key: string): string {
  return path.join(session.repo, ".loopwarden", "proposals", `${key}.json`);
}

function agentFailed(agent: AgentRun | null): boolean {
  return agent !== null && (agent.timed_out || agent.exit_code !== 0);
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
 * change something (`change`), its gates run while it is proposed. The proposal asks for the lease too,
 * which is this runner's, for this candidate, unless the loop halted or another job was queued first;
 * then the evaluation is stopped unused (decideCandidate gives the clone back, as it does when an empty
 * candidate is rejected unevaluated). The verdict is still the coordinator's, on what the leased job
 * reports (DESIGN §4, invariant 1).
 */
export function beginOwnEvaluation(session: Session, commit: string, change?: { empty: boolean; paths?: Promise<PathChange[]> }): void {
  const { contract } = session.loaded;
  const guards = { contractFile: contractFileOf(session.loaded), baseline: session.loop.t0.commit };
  // Its files are listed from the commit while the clone is checked out, not from the checkout after it
  // (issue 30: a git process fewer before the gates start); from the checkout should that fail. A
  // candidate committed from a workspace has its files from the best's and the paths it changed, read
  // with its patch: no listing of its own.
  const committed = change?.paths ? committedFilesAfter(session.repo, session.loop.best.commit, commit, change.paths) : committedFiles(session.repo, commit);
  committed.catch(() => undefined);
  cloneAhead(session.repo, commit, {
    readGuards: (dir) => readGuardsBeforeGates(dir, contract, { ...guards, tracked: committed.catch(() => trackedFiles(dir)) }),
    ...(change && !change.empty ? { evaluate: (clone: Clone, hooks: GateHooks) => evaluateIn(clone, { contract, guards, ...hooks }) } : {}),
  });
  // Its bundle, when its proposal carries one, is begun as soon as its first gate has started, while
  // the loop's branch still moves to it (issue 30).
  if (change && !change.empty && carriesBundle(session)) candidateBundle(session, commit).catch(() => undefined);
}

/**
 * Whether a proposal travels with its commits as a bundle, so a runner in another checkout can evaluate
 * it: on a shared coordinator (--server), or when the contract asks for runner labels. On the local
 * coordinator this process evaluates its own candidates, and a bundle would only cost time (a git spawn
 * and an upload an iteration).
 */
function carriesBundle(session: Session): boolean {
  return !session.connection.local || session.loaded.contract.evaluate !== undefined;
}

// Bundles of candidates begun before their proposals are built (`beginOwnEvaluation`), by repository and
// commit; the proposal takes its own. One never taken (the commit's branch could not move) is let go,
// never uploaded: only the proposal sends it.
const bundles = new RecentPromises<Buffer>(2);

/**
 * The bundle of `commit` (`bundleOf`), begun once an evaluation begun ahead of it has its clone checked
 * out, its guards read and its first gate started: the bundle, which only needs to arrive before the
 * report, does not compete with them for the machine.
 */
function candidateBundle(session: Session, commit: string): Promise<Buffer> {
  return bundles.get(`${path.resolve(session.repo)}\0${commit}`, async () => {
    await evaluationStarted(session.repo, commit);
    return bundleOf(session.repo, commit, session.loop.t0.commit);
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
    /** The agent's request to change protected files: the candidate then waits for a person, unevaluated. */
    review?: ReviewRequest | null;
    /** The context the agent run was given. */
    context?: ContextManifest | null;
  },
): Promise<ProposeCandidateRequest> {
  const failed = agentFailed(candidate.agent);
  // A candidate that asks for a review is evaluated only once a person acknowledged it: no lease now.
  const evaluatesOwn = evaluatesOwnCandidate(session, candidate.agent) && !candidate.review;
  if (evaluatesOwn) beginOwnEvaluation(session, candidate.commit, candidate.diff);
  // Its one-line summary for the agent's history, and its diff for the agent's context, are ready by the next iteration.
  void diffSummary(session.repo, session.loop.best.commit, candidate.commit);
  void candidateDiff(session.repo, session.loop.best.commit, candidate.commit);
  try {
    // A candidate another runner may evaluate travels with its commits as a bundle (`carriesBundle`). One
    // the coordinator rejects unevaluated — its agent failed, or it turns out empty — needs none; the
    // bundle is made (and, unless it is small enough to travel inside the proposal, sent) while the diff
    // is taken, as only an empty candidate (the rarer case) turns out not to need it.
    // An evaluation begun ahead has its clone checked out and its guards read first: the bundle and the
    // proposal, which only need to arrive before the report, do not compete with them for the machine.
    await evaluationStarted(session.repo, candidate.commit);
    const bundling =
      failed || !carriesBundle(session)
        ? null
        : proposalBundle(
            session.client,
            session.loop.loop_id,
            session.repo,
            candidate.commit,
            session.loop.t0.commit,
            candidateBundle(session, candidate.commit),
          );
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
      ...(candidate.review ? { review_request: candidate.review } : {}),
      ...(candidate.context ? { context: candidate.context } : {}),
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
  if (seq !== undefined && seq > (session.workspace.seen_seq ?? -1)) await recordShownUpTo(session, seq);
}

/** Keeps in `.loopwarden/state.json` that this checkout has shown the loop's verdicts up to event `seq`. */
async function recordShownUpTo(session: Session, seq: number): Promise<void> {
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
    await recordShownUpTo(session, session.loop.head.seq);
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
  if (last !== undefined) await recordShownUpTo(session, last);
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
    // Recorded while the working tree goes back (only this run writes the state file meanwhile).
    const noted = noteVerdictsShown(session);
    noted.catch(() => undefined);
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
    await Promise.all([noted, rm(pending, { force: true })]);
    return verdict;
  } finally {
    await dropCloneAhead(session.repo, proposal.commit);
  }
}
