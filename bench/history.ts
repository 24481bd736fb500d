// `npm run bench:history`: what a run that resumes a long loop waits for before its first agent run,
// written to bench/results/history.md. The agent's history (docs/agent.md) names every candidate's
// change in a line; a new process knows none of them. For loops of 100, 1,000 and 5,000 candidates (real
// commits, made with `git fast-import`), times writing the agent's context the first time, as the runner
// does (one `git diff-tree --stdin` for every change it does not know), and the same summaries read with
// one `git diff --numstat` each, as before. Prints figures; asserts nothing.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { BASELINE_ID, type LoopState } from "#shared/engine/index.js";
import { diffSummary, writeAgentContext } from "../runner/src/loop/agent-context.js";
import { helperPid, stopHelper, useCommandHelper } from "../runner/src/process/spawner.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const SIZES = [100, 1_000, 5_000];

/**
 * A repository whose t0 commit has `count` candidate commits on it, each changing one file: t0 and the
 * candidates' ids. `label` is in every commit message, so two repositories share no commit (the runner's
 * summaries are known by commit ids).
 */
function loopRepository(count: number, label: string): { repo: string; t0: string; commits: string[] } {
  const repo = mkdtempSync(path.join(os.tmpdir(), "lw-bench-history-"));
  const git = (args: string[], input?: string) =>
    execFileSync("git", ["-c", "user.name=bench", "-c", "user.email=bench@localhost", ...args], {
      cwd: repo,
      encoding: "utf8",
      input,
      maxBuffer: 64 * 1024 * 1024,
    });
  git(["init", "-q", "-b", "main"]);
  writeFileSync(path.join(repo, "counter.txt"), "0\n");
  git(["add", "-A"]);
  git(["commit", "-q", "-m", `t0 ${label}`]);
  const t0 = git(["rev-parse", "HEAD"]).trim();
  let stream = "";
  for (let index = 1; index <= count; index++) {
    const content = `${index}\n`;
    stream += `blob\nmark :${index}\ndata ${Buffer.byteLength(content)}\n${content}\n`;
    const message = `candidate ${label}\n`;
    stream += `commit refs/loopwarden/bench/${index}\nmark :${count + index}\ncommitter bench <bench@localhost> 0 +0000\ndata ${Buffer.byteLength(message)}\n${message}from ${t0}\nM 100644 :${index} counter.txt\n\n`;
  }
  const marks = path.join(repo, ".git", "bench-marks");
  git(["fast-import", "--quiet", `--export-marks=${marks}`], stream);
  const ids = new Map(
    readFileSync(marks, "utf8")
      .trim()
      .split("\n")
      .map((line) => line.split(" ") as [string, string]),
  );
  const commits = Array.from({ length: count }, (_, index) => ids.get(`:${count + index + 1}`) ?? "");
  return { repo, t0, commits };
}

/**
 * A loop's state as far as the agent's context reads it: t0 as the best, and every candidate rejected,
 * each a change from t0. (Only the fields `writeAgentContext` reads are filled.)
 */
function loopState(t0: string, commits: string[]): LoopState {
  const candidates = Object.fromEntries(
    commits.map((commit, index) => [
      `c_${index}`,
      {
        parent: BASELINE_ID,
        commit,
        status: "rejected",
        verdict: { candidate_id: `c_${index}`, decision: "rejected", reason: "gate_failed", detail: null },
        report: null,
        agent_report: null,
      },
    ]),
  );
  return {
    candidate_order: commits.map((_, index) => `c_${index}`),
    candidates,
    t0: { commit: t0 },
    best: { candidate_id: BASELINE_ID, commit: t0, failing: [], metric: null },
  } as unknown as LoopState;
}

const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};

useCommandHelper();
while (helperPid() === null) await new Promise((resolve) => setTimeout(resolve, 10));
try {
  say("# The agent's first history in a resumed run");
  say();
  say(
    `\`npm run bench:history\`, ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores. A loop's candidates are real commits, each a change of one file from t0; the agent's context is written once by a process that knows none of their summaries (a run that resumes the loop), as the runner writes it: one \`git diff-tree --stdin\` for every change it does not know. Beside it, the same summaries read with one \`git diff --numstat\` each, one after another, as the runner read them before. Git runs through the runner's command helper in both.`,
  );
  say();
  say("| candidates | first context, one git process for all | one git process per change | every later context | history.jsonl |");
  say("|---:|---:|---:|---:|---:|");
  for (const size of SIZES) {
    const batched = loopRepository(size, "batched");
    const single = loopRepository(size, "one by one");
    const work = mkdtempSync(path.join(os.tmpdir(), "lw-bench-history-work-"));
    try {
      // One state for both contexts: the runner's fold keeps a candidate's object until it changes.
      const state = loopState(batched.t0, batched.commits);
      let started = performance.now();
      const files = await writeAgentContext(batched.repo, state, work);
      const once = performance.now() - started;
      // The next iteration's, with every summary known: what each iteration pays for the history.
      started = performance.now();
      await writeAgentContext(batched.repo, state, work);
      const again = performance.now() - started;
      started = performance.now();
      for (const commit of single.commits) await diffSummary(single.repo, single.t0, commit);
      const each = performance.now() - started;
      const bytes = execFileSync("wc", ["-c", files.history], { encoding: "utf8" }).trim().split(" ")[0] ?? "?";
      say(
        `| ${size.toLocaleString("en-US")} | ${once.toFixed(0)} ms | ${each.toFixed(0)} ms | ${again.toFixed(0)} ms | ${Number(bytes).toLocaleString("en-US")} bytes |`,
      );
    } finally {
      for (const dir of [batched.repo, single.repo, work]) rmSync(dir, { recursive: true, force: true });
    }
  }
  say();
  say(
    "Issue 30 sets no goal for it; invariant 9 (a decision's cost grows with the change, not with the loop) is what it is measured against: reading the summaries no longer costs a process each, and a later context (the next iteration's, every candidate unchanged) serializes none of them again, but the history is still a line per candidate, written in full for every agent run, so what an iteration pays for it grows with the loop: its file's size.",
  );
} finally {
  stopHelper();
}
writeFileSync(path.join(root, "bench", "results", "history.md"), `${lines.join("\n")}\n`);
console.log("\nwritten to bench/results/history.md");
