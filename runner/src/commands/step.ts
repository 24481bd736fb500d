import type { ServerOptions } from "../coordinator/connect.js";
import { useCommandHelper } from "../process/spawner.js";
import { UserError } from "../errors.js";
import { dirtyPaths } from "../process/git.js";
import { progress, type OutputMode } from "../output.js";
import { commitCandidate, maintainAfterCandidates } from "../loop/candidate-commits.js";
import type { ContractOptions } from "../contract/contract-resolution.js";
import { buildProposal, decideCandidate } from "../loop/session.js";
import { enterLoopBranch, openSession } from "../loop/loop-opening.js";
import { HALTED_BEFORE, reportOutcome } from "./run.js";
import { preflightZones } from "../zones/isolation.js";

/**
 * `loopwarden step`: evaluates the current working tree as one candidate and applies the verdict, for
 * agents that drive the loop themselves. Creates the loop (t0 = HEAD) on first use.
 */
export async function stepLoop(options: ContractOptions & ServerOptions & OutputMode & { cwd: string; labels?: string | undefined }): Promise<number> {
  // Many git commands follow: run from a small helper process (spawner.ts).
  useCommandHelper();
  const session = await openSession({ ...options, purpose: "step" });
  try {
    if (session.loop.status !== "running") {
      progress(session.mode, HALTED_BEFORE);
      return reportOutcome(session.mode, session.loop, session.connection);
    }
    // `step` runs no agent (the agent driving it is outside loopwarden's zones); its gates run confined.
    const unconfined = await preflightZones(session.loaded.contract);
    if (unconfined) progress(session.mode, unconfined);
    if ((await dirtyPaths(session.repo)).length === 0) {
      throw new UserError("the working tree has no changes to evaluate; make a change, then run loopwarden step", 2);
    }
    await enterLoopBranch(session);
    const iteration = session.loop.iteration + 1;
    const { commit, key, diff } = await commitCandidate(session, iteration, null);
    await decideCandidate(session, await buildProposal(session, { commit, key, diff, proposer: { kind: "step" }, agent: null }), iteration);
    await maintainAfterCandidates(session);
    return reportOutcome(session.mode, session.loop, session.connection);
  } finally {
    await session.connection.close();
  }
}
