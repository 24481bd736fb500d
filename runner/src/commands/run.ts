import { useCommandHelper } from "../process/spawner.js";
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { parseDuration } from "#shared/duration.js";
import { contextBudget, HALT_EXIT_CODES, labelsSatisfy } from "#shared/engine/index.js";
import type { LoopSummary, ProposeCandidateRequest } from "#shared/wire/api.js";
import type { Connection, ServerOptions } from "../coordinator/connect.js";
import type { CommandResult } from "../process/exec.js";
import { isHaltedMeanwhile, UserError } from "../errors.js";
import { currentBranch } from "../process/git.js";
import { loopBranch, type PathChange } from "../process/git-commits.js";
import { emitResult, paint, progress, type OutputMode } from "../output.js";
import { agentEnv, readAgentReport, readReviewRequest, writeAgentContext, type AgentFiles } from "../loop/agent-context.js";
import type { ContextManifest } from "#shared/wire/review.js";
import { buildAgentContext, manifestOf } from "../loop/context-input.js";
import { commitWorkspace, maintainAfterCandidates } from "../loop/candidate-commits.js";
import type { ContractOptions } from "../contract/contract-resolution.js";
import { confirmAgainstT0 } from "../loop/confirm-job.js";
import { stateAtHead } from "../loop/event-log.js";
import { takeTimings, timed } from "../timings.js";
import { settleInterruptedIteration } from "../loop/interrupted-iteration.js";
import {
  beginOwnEvaluation,
  buildProposal,
  decideCandidate,
  evaluatesOwnCandidate,
  showVerdictsWhileAway,
  workingTreeRestored,
  type Session,
} from "../loop/session.js";
import { enterLoopBranch, openSession } from "../loop/loop-opening.js";
import { recheckBeforeAgent } from "../loop/recheck.js";
import { checkoutTreeAhead, dropCloneAhead, dropPreparedClone } from "../evaluation/clone.js";
import { prepareEvaluationClone } from "../evaluation/evaluate.js";
import type { AgentRun } from "#shared/engine/index.js";
import type { AgentConfinement } from "#shared/wire/confinement.js";
import { closeAgentZone, makeWorkspace, prepareWorkspace, removeWorkspace, runAgentInZone, warmAgentZone, type Workspace } from "../zones/agent-zone.js";
import { preflightZones } from "../zones/isolation.js";
import { scopeLine } from "../contract/scope.js";
import type { Contract } from "#shared/wire/contract.js";
import { zoneChecks } from "./doctor-zones.js";
import { loginLinkLine } from "./serve.js";

/** What `run` and `step` add when the loop they found had already halted (DESIGN §6.6). */
export const HALTED_BEFORE = "this loop had already halted, so no iteration was run; `loopwarden run --new` starts another loop (from a commit you made)";

/** Options of `loopwarden run`. */
export interface RunOptions extends ContractOptions, ServerOptions, OutputMode {
  once?: boolean;
  cwd: string;
  /** `--labels`: this machine's runner labels (DESIGN §11). */
  labels?: string | undefined;
}

/**
 * Prints a loop's halt (or, with `--once`, where it stands) and answers the exit code (DESIGN §7). A
 * halted loop's final receipt is named by its URL on `connection`'s coordinator.
 */
export function reportOutcome(mode: OutputMode, loop: LoopSummary, connection: Pick<Connection, "url" | "ephemeral">): number {
  const halt = loop.halt;
  if (!halt) {
    emitResult(mode, { status: "running", loop_id: loop.loop_id, iteration: loop.iteration }, [
      `loop ${loop.loop_id} is running: ${loop.iteration} of ${loop.max_iterations} iterations, best ${loop.best.candidate_id} with ${loop.best.failing} failing`,
    ]);
    return 0;
  }
  const exitCode = HALT_EXIT_CODES[halt.halt_reason];
  const receiptUrl = loop.receipt_id ? `${connection.url}/r/${loop.receipt_id}` : null;
  emitResult(
    mode,
    {
      status: "halted",
      loop_id: loop.loop_id,
      iteration: loop.iteration,
      halt_reason: halt.halt_reason,
      exit_class: exitCode,
      ...(halt.still_improving === undefined ? {} : { still_improving: halt.still_improving }),
      ...(receiptUrl ? { receipt_url: receiptUrl } : {}),
    },
    [
      `loop ${loop.loop_id} halted: ${paint(halt.halt_reason, halt.halt_reason === "success_condition_met" ? "green" : "yellow")} (exit ${exitCode}) after ${loop.iteration} iteration(s)`,
      `  ${halt.detail}`,
      `  best: ${loop.best.candidate_id} at ${loop.best.commit.slice(0, 10)}${loop.iteration > 0 ? ` on branch ${loopBranch(loop.loop_id)}` : ""}`,
      ...(receiptUrl ? [`  receipt: ${receiptUrl}`, `  verify it: loopwarden verify ${receiptUrl}`] : []),
      `  dashboard: ${connection.url}/loops/${loop.loop_id}`,
      ...(receiptUrl && connection.ephemeral
        ? [`  (this run's local coordinator stops now: \`loopwarden serve\` serves the receipt at http://127.0.0.1:8787/r/${loop.receipt_id})`]
        : []),
    ],
  );
  return exitCode;
}

