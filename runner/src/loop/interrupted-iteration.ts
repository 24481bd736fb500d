import { readFile } from "node:fs/promises";
import { formatList } from "#shared/format-list.js";
import { ProposeCandidateRequest } from "#shared/wire/api.js";
import { candidateTrailers } from "./candidate-commits.js";
import { UserError } from "../errors.js";
import { foldLoop } from "./event-log.js";
import { dirtyPaths, headCommit, shortCommit } from "../process/git.js";
import { loopBranch, rejectedRef, revertTo, setAsideChanges } from "../process/git-commits.js";
import { verdictLine } from "./lease-job.js";
import { progress } from "../output.js";
import { buildProposal, decideCandidate, pendingProposalFile, type Session } from "./session.js";

// Recovery after an interruption (DESIGN §6.6): the iteration in flight is settled before anything else.

/** Where an interrupted iteration's edits and undecided candidates are kept (nothing is ever lost). */
function interruptedRefPrefix(session: Session): string {
  return `refs/loopwarden/interrupted/${session.loop.loop_id}`;
}

/**
 * After an interruption (DESIGN §6.6): sets aside an interrupted agent run's uncommitted edits, then
 * settles the candidate HEAD holds when it is not the best commit. One the coordinator already judged
 * has its verdict applied (a crash may have come between the verdict and the revert); one not yet
 * judged is proposed again — idempotently, by the key in its trailers, so never registered twice — and
 * decided, or, when the loop has halted meanwhile, discarded: kept under its interrupted ref, and the
 * tree restored to the best-so-far. `shownOnResume`: the verdicts decided while the run was away were
 * printed already (`showVerdictsWhileAway`), so a judged candidate's is not printed again.
 */
export async function settleInterruptedIteration(session: Session, shownOnResume = false): Promise<void> {
  const dirty = await dirtyPaths(session.repo);
  if (dirty.length > 0) {
    const ref = `${interruptedRefPrefix(session)}/${Date.now()}`;
    await setAsideChanges(session.repo, ref, `loopwarden: edits of an interrupted iteration of ${session.loop.loop_id}`);
    progress(session.mode, `set aside the uncommitted edits of an interrupted iteration (${formatList(dirty)}) at ${ref}`);
  }
  const head = await headCommit(session.repo);
  const best = session.loop.best.commit;
  if (head === best) return;
  const trailers = await candidateTrailers(session, head);
  if (!trailers) {
    throw new UserError(
      `HEAD (${shortCommit(head)}) on ${loopBranch(session.loop.loop_id)} is neither the loop's best commit nor one of its candidates; reset the branch to ${shortCommit(best)} or start a new loop`,
    );
  }
  const state = await foldLoop(session);
  const known = Object.values(state.candidates).find((candidate) => candidate.idempotency_key === trailers.key);
  if (known?.verdict) {
    if (!shownOnResume) progress(session.mode, verdictLine(trailers.iteration, known.verdict));
    const ref = known.verdict.reason === "no_change" ? null : rejectedRef(session.loop.loop_id, known.candidate_id);
    await revertTo(session.repo, best, ref ? { ref, commit: head } : null);
    progress(
      session.mode,
      `[${trailers.iteration}] restored the working tree to ${shortCommit(best)}; ${ref ? `the candidate is kept at ${ref}` : "the candidate changed nothing, so nothing of it is kept"}`,
    );
    return;
  }
  if (session.loop.status !== "running") {
    const ref = `${interruptedRefPrefix(session)}/${trailers.key}`;
    await revertTo(session.repo, best, { ref, commit: head });
    progress(
      session.mode,
      `[${trailers.iteration}] the loop halted before the interrupted candidate at ${shortCommit(head)} was judged: kept at ${ref}, the working tree restored to ${shortCommit(best)}`,
    );
    return;
  }
  progress(
    session.mode,
    `[${trailers.iteration}] finishing the interrupted candidate ${known?.candidate_id ?? "(not yet registered)"} at ${shortCommit(head)}`,
  );
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
