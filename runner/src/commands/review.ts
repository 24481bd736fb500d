import { BASELINE_ID, foldEvents, LoopEvent, reviewTimeoutMs, type LoopState } from "#shared/engine/index.js";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { resolveTarget } from "../coordinator/target.js";
import { UserError } from "../errors.js";
import { emitResult, paint, type OutputMode } from "../output.js";
import { git, repoRoot } from "../process/git.js";

// The human step (docs/design.md §6.8): `review` shows the candidates whose agent asked to change
// protected files — the request and the diff — and `ack` / `reject` answer one, as the person holding a
// token with the admin or review scope. The agent never holds such a token; nothing it writes answers.

type ReviewOptions = ServerOptions & OutputMode & { cwd: string };

/** The longest diff `review` prints of one candidate; the rest is named with the command that shows it. */
const DIFF_SHOWN = 64 * 1024;

async function foldedLoop(connection: { client: { eventLines(loopId: string): Promise<string[]> } }, loopId: string): Promise<LoopState> {
  const state = foldEvents((await connection.client.eventLines(loopId)).map((line) => LoopEvent.parse(JSON.parse(line))));
  if (!state) throw new UserError(`loop ${loopId} has no events yet`);
  return state;
}

/** The diff of a candidate against its parent, from this repository (where the run that made it committed it), or why not. */
async function diffOf(cwd: string, state: LoopState, candidateId: string): Promise<string> {
  const candidate = state.candidates[candidateId];
  if (!candidate) return "";
  const parent = candidate.parent === BASELINE_ID ? state.t0.commit : (state.candidates[candidate.parent]?.commit ?? state.t0.commit);
  try {
    const repo = await repoRoot(cwd);
    const diff = await git(repo, ["diff", "--no-ext-diff", "--no-color", parent, candidate.commit]);
    return diff.length > DIFF_SHOWN
      ? `${diff.slice(0, DIFF_SHOWN)}\n… (git diff ${parent.slice(0, 12)} ${candidate.commit.slice(0, 12)} shows the rest)\n`
      : diff;
  } catch {
    return `(commit ${candidate.commit.slice(0, 12)} is not in this repository: run review where the loop runs, or fetch it)\n`;
  }
}

/**
 * `loopwarden review [LOOP]`: the candidates waiting for a person's answer — which protected files each
 * asks to change, why, until when it waits, and its diff — and the answers given so far.
 */
export async function reviewCommand(loopArg: string | undefined, options: ReviewOptions): Promise<number> {
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const state = await foldedLoop(connection, loopId);
    const waiting = state.candidate_order.map((id) => state.candidates[id]).filter((candidate) => candidate?.status === "awaiting_review");
    const timeout = reviewTimeoutMs(state);
    const requests = await Promise.all(
      waiting.map(async (candidate) => ({
        candidate_id: candidate?.candidate_id ?? "",
        commit: candidate?.commit ?? "",
        files: candidate?.review_request?.files ?? [],
        why: candidate?.review_request?.why ?? "",
        deadline: new Date(Date.parse(candidate?.proposed_at ?? "") + timeout).toISOString(),
        diff: await diffOf(options.cwd, state, candidate?.candidate_id ?? ""),
      })),
    );
    const lines: string[] = [];
    if (requests.length === 0) lines.push(`loop ${loopId}: no candidate awaits a review${state.halt ? ` (the loop halted: ${state.halt.halt_reason})` : ""}`);
    for (const request of requests) {
      lines.push(
        `${paint(request.candidate_id, "bold")} at ${request.commit.slice(0, 10)} asks to change ${request.files.join(", ")}`,
        `  why (the agent's words): ${request.why}`,
        `  waits until ${request.deadline}, then the loop halts human_required`,
        `  answer: loopwarden ack ${request.candidate_id} --note "…"   or   loopwarden reject ${request.candidate_id} --note "…"`,
        "",
        request.diff,
      );
    }
    for (const review of state.reviews) {
      lines.push(
        `${review.candidate_id}: ${review.decision === "ack" ? "approved" : "refused"} by ${review.by} at ${review.at} (${review.files.join(", ")}): ${review.note}`,
      );
    }
    emitResult(options, { status: "ok", loop_id: loopId, awaiting: requests, reviews: state.reviews }, lines);
    return 0;
  });
}

/**
 * `loopwarden ack CANDIDATE --note …` / `reject CANDIDATE --note …`: a person's answer to a candidate's
 * request (admin or review scope). `ack` lets exactly the requested files change for that candidate,
 * which is then evaluated and judged; `reject` rejects it. Recorded in the signed log with who answered.
 */
export async function answerReview(
  decision: "ack" | "reject",
  candidateId: string,
  options: ReviewOptions & { loop?: string | undefined; note?: string | undefined },
): Promise<number> {
  const note = options.note?.trim();
  if (!note) throw new UserError(`${decision} needs --note: say why, for the log and the receipt`, 2);
  const { loopId, server } = await resolveTarget(options.loop, options);
  return withConnection(server, options, async (connection) => {
    const answer = await connection.client.reviewCandidate(loopId, candidateId, { decision, note });
    const status = answer.candidate.status;
    emitResult(options, { status: "ok", loop_id: loopId, candidate_id: candidateId, decision, candidate_status: status, replayed: answer.replayed }, [
      `${candidateId} ${decision === "ack" ? "approved: it is evaluated and judged with its change to the requested files allowed" : "rejected"}${answer.replayed ? " (answered so already)" : ""}; now ${status}`,
    ]);
    return 0;
  });
}
