import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { z } from "zod";
import { BASELINE_ID, type LoopState, type Verdict } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { AgentReportFile, type AgentReport } from "#shared/wire/agent-report.js";
import { ReviewRequest } from "#shared/wire/review.js";
import { git, OBJECT_ID } from "../process/git.js";

// What the agent is told before each run, and what it may report afterwards (issue "the agent's side").
// Failures are data: the history lets a prompt say "do not retry a rejected direction".

/** The files the agent's environment points at. */
export interface AgentFiles {
  best: string;
  lastVerdict: string;
  history: string;
  report: string;
  /** Where the agent may ask a person to allow a change to protected files (docs/agent.md). */
  requests: string;
  /** The context directory the runner builds before the run (`context.md` and the files it names). */
  context: string;
}

/** The last verdict as the agent reads it. */
export interface LastVerdict extends Verdict {
  failing_tests: string[];
}

/**
 * The tree the agent starts from, as it reads it: the best so far (t0 until a promotion) and what fails
 * there, so even the first run knows what to fix. A rejection's own failing tests (in the last verdict)
 * are the rejected candidate's, not those of the tree the agent was given back.
 */
export interface BestTree {
  candidate_id: string;
  commit: string;
  failing_tests: string[];
  /** Optimize mode: the metric's median reading when it became the best; null otherwise. */
  metric: number | null;
}

/** One line of the history the agent reads. */
export interface HistoryLine {
  candidate_id: string;
  parent: string;
  commit: string;
  status: string;
  reason: string | null;
  detail: string | null;
  diff_summary: string;
  description: string | null;
}

const diffSummaries = new Map<string, Promise<string>>();

const summaryKey = (base: string, commit: string) => `${base}..${commit}`;

/** `diffSummary`'s words for the output of `git diff --numstat` (empty when git could not read the change). */
function summaryOf(numstat: string): string {
  const files = numstat
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [added, removed, file] = line.split("\t");
      return added === "-" ? `${file} (binary)` : `${file} +${added} -${removed}`;
    });
  return files.length === 0 ? "no change" : files.length > 8 ? `${files.slice(0, 8).join(", ")} and ${files.length - 8} more files` : files.join(", ");
}

/**
 * `src/a.ts +3 -1, test/b.ts +10 -0` for the change from `base` to `commit` (cached: commits never
 * change). A runner asks for its candidate's while the candidate is evaluated, so the next iteration's
 * history finds it ready.
 */
export function diffSummary(repo: string, base: string, commit: string): Promise<string> {
  const key = summaryKey(base, commit);
  let summary = diffSummaries.get(key);
  if (!summary) {
    summary = git(repo, ["diff", "--numstat", "--no-renames", base, commit])
      .catch(() => "")
      .then(summaryOf);
    diffSummaries.set(key, summary);
  }
  return summary;
}

/**
 * The `--numstat` output of each change, by `summaryKey`, read by one `git diff-tree --stdin`. Each
 * change goes in as a line `<commit> <base>`; git answers, in the same order, the commit's id followed
 * by its numstat lines, for each change that changes something (nothing at all for one that changes
 * nothing, or that it cannot read).
 */
