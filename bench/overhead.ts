// `npm run bench:overhead`: what the coordinator costs next to a plain shell loop, in the style of
// autoresearch (run the agent, run the check in the working tree, commit or `git checkout .`, append a
// TSV line). Both run the same agent and check for ITERATIONS iterations; loopwarden with a coordinator
// already running (`--server`) and with the on-demand one, repetitions interleaved. Writes
// bench/results/overhead.md. Prints figures; asserts nothing. Goal (the overhead issue): under 100 ms
// per iteration at 0.1 s checks, and a wall ratio of at most 1.05 at 2 s checks.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startLocalCoordinator } from "../runner/src/local-coordinator.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = path.join(root, "runner", "bin", "loopwarden.js");
const ITERATIONS = 10;
const REPETITIONS = 3;
const CHECKS = [0.1, 2];
const AGENT = "echo $RANDOM >> counter.txt";

/** A fresh repository with one committed file the agent appends to. */
function repository(): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lw-bench-overhead-"));
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=bench", "-c", "user.email=bench@localhost", ...args], { cwd: dir });
  writeFileSync(path.join(dir, "counter.txt"), "0\n");
  writeFileSync(path.join(dir, ".gitignore"), ".loopwarden/\nresults.tsv\n");
  git("init", "-q", "-b", "main");
  git("add", "-A");
  git("commit", "-q", "-m", "initial");
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The plain shell loop: agent, check in the working tree, keep or discard, a TSV line. Answers wall ms. */
function shellLoop(check: string): number {
  const repo = repository();
  const script = `
for i in $(seq 1 ${ITERATIONS}); do
  ${AGENT}
  if (${check}); then git -c user.name=b -c user.email=b@l commit -qam "iteration $i"; status=keep; else git checkout -q .; status=discard; fi
  printf '%s\\t%s\\n' "$i" "$status" >> results.tsv
done`;
  const started = performance.now();
  spawnSync("/bin/bash", ["-c", script], { cwd: repo.dir, stdio: "ignore" });
  const elapsed = performance.now() - started;
  repo.cleanup();
  return elapsed;
}

/** `loopwarden run` for the same iterations (the check never passes: max_iterations_reached). Answers wall ms. */
function loopwardenRun(check: string, where: string[]): number {
  const repo = repository();
  const started = performance.now();
  const result = spawnSync(
    process.execPath,
    [bin, "--quiet", ...where, "run", "--check", check, "--exec", AGENT, "--max-iterations", String(ITERATIONS)],
    // On demand means a coordinator for this run only (LOOPWARDEN_IDLE=0), as this comparison was defined.
    { cwd: repo.dir, encoding: "utf8", env: { ...process.env, NO_COLOR: "1", LOOPWARDEN_IDLE: "0" } },
  );
  const elapsed = performance.now() - started;
  repo.cleanup();
  // Ten iterations without a promotion: no_progress_detected (17) or max_iterations_reached (12).
  if (result.status !== 17 && result.status !== 12) throw new Error(`loopwarden run exited ${result.status}: ${result.stderr}`);
  return elapsed;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;
const range = (values: number[]) => `${(Math.min(...values) / 1000).toFixed(2)}–${(Math.max(...values) / 1000).toFixed(2)} s`;

const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};

const serverState = mkdtempSync(path.join(os.tmpdir(), "lw-bench-overhead-state-"));
const coordinator = await startLocalCoordinator({ stateDir: serverState });
try {
  say("# Coordinator overhead next to a plain shell loop");
  say();
  say(
    `\`npm run bench:overhead\`, ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores. ${ITERATIONS} iterations of the agent \`${AGENT}\` and a check that sleeps, then fails; ${REPETITIONS} repetitions, interleaved; wall time of the whole command, median and range. The CLI runs from source through tsx.`,
  );
  say();
  say("| check | plain shell loop | loopwarden, coordinator running | ratio | per iteration | loopwarden, on-demand coordinator | ratio | per iteration |");
  say("|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const seconds of CHECKS) {
    const check = `sleep ${seconds}; exit 1`;
    const shell: number[] = [];
    const server: number[] = [];
    const onDemand: number[] = [];
    for (let repetition = 0; repetition < REPETITIONS; repetition++) {
      shell.push(shellLoop(check));
      server.push(loopwardenRun(check, ["--server", coordinator.url, "--token", coordinator.owner.token]));
      const state = mkdtempSync(path.join(os.tmpdir(), "lw-bench-overhead-od-"));
      try {
        onDemand.push(loopwardenRun(check, ["--state", state]));
      } finally {
        rmSync(state, { recursive: true, force: true });
      }
    }
    const base = median(shell);
    const cells = (times: number[]) => [
      `${(median(times) / 1000).toFixed(2)} s (${range(times)})`,
      `${(median(times) / base).toFixed(2)}×`,
      `+${((median(times) - base) / ITERATIONS).toFixed(0)} ms`,
    ];
    say(`| ${seconds} s | ${(base / 1000).toFixed(2)} s (${range(shell)}) | ${[...cells(server), ...cells(onDemand)].join(" | ")} |`);
  }
  say();
  say(
    `Per iteration is the difference of the medians over the iterations, so it includes the run's fixed costs spread over ${ITERATIONS} iterations: the CLI's start, the baseline (loopwarden runs the check ${ITERATIONS + 1} times, t0 included, the shell loop ${ITERATIONS}), creating the loop, and with on-demand the coordinator's start. Goals: under 100 ms per iteration at 0.1 s checks; a ratio of at most 1.05 at 2 s checks.`,
  );
} finally {
  await coordinator.stop();
  rmSync(serverState, { recursive: true, force: true });
}
writeFileSync(path.join(root, "bench", "results", "overhead.md"), `${lines.join("\n")}\n`);
console.log("\nwritten to bench/results/overhead.md");
