import { randomBytes } from "node:crypto";
import type { AgentRun } from "#shared/engine/index.js";
import { UserError } from "../errors.js";
import { progress } from "../output.js";
import { readTrailers, shortCommit } from "../process/git.js";
import { diffOf, loopBranch, maintainRepository, snapshotCandidate, snapshotWorkTree, type Diff, type SnapshotHooks } from "../process/git-commits.js";
import type { Workspace } from "../zones/agent-zone.js";
import type { Session } from "./session-type.js";

// Candidate commits (DESIGN §13): each carries trailers naming its loop, iteration and proposal key, so
// a restarted runner can propose it again exactly — and so a candidate is never mistaken for a commit
// the user made (a new loop's baseline must be one).

/** Trailers a candidate commit carries, so a restarted runner can propose it again exactly. */
export const TRAILER = { loop: "Loopwarden-Loop", iteration: "Loopwarden-Iteration", proposal: "Loopwarden-Proposal", agent: "Loopwarden-Agent" } as const;

/**
 * The commit a new loop's t0 may be taken from (DESIGN §6.6): one the user made, never a candidate
 * commit (it carries loopwarden's trailers) nor a loop's branch, where an unjudged proposal may sit.
 */
export async function refuseCandidateBaseline(repo: string, head: string, branch: string | null): Promise<void> {
  const trailers = await readTrailers(repo, head);
  const prefix = loopBranch("");
  const loopId = trailers[TRAILER.loop] ?? (branch?.startsWith(prefix) ? branch.slice(prefix.length) : undefined);
  if (loopId === undefined) return;
  const where = trailers[TRAILER.loop]
    ? `HEAD (${shortCommit(head)}) is a candidate commit of loop ${loopId}`
    : `the working tree is on ${branch}, the branch of loop ${loopId}`;
  throw new UserError(
    `${where}; a new loop's baseline must be a commit you made. Switch to your own branch (git switch main), ` +
      `after merging what you want to keep of the loop (git merge --no-ff ${loopBranch(loopId)})`,
  );
}

/**
 * Commits the working tree as a candidate on the loop branch, with trailers that let a restart re-propose
 * it, and answers its change from the best commit too (taken while the commit is written).
 */
export async function commitCandidate(session: Session, iteration: number, agent: AgentRun | null): Promise<{ commit: string; key: string; diff: Diff }> {
  const key = `cand-${randomBytes(12).toString("hex")}`;
  const best = session.loop.best.commit;
  const { commit, diff } = await snapshotCandidate(session.repo, candidateMessage(session, iteration, key, agent), best);
  return { commit, key, diff: diff ?? (await diffOf(session.repo, best, commit)) };
}

/** A candidate commit's message: its trailers name the loop, the iteration, the proposal and the agent run. */
function candidateMessage(session: Session, iteration: number, key: string, agent: AgentRun | null): string {
  const agentTrailer = agent ? `exit=${agent.exit_code ?? "signal"} timed_out=${agent.timed_out} duration_ms=${agent.duration_ms}` : "none";
  return [
    `loopwarden: candidate of iteration ${iteration}`,
    "",
    `${TRAILER.loop}: ${session.loop.loop_id}`,
    `${TRAILER.iteration}: ${iteration}`,
    `${TRAILER.proposal}: ${key}`,
    `${TRAILER.agent}: ${agentTrailer}`,
    "",
  ].join("\n");
}

/**
 * Commits the tree an agent left in its workspace (DESIGN §6.7) as a candidate on the loop branch, read
 * as data with the runner's own git (`snapshotWorkTree`), with the same trailers as `commitCandidate`;
 * `hooks.onCommitted` hears of the commit before the branch moves to it.
 */
export async function commitWorkspace(
  session: Session,
  workspace: Workspace,
  iteration: number,
  agent: AgentRun | null,
  hooks: SnapshotHooks = {},
): Promise<{ commit: string; key: string; diff: Diff }> {
  const key = `cand-${randomBytes(12).toString("hex")}`;
  const { commit, diff } = await snapshotWorkTree(
    session.repo,
    workspace.dir,
    workspace.index,
    candidateMessage(session, iteration, key, agent),
    session.loop.best.commit,
    hooks,
  );
  return { commit, key, diff };
}

/**
 * Git's automatic maintenance, which candidate commits skip (`snapshotCandidate`): run once when the
 * candidates of a run or a step are settled. A failure is a note, as git's own after a commit is.
 */
export async function maintainAfterCandidates(session: Session): Promise<void> {
  await maintainRepository(session.repo).catch((error: unknown) =>
    progress(session.mode, `git maintenance failed: ${(error as Error).message.split("\n")[0]}`),
  );
}

/** Reads back a candidate commit's trailers; null when the commit is not a candidate of this loop. */
export async function candidateTrailers(session: Session, commit: string): Promise<{ key: string; iteration: number; agent: AgentRun | null } | null> {
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