async function numstatsOf(repo: string, changes: readonly { base: string; commit: string }[]): Promise<Map<string, string>> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "loopwarden-diffs-"));
  try {
    const input = path.join(dir, "changes");
    await writeFile(input, changes.map(({ base, commit }) => `${commit} ${base}\n`).join(""));
    const out = await git(repo, ["diff-tree", "--stdin", "--numstat", "--no-renames"], { stdinFile: input });
    const numstats = new Map<string, string>();
    let next = 0;
    let current: string | null = null;
    for (const line of out.split("\n")) {
      if (OBJECT_ID.test(line)) {
        // The next change of that commit: the output keeps the input's order.
        while (next < changes.length && changes[next]?.commit !== line) next++;
        const change = changes[next++];
        if (!change) throw new Error(`git diff-tree answered a commit it was not asked about: ${line}`);
        current = summaryKey(change.base, change.commit);
        numstats.set(current, "");
      } else if (line !== "" && current !== null) numstats.set(current, `${numstats.get(current) ?? ""}${line}\n`);
    }
    return numstats;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * `diffSummary` of many changes at once, the ones not yet known read by one git process: a run that
 * resumes a loop of thousands of candidates writes its agent's first history without a git process
 * per candidate (issue 30; `npm run bench:history`: 0.27 s at 5,000 candidates, 13.3 s with one each).
 * Should that process fail, each is read by `diffSummary`'s own.
 */
export async function diffSummariesOf(repo: string, changes: readonly { base: string; commit: string }[]): Promise<string[]> {
  const missing = new Map<string, { base: string; commit: string }>();
  for (const change of changes) {
    const key = summaryKey(change.base, change.commit);
    if (!diffSummaries.has(key) && OBJECT_ID.test(change.base) && OBJECT_ID.test(change.commit)) missing.set(key, change);
  }
  if (missing.size > 1) {
    const batch = numstatsOf(repo, [...missing.values()]);
    for (const [key, change] of missing) {
      diffSummaries.set(
        key,
        batch.then(
          (numstats) => summaryOf(numstats.get(key) ?? ""),
          () => {
            diffSummaries.delete(key);
            return diffSummary(repo, change.base, change.commit);
          },
        ),
      );
    }
  }
  return Promise.all(changes.map(({ base, commit }) => diffSummary(repo, base, commit)));
}

/** Where the agent's files are in the tree it works in: ignored by git, as all of `.loopwarden/` is. */
export function agentContextDir(workTree: string): string {
  return path.join(workTree, ".loopwarden", "agent");
}

// Each candidate's line of the history, serialized, by the candidate's state object: the fold gives a
// candidate a new object whenever it changes, and the line depends only on it and t0, so one seen
// before has the same line. Each agent run then serializes what changed, not every candidate of a long
// loop again (issue 30, invariant 9).
const historyLines = new WeakMap<object, { t0: string; line: string }>();

/**
 * Writes `.loopwarden/agent/best.json` (the tree the agent starts from and its failing tests),
 * `last-verdict.json` (null before the first verdict) and `history.jsonl` (one line per candidate so
 * far) into the agent's work tree (its workspace, DESIGN §6.7), and clears the report file the agent
 * may write. Summaries of changes are read from `repo`, the user's repository.
 */
export async function writeAgentContext(repo: string, state: LoopState, workTree = repo): Promise<AgentFiles> {
  const dir = agentContextDir(workTree);
  await mkdir(dir, { recursive: true });
  const files: AgentFiles = {
    best: path.join(dir, "best.json"),
    lastVerdict: path.join(dir, "last-verdict.json"),
    history: path.join(dir, "history.jsonl"),
    report: path.join(dir, "report.json"),
    requests: path.join(dir, "requests.json"),
    context: path.join(dir, "context"),
  };
  const commitOf = (id: string) => (id === BASELINE_ID ? state.t0.commit : (state.candidates[id]?.commit ?? state.t0.commit));
  const candidates = state.candidate_order.flatMap((id) => {
    const candidate = state.candidates[id];
    return candidate ? [{ id, candidate }] : [];
  });
  // Only the candidates whose line this process has not written yet are summarised and serialized.
  const unwritten = candidates.filter(({ candidate }) => historyLines.get(candidate)?.t0 !== state.t0.commit);
  const summaries = await diffSummariesOf(
    repo,
    unwritten.map(({ candidate }) => ({ base: commitOf(candidate.parent), commit: candidate.commit })),
  );
  for (const [index, { id, candidate }] of unwritten.entries()) {
    const line: HistoryLine = {
      candidate_id: id,
      parent: candidate.parent,
      commit: candidate.commit,
      status: candidate.status,
      reason: candidate.verdict?.reason ?? null,
      detail: candidate.verdict?.detail ?? null,
      diff_summary: summaries[index] ?? "no change",
      description: candidate.agent_report?.description ?? null,
    };
    historyLines.set(candidate, { t0: state.t0.commit, line: `${JSON.stringify(line)}\n` });
  }
  const history = candidates.map(({ candidate }) => historyLines.get(candidate)?.line ?? "").join("");
  const decided = candidates.findLast(({ candidate }) => candidate.verdict);
  const last: LastVerdict | null = decided?.candidate.verdict
    ? { ...decided.candidate.verdict, failing_tests: decided.candidate.report?.tests.failing ?? [] }
    : null;
  const best: BestTree = { candidate_id: state.best.candidate_id, commit: state.best.commit, failing_tests: state.best.failing, metric: state.best.metric };
  // Separate files, written side by side: they are read only once the agent runs (issue 30).
  await Promise.all([
    writeFile(files.best, `${JSON.stringify(best, null, 2)}\n`),
    writeFile(files.lastVerdict, `${JSON.stringify(last, null, 2)}\n`),
    writeFile(files.history, history),
    rm(files.report, { force: true }),
    rm(files.requests, { force: true }),
  ]);
  return files;
}

/** The environment variables that point the agent at its files. */
export function agentEnv(files: AgentFiles, loopId: string, iteration: number): Record<string, string> {
  return {
    LOOPWARDEN_LOOP_ID: loopId,
    LOOPWARDEN_ITERATION: String(iteration),
    LOOPWARDEN_BEST: files.best,
    LOOPWARDEN_LAST_VERDICT: files.lastVerdict,
    LOOPWARDEN_HISTORY: files.history,
    LOOPWARDEN_AGENT_REPORT: files.report,
    LOOPWARDEN_REQUESTS: files.requests,
    LOOPWARDEN_CONTEXT: files.context,
  };
}

/**
 * A JSON file the agent may have written, validated by `schema`: null without one; an invalid one is
 * answered with the reason (`what` names it), so it is never silent and never used.
 */
async function readAgentFile<T>(file: string, schema: z.ZodType<T>, what: string): Promise<{ value: T | null; error?: string }> {
  const text = await readFile(file, "utf8").catch(() => null);
  if (text === null) return { value: null };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { value: null, error: `the ${what} is not valid JSON` };
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { value: null, error: `the ${what} is invalid: ${issue?.path.join(".") || `(${what})`}: ${issue?.message ?? "invalid"}` };
  }
  return { value: parsed.data };
}

