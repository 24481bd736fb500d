import { BASELINE_ID, contextBudget, type CandidateState, type GateSummary, type LoopState } from "#shared/engine/index.js";
import path from "node:path";
import { sha256Hex } from "#shared/hash.js";
import type { ContextManifest } from "#shared/wire/review.js";
import { git } from "../process/git.js";
import { buildContext, type ContextInput, type ContextResult } from "./context-builder.js";
import type { Session } from "./session-type.js";

// What the context builder (context-builder.ts) is given before an agent run (docs/agent.md, "What the
// agent is told"): the last evaluation — its failing and regressed tests, the tails of its failing gates'
// logs, read back from the coordinator where they are stored — and the last candidate's diff and verdict.

/** How much of a failing gate's log the context quotes: its last lines, up to this many bytes. */
const LOG_TAIL_BYTES = 16 * 1024;
const LOG_TAIL_LINES = 200;
/** The most of the last candidate's diff quoted. */
const DIFF_BYTES = 32 * 1024;

/** The last `LOG_TAIL_LINES` lines of a text, within `LOG_TAIL_BYTES`. */
export function tailOf(text: string, bytes = LOG_TAIL_BYTES, lines = LOG_TAIL_LINES): string {
  const cut = text.length > bytes ? text.slice(text.length - bytes) : text;
  const kept = cut.split("\n");
  return kept.slice(Math.max(0, kept.length - lines - (kept.at(-1) === "" ? 1 : 0))).join("\n");
}

/** The last candidate that was evaluated (it has a report), or null before any. */
function lastEvaluated(state: LoopState): CandidateState | null {
  for (let index = state.candidate_order.length - 1; index >= 0; index--) {
    const candidate = state.candidates[state.candidate_order[index] ?? ""];
    if (candidate?.report) return candidate;
  }
  return null;
}

// The log tails of the gates this process's last evaluation produced, by the digest it computed of their
// bytes: the next agent's context quotes the failing ones, which the coordinator would otherwise send
// back, a request between the verdict and the next agent run (issue 30). A digest names the same bytes
// wherever they are, so a tail read here is the tail of what the coordinator stores; another runner's
// evaluation (or a log stored as its tail only) is downloaded as before. One evaluation's logs are kept.
const rememberedTails = new Map<string, string>();

/** Keeps the tails of an evaluation's logs, for the next context to quote without downloading them. */
export function rememberLogTails(logs: readonly { ref: { sha256: string }; bytes: Uint8Array }[]): void {
  rememberedTails.clear();
  for (const log of logs) rememberedTails.set(log.ref.sha256, tailOf(new TextDecoder().decode(log.bytes)));
}

/**
 * The log tails of the gates that failed, as `rememberLogTails` kept them or read from the coordinator and
 * checked against their digest; a log that cannot be read is said so in its place, never left out silently.
 */
export async function failingLogs(
  client: Pick<Session["client"], "downloadArtifact">,
  loopId: string,
  gates: readonly GateSummary[],
): Promise<ContextInput["logs"]> {
  return Promise.all(
    gates
      .filter((gate) => !gate.passed && gate.log)
      .map(async (gate) => {
        const ref = gate.log;
        if (!ref) return { gate: gate.name, text: "" };
        const remembered = rememberedTails.get(ref.sha256);
        if (remembered !== undefined) return { gate: gate.name, text: remembered };
        try {
          const bytes = await client.downloadArtifact(loopId, ref.sha256);
          if (sha256Hex(bytes) !== ref.sha256) return { gate: gate.name, text: `(the stored log does not match its digest ${ref.sha256.slice(0, 12)})` };
          return { gate: gate.name, text: tailOf(new TextDecoder().decode(bytes)) };
        } catch (error) {
          return { gate: gate.name, text: `(the log could not be read: ${(error as Error).message})` };
        }
      }),
  );
}

// The last candidate's diff, taken while it is evaluated (`candidateDiff` from `buildProposal`), so that
// the next agent's context finds it ready instead of running git between the verdict and the agent
// (issue 30). Commits never change, so a diff is the same whenever it is taken; only the last is kept.
let lastDiff: { key: string; diff: Promise<string> } | null = null;

/** The diff from `parent` to `commit` as the agent's context quotes it (taken once, kept for the next context). */
export function candidateDiff(repo: string, parent: string, commit: string): Promise<string> {
  const key = `${path.resolve(repo)}\0${parent}..${commit}`;
  if (lastDiff?.key !== key) {
    const diff = git(repo, ["diff", "--no-ext-diff", "--no-color", parent, commit]).catch(() => "(the diff could not be read from this repository)");
    lastDiff = { key, diff };
  }
  return lastDiff.diff;
}

/** The agent's work tree: where it is, and its tracked files when already listed (`Workspace.tracked`). */
export interface WorkTree {
  dir: string;
  tracked?: Promise<string[]> | undefined;
}

/**
 * The context builder's input for the next agent run, from the loop as folded: the last evaluated
 * candidate's failing tests (those that passed at the best marked regressed) and failing gates' logs, or
 * t0's before any evaluation; the last candidate's diff and verdict.
 */
export async function contextInputFor(session: Session, state: LoopState, workTree: WorkTree): Promise<ContextInput> {
  const evaluated = lastEvaluated(state);
  const failing = evaluated?.report?.tests.failing ?? state.best.failing;
  const regressed = new Set(evaluated?.verdict?.regressed ?? []);
  const gates = evaluated?.report?.gates ?? state.t0_evidence.gates;
  const lastId = state.candidate_order.at(-1);
  const last = lastId ? state.candidates[lastId] : undefined;
  const lastPart = async (): Promise<ContextInput["last"]> => {
    if (!last?.verdict) return null;
    const parent = last.parent === BASELINE_ID ? state.t0.commit : (state.candidates[last.parent]?.commit ?? state.t0.commit);
    const diff = await candidateDiff(session.repo, parent, last.commit);
    return {
      candidate_id: last.candidate_id,
      verdict: `${last.verdict.decision} (${last.verdict.reason}): ${last.verdict.detail}`,
      diff:
        diff.length > DIFF_BYTES
          ? `${diff.slice(0, DIFF_BYTES)}\n… (the diff goes on; git diff ${parent.slice(0, 12)} ${last.commit.slice(0, 12)} shows it whole)`
          : diff,
    };
  };
  // Apart from one another, so read at once.
  const [logs, lastRun] = await Promise.all([failingLogs(session.client, session.loop.loop_id, gates), lastPart()]);
  return {
    tree: workTree.dir,
    ...(workTree.tracked ? { tracked: workTree.tracked } : {}),
    failing: failing.map((id) => ({ id, regressed: regressed.has(id) })),
    logs,
    last: lastRun,
    budget: contextBudget(state),
  };
}

/** The manifest a proposal records of a built context: what the agent was given, file by file. */
export function manifestOf(result: Extract<ContextResult, { status: "built" }>, budget: number): ContextManifest {
  return {
    context_sha256: result.context_sha256,
    files: result.files.map((file) => ({ path: file.path, sha256: file.sha256, tier: file.tier })),
    tokens: result.tokens,
    budget,
    left_out: result.tiers.filter((tier) => !tier.included && tier.tier !== "stack_trace").map((tier) => tier.tier as "import_closure" | "dependents"),
  };
}

/** Builds the agent's context for its next run into `outDir` (see contextInputFor). */
export async function buildAgentContext(session: Session, state: LoopState, workTree: WorkTree, outDir: string): Promise<ContextResult> {
  return buildContext(await contextInputFor(session, state, workTree), outDir);
}