/**
 * On the local coordinator, a one-time link that opens the loop's dashboard page logged in (DESIGN §11).
 * Not for a shared coordinator: a login link in a CI log would be a credential there. A coordinator that
 * cannot mint one (an older version) leaves the run as it is.
 */
async function printDashboardLink(session: Session): Promise<void> {
  if (!session.connection.local || session.loop.status !== "running") return;
  const link = await session.client.loginLink(`/loops/${session.loop.loop_id}`).catch(() => null);
  if (link) progress(session.mode, `dashboard: ${loginLinkLine(link)}`);
}

/**
 * `doctor`'s checks of the agent's zone, run before the first agent (DESIGN §6.7): what would make every
 * agent run fail (a model CLI with no network to reach its model) refuses the run with doctor's words;
 * a warning (a credential store mounted, a variable not set) is printed and the run goes on.
 */
async function preflightAgent(contract: Contract, mode: OutputMode): Promise<void> {
  for (const check of await zoneChecks(contract)) {
    if (check.check === "zones") continue; // preflightZones said it already
    if (check.status === "fail") throw new UserError(`${check.check}: ${check.detail} (loopwarden doctor checks this too)`, 2);
    if (check.status === "warn") progress(mode, paint(`${check.check}: ${check.detail}`, "yellow"));
  }
}

/**
 * Commits the tree an agent run left in its workspace as the iteration's candidate and builds its
 * proposal, with how the run ended and how it was confined.
 */
async function proposeFromWorkspace(
  session: Session,
  workspace: Workspace,
  iteration: number,
  agent: CommandResult,
  confinement: AgentConfinement,
  files: AgentFiles,
  context: ContextManifest | null,
): Promise<ProposeCandidateRequest> {
  // The last rejection's return to the best commit, overlapped with this agent run, is done before the
  // branch moves to the candidate; the candidate's commit object, which needs neither the branch nor the
  // working tree, is written meanwhile (issue 30). Keeping and reverting move only the loop's branch. A
  // confined agent cannot reach the repository; an unconfined one could have switched it to one of the
  // user's branches, which must then not move.
  const beforeBranchMoves = async () => {
    await workingTreeRestored(session);
    const branch = await currentBranch(session.repo);
    if (branch !== loopBranch(session.loop.loop_id)) {
      throw new UserError(
        `the working tree is no longer on the loop's branch (it is on ${branch ?? "a detached HEAD"}); loopwarden stopped without moving any branch or resetting anything. Switch back with git switch ${loopBranch(session.loop.loop_id)} and run again`,
      );
    }
  };
  const agentRun: AgentRun = { exit_code: agent.exit_code, timed_out: agent.timed_out, duration_ms: agent.duration_ms, confinement };
  // The candidate's clone is begun while it is committed (the agent's zone is gone with every process
  // it started, so nothing of it can touch the clone): only its checkout waits for the commit, and its
  // evaluation begins as soon as the commit exists.
  // A request to change protected files holds the candidate for a person's answer (docs/design.md §6.8):
  // it is not evaluated until then.
  const review = await readReviewRequest(files.requests);
  if (review.error) progress(session.mode, `[${iteration}] ${review.error}; not sent, so the candidate is judged as it is`);
  const evaluatesOwn = evaluatesOwnCandidate(session, agentRun) && !review.request;
  if (evaluatesOwn) prepareEvaluationClone(session.repo, session.loaded.contract);
  let begun: string | null = null;
  try {
    const report = await readAgentReport(workspace.dir, files.report);
    if (report.error) progress(session.mode, `[${iteration}] ${report.error}; not recorded`);
    const onCommitted = (commit: string, change: { empty: boolean; paths: Promise<PathChange[]> }) => {
      begun = commit;
      beginOwnEvaluation(session, commit, change);
    };
    // The candidate's tree is checked out in its clone while its commit is written (issue 30).
    const onTree = (tree: string) => checkoutTreeAhead(session.repo, tree);
    const { commit, key, diff } = await timed("commit", () =>
      commitWorkspace(session, workspace, iteration, agentRun, evaluatesOwn ? { onTree, onCommitted, beforeBranchMoves } : { beforeBranchMoves }),
    );
    const proposer = { kind: "command" as const, command: session.loaded.contract.agent.run };
    return await timed("bundle", () => buildProposal(session, { commit, key, diff, proposer, agent: agentRun, report, review: review.request, context }));
  } catch (error) {
    // A candidate whose evaluation began but that is never proposed (its branch could not move) is not evaluated on.
    if (begun !== null) await dropCloneAhead(session.repo, begun);
    throw error;
  } finally {
    // Taken by the candidate's clone by now, unless the commit failed.
    await dropPreparedClone(session.repo);
  }
}