/**
 * Reads the request the agent wrote to change protected files, if any (docs/design.md §6.8), validated:
 * which files, and why. Only a request: nothing the agent writes anywhere approves it. An invalid one
 * is not sent; the reason is answered, so it is never silent.
 */
export async function readReviewRequest(file: string): Promise<{ request: ReviewRequest | null; error?: string }> {
  const { value, error } = await readAgentFile(file, ReviewRequest, "review request");
  return error === undefined ? { request: value } : { request: null, error };
}

/**
 * Reads the report the agent wrote, if any: validated, with every context file it names pinned by the
 * sha256 of its content now. An invalid report is not recorded; the reason is, so it is never silent.
 */
export async function readAgentReport(repo: string, file: string): Promise<{ report: AgentReport | null; error?: string }> {
  const { value, error } = await readAgentFile(file, AgentReportFile, "agent report");
  if (value === null) return error === undefined ? { report: null } : { report: null, error };
  const { context_files: contextPaths, ...rest } = value;
  const report: AgentReport = { ...rest };
  if (contextPaths) {
    report.context_files = await Promise.all(
      contextPaths.map(async (name) => {
        const inside = !path.isAbsolute(name) && !path.normalize(name).startsWith("..");
        const bytes = inside ? await readFile(path.join(repo, name)).catch(() => null) : null;
        return { path: name, sha256: bytes ? sha256Hex(bytes) : null };
      }),
    );
  }
  return { report };
}
