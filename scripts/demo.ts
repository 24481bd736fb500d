// `npm start`: the demo loop end to end on a throwaway copy of examples/demo. The runner starts the
// local coordinator (the worker in workerd, through Miniflare's API) on demand with a temporary state directory, runs the
// loop to its halt, and stops the coordinator; this script then removes every temporary file.
import { execFileSync, spawn } from "node:child_process";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const work = mkdtempSync(path.join(os.tmpdir(), "loopwarden-demo-"));
const repo = path.join(work, "textkit");
const state = path.join(work, "state");

function git(...args: string[]): string {
  return execFileSync("git", args, { cwd: repo, encoding: "utf8" });
}

function cleanup(): void {
  rmSync(work, { recursive: true, force: true });
}

cpSync(path.join(root, "examples", "demo"), repo, { recursive: true });
git("init", "-q", "-b", "main");
git("-c", "user.name=demo", "-c", "user.email=demo@localhost", "add", "-A");
git("-c", "user.name=demo", "-c", "user.email=demo@localhost", "commit", "-q", "-m", "textkit with three bugs");

console.log(`loopwarden demo: a copy of examples/demo in ${repo}`);
console.log(`$ loopwarden run --check "node --test" --exec "node agent.mjs" --max-iterations 10\n`);

const runner = spawn(
  process.execPath,
  [
    path.join(root, "runner", "bin", "loopwarden.js"),
    "--state",
    state,
    "run",
    "--check",
    "node --test",
    "--exec",
    "node agent.mjs",
    "--max-iterations",
    "10",
  ],
  { cwd: repo, stdio: "inherit" },
);
// Ctrl-C reaches the runner through the terminal's process group; it stops its coordinator on exit.
process.on("SIGINT", () => undefined);

runner.on("exit", (code, signal) => {
  const exitCode = code ?? 1;
  console.log("");
  if (exitCode === 10) {
    console.log("The loop converged: success_condition_met, runner exit code 10.");
    const branch = git("branch", "--list", "loopwarden/*", "--format=%(refname:short)").trim();
    console.log(`\nThe loop's branch ${branch}:`);
    console.log(git("log", "--oneline", "--format=  %h %s", `main..${branch}`).trimEnd());
    console.log("\nRejected candidates, kept so nothing is lost:");
    console.log(git("for-each-ref", "--format=  %(refname) %(objectname:short)", "refs/loopwarden/rejected/").trimEnd());
  } else {
    console.log(`The demo loop did not converge: runner exit code ${signal ?? exitCode} (expected 10).`);
  }
  cleanup();
  process.exit(exitCode === 10 ? 0 : 1);
});