/**
 * `loopwarden run`: create or resume the loop, then agent → candidate → evaluate → verdict → keep or
 * revert, until a halt (or one iteration with `--once`). Exits with the halt's class.
 */
export async function runLoop(options: RunOptions): Promise<number> {
  // Many git commands follow: run from a small helper process (spawner.ts).
  useCommandHelper();
  // A new loop's zones are checked before its baseline is measured and the loop created.
  const preflight = async (contract: Contract) => {
    if ((await preflightZones(contract)) === null) await preflightAgent(contract, options);
  };
  const session = await openSession({ ...options, purpose: "run", preflight });
  const { mode } = session;
  try {
    await printDashboardLink(session);
    const shownOnResume = session.resumed && (await showVerdictsWhileAway(session));
    if (session.loop.status === "running") {
      await enterLoopBranch(session);
      if (session.resumed) await settleInterruptedIteration(session, shownOnResume);
    } else if ((await currentBranch(session.repo)) === loopBranch(session.loop.loop_id)) {
      // Halted while an iteration was in flight: its candidate is settled all the same.
      await settleInterruptedIteration(session, shownOnResume);
    }
    const opened = takeTimings();
    if (opened) process.stderr.write(`[start] ${opened}\n`);
    const agentTimeoutMs = parseDuration(session.loaded.contract.agent.timeout) ?? 1_200_000;
    const logDir = path.join(session.repo, ".loopwarden", "logs", session.loop.loop_id);
    await mkdir(logDir, { recursive: true });

    const { contract } = session.loaded;
    const unconfined = session.loop.status === "running" ? await preflightZones(contract) : null;
    if (unconfined) progress(mode, paint(unconfined, "yellow"));
    // A resumed loop's pinned contract is checked here (a new one's was, before it was created).
    else if (session.loop.status === "running" && session.resumed) await preflightAgent(contract, mode);
    if (session.loop.status === "running") progress(mode, contract.scope ? scopeLine(contract) : paint(scopeLine(contract), "yellow"));

    let ran = 0;
    const runningAtStart = session.loop.status === "running";
    while (session.loop.status === "running" && !(options.once && ran > 0)) {
      const iteration = session.loop.iteration + 1;
      // The check must still give the best's recorded outcome: re-run on resume and when due (DESIGN §6.5).
      session.loop = await recheckBeforeAgent(session, iteration, ran === 0 && session.resumed);
      if (session.loop.status !== "running") break;
      const command = contract.agent.run;
      // No live line while the agent runs: its own output, streamed to stderr, is the progress.
      progress(mode, `[${iteration}] running the agent${unconfined ? " UNCONFINED" : ""}: ${command}`);
      // A workspace of its own, a clone of the best so far (DESIGN §6.7): the agent never touches the
      // user's repository, and the runner reads back only the tree it leaves.
      const workspace = await timed("workspace", () => makeWorkspace(session.repo, session.loop.best.commit, session.loop.loop_id));
      // A confined agent cannot see the evaluation clones (DESIGN §6.7), so the candidate's clone is begun
      // while it works, and the zone of its first gate with it (warm-zones.ts), unless both were begun
      // while the last candidate was decided; an unconfined one could plant something in it, so its clone
      // waits for it to end.
      if (!unconfined && evaluatesOwnCandidate(session, null)) prepareEvaluationClone(session.repo, contract);
      let proposal: ProposeCandidateRequest;
      try {
        const state = await stateAtHead(session);
        const files = await timed("context", () => writeAgentContext(session.repo, state, workspace.dir));
        // What the agent is told of where to look, within its budget (docs/agent.md); a budget the first
        // tier does not fit in halts the loop before the agent runs.
        const built = await timed("context", () => buildAgentContext(session, state, workspace, files.context));
        if (built.status === "unsatisfiable") {
          progress(
            mode,
            `[${iteration}] the agent's context needs ${built.needed} tokens for its first tier, over agent.context.budget ${built.budget}: the agent is not run`,
          );
          const answer = await session.client.contextUnsatisfiable(session.loop.loop_id, {
            runner_id: session.workspace.runner_id,
            tier: built.tier,
            needed: built.needed,
            budget: built.budget,
          });
          session.loop = answer.loop;
          break;
        }
        const context = manifestOf(built, contextBudget(state));
        const zoned = await timed("agent", () =>
          runAgentInZone({
            repo: session.repo,
            workspace,
            contract,
            loopEnv: agentEnv(files, session.loop.loop_id, iteration),
            timeoutMs: agentTimeoutMs,
            onOutput: mode.quiet || mode.json ? undefined : (chunk: Buffer) => process.stderr.write(chunk),
            onNote: (text) => progress(mode, `[${iteration}] ${text}`),
          }),
        );
        const agent = zoned.result;
        await writeFile(path.join(logDir, `agent-${iteration}.log`), agent.output);
        for (const host of zoned.confinement.hosts ?? []) {
          if (!host.allowed) progress(mode, `[${iteration}] the agent asked for ${host.host}:${host.port}, which agent.network.allow does not list: refused`);
        }
        proposal = await proposeFromWorkspace(session, workspace, iteration, agent, zoned.confinement, files, context);
      } finally {
        removeWorkspace(workspace).catch(() => undefined);
        // Unless the candidate's clone took it (an agent run that threw leaves it unused).
        await dropPreparedClone(session.repo);
      }
      // The next agent's workspace is begun while this candidate is decided, and so is the next candidate's
      // clone when the agent is confined (it cannot see it), each with the zone of its first command
      // (warm-zones.ts: a zone built now is not built between the verdict and the next gate).
      if (!options.once) {
        prepareWorkspace(session.repo, session.loop.best.commit);
        warmAgentZone(session.repo, contract);
        if (!unconfined && evaluatesOwnCandidate(session, null)) prepareEvaluationClone(session.repo, contract);
      }
      try {
        await decideCandidate(session, proposal, iteration, { restoreLater: true });
      } catch (error) {
        // Halted meanwhile — another runner's report, a person's cancel: that halt is the run's outcome,
        // and this iteration's candidate, never judged, is kept aside as an interrupted one's would be.
        if (!isHaltedMeanwhile(error)) throw error;
        await workingTreeRestored(session);
        session.loop = await session.client.getLoop(session.loop.loop_id);
        await settleInterruptedIteration(session);
        break;
      }
      ran++;
      const timings = takeTimings();
      if (timings) process.stderr.write(`[${iteration}] ${timings}\n`);
    }
    await workingTreeRestored(session);
    if (ran > 0) await maintainAfterCandidates(session);
    if (ran === 0 && session.resumed && session.loop.halt && !runningAtStart) progress(mode, HALTED_BEFORE);
    // A halted optimize loop's gain over t0 is measured once, here (DESIGN §6.3); a run that resumes a
    // halted loop whose confirm is missing (interrupted) measures it then. Measured where the contract's
    // candidates are: a run without the evaluation labels leaves it to the `work` runner that halted it.
    const required = session.loaded.contract.evaluate?.labels ?? {};
    if (labelsSatisfy(required, session.labels)) session.loop = (await confirmAgainstT0(session)) ?? session.loop;
    else if (session.loop.halt && session.loaded.contract.mode === "optimize") {
      progress(
        mode,
        "the confirm measurement against t0 runs on a machine with the contract's evaluate.labels: the `loopwarden work` runner that reported the halt measures it",
      );
    }
    return reportOutcome(mode, session.loop, session.connection);
  } finally {
    // A run that stops on an error still leaves the working tree at the best commit (the error it stops on is the one reported).
    await workingTreeRestored(session).catch((error: unknown) => progress(mode, `restoring the working tree failed: ${(error as Error).message}`));
    await Promise.all([closeAgentZone(session.repo), dropPreparedClone(session.repo)]);
    await timed("close", () => session.connection.close());
    const closing = takeTimings();
    if (closing) process.stderr.write(`[end] ${closing}\n`);
  }
}
