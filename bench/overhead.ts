// `npm run bench:overhead`: what the coordinator costs next to a plain shell loop, in the style of
// autoresearch (run the agent, run the check in the working tree, commit or `git checkout .`, append a
// TSV line). Both run the same agent and check for ITERATIONS iterations; loopwarden (the compiled CLI,
// as installed) with a coordinator already running (`--server`) and with the on-demand one,
// repetitions interleaved. Writes bench/results/overhead.md. Prints figures; asserts nothing. Goals (the
// overhead issue): under 100 ms overhead per iteration at 0.1 s checks, and a wall ratio of at most
// 1.05 at 2 s checks.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startLocalCoordinator } from "../runner/src/local-coordinator.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
// The CLI as an installed package runs it: bundled to JavaScript (`npm run build:cli`, which this
// bench's npm script runs first), not compiled at start by tsx as a source checkout's bin does.
const bin = path.join(root, "dist", "cli", "main.js");
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

/** Per-phase figures of steady iterations (the 2nd on), from the runner's LOOPWARDEN_TIMINGS=1 lines. */
const phaseSamples = new Map<string, Map<string, number[]>>();

function recordTimings(series: string, stderr: string): void {
  const phases = phaseSamples.get(series) ?? new Map<string, number[]>();
  phaseSamples.set(series, phases);
  for (const match of stderr.matchAll(/^\[(\d+)\] timings: (.*)$/gm)) {
    if (Number(match[1]) < 2) continue;
    for (const pair of (match[2] ?? "").split(" ")) {
      const [phase, value] = pair.split("=");
      if (!phase || value === undefined) continue;
      phases.set(phase, [...(phases.get(phase) ?? []), Number(value)]);
    }
  }
}

/** `loopwarden run` for the same iterations (the check never passes: max_iterations_reached). Answers wall ms. */
function loopwardenRun(check: string, where: string[], series: string): number {
  const repo = repository();
  const started = performance.now();
  const result = spawnSync(
    process.execPath,
    [bin, "--quiet", ...where, "run", "--check", check, "--exec", AGENT, "--max-iterations", String(ITERATIONS)],
    // On demand means a coordinator for this run only (LOOPWARDEN_IDLE=0), as this comparison was defined.
    { cwd: repo.dir, encoding: "utf8", env: { ...process.env, NO_COLOR: "1", LOOPWARDEN_IDLE: "0", LOOPWARDEN_TIMINGS: "1" } },
  );
  const elapsed = performance.now() - started;
  repo.cleanup();
  recordTimings(series, result.stderr);
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
    `\`npm run bench:overhead\`, ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores. ${ITERATIONS} iterations of the agent \`${AGENT}\` and a check that sleeps, then fails; ${REPETITIONS} repetitions, interleaved; wall time of the whole command, median and range. The CLI is the compiled one an installed package runs (dist/cli).`,
  );
  say();
  say(
    "| check | plain shell loop | loopwarden, coordinator running | ratio | per iteration | steady iteration | loopwarden, on-demand coordinator | ratio | per iteration | steady iteration |",
  );
  say("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const seconds of CHECKS) {
    const check = `sleep ${seconds}; exit 1`;
    const shell: number[] = [];
    const server: number[] = [];
    const onDemand: number[] = [];
    for (let repetition = 0; repetition < REPETITIONS; repetition++) {
      shell.push(shellLoop(check));
      server.push(loopwardenRun(check, ["--server", coordinator.url, "--token", coordinator.owner.token], `running@${seconds}`));
      const state = mkdtempSync(path.join(os.tmpdir(), "lw-bench-overhead-od-"));
      try {
        onDemand.push(loopwardenRun(check, ["--state", state], `on-demand@${seconds}`));
      } finally {
        rmSync(state, { recursive: true, force: true });
      }
    }
    const base = median(shell);
    const cells = (times: number[], series: string) => [
      `${(median(times) / 1000).toFixed(2)} s (${range(times)})`,
      `${(median(times) / base).toFixed(2)}×`,
      `+${((median(times) - base) / ITERATIONS).toFixed(0)} ms`,
      `+${(median(phaseSamples.get(series)?.get("total") ?? []) - base / ITERATIONS).toFixed(0)} ms`,
    ];
    say(
      `| ${seconds} s | ${(base / 1000).toFixed(2)} s (${range(shell)}) | ${[...cells(server, `running@${seconds}`), ...cells(onDemand, `on-demand@${seconds}`)].join(" | ")} |`,
    );
  }
  say();
  say(
    `Per iteration is the difference of the medians over the iterations, so it includes the run's fixed costs spread over ${ITERATIONS} iterations: the CLI's start, the baseline (loopwarden runs the check ${ITERATIONS + 1} times, t0 included, the shell loop ${ITERATIONS}), creating the loop, and with on-demand the coordinator's start. Steady iteration is the overhead of one iteration without them: the median wall time of iterations 2-${ITERATIONS} (the runner's own LOOPWARDEN_TIMINGS=1 lines) less the shell loop's time per iteration. Goals: under 100 ms overhead per iteration at 0.1 s checks; a ratio of at most 1.05 at 2 s checks. The baseline alone is one check more than the shell loop runs, ${(100 / ITERATIONS).toFixed(0)}% of its time at ${ITERATIONS} iterations, whatever the coordinator costs: a ratio of 1.05 needs t0 measured while the first agent runs, which this version does not do (README, Roadmap).`,
  );
  say();
  say(
    `Where a steady iteration's time goes, at ${CHECKS[0]} s checks (the runner's own LOOPWARDEN_TIMINGS=1 lines, iterations 2-${ITERATIONS} of every repetition; median ms; spawns and requests are counts). \`commit\` writes the candidate (its diff is taken meanwhile); \`bundle\` finishes the proposal (with \`--server\`, a shared coordinator, the candidate's commits bundled too: inside the proposal when at most 64 KiB, else uploaded first); \`evaluate\` contains \`gates\` (the check itself), \`upload\` (gate logs too large to travel inside the report) and \`report\`. \`clone\` is begun when the agent ends and checked out while \`commit\`, \`bundle\` and \`propose\` run; it is counted in full though it overlaps them, so the phases add up to more than \`total\`.`,
  );
  say();
  const series = [...phaseSamples.keys()].filter((name) => name.endsWith(`@${CHECKS[0]}`));
  const phases = [...new Set(series.flatMap((name) => [...(phaseSamples.get(name)?.keys() ?? [])]))];
  say(`| phase | ${series.map((name) => `coordinator ${name.split("@")[0]}`).join(" | ")} |`);
  say(`|---|${series.map(() => "---:").join("|")}|`);
  for (const phase of phases) say(`| ${phase} | ${series.map((name) => String(Math.round(median(phaseSamples.get(name)?.get(phase) ?? [])))).join(" | ")} |`);
} finally {
  await coordinator.stop();
  rmSync(serverState, { recursive: true, force: true });
}
writeFileSync(path.join(root, "bench", "results", "overhead.md"), `${lines.join("\n")}\n`);
console.log("\nwritten to bench/results/overhead.md");
