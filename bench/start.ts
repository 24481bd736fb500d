// `npm run bench:start`: how long the local coordinator takes from the command that starts it to its
// first answer, next to the floor of a minimal Durable Object worker started through Miniflare's API in a
// fresh Node process, measured in the same run; written to bench/results/start.md. Both are spawned,
// polled on /healthz (or /) every 5 ms until they answer 200, then stopped by their pid. The coordinator
// runs on a state directory it has started on once (migrations applied, runtime snapshot kept), as every
// command after the first finds it; a row of its own is the first start on a new state directory, through
// Miniflare. Prints figures; asserts nothing. Goal (issue 30): the coordinator answering within 0.5 s.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "../runner/src/coordinator/free-port.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const cli = path.join(root, "dist", "cli", "main.js");
const RUNS = 7;
const GOAL_MS = 500;
/**
 * `tsx bench/start.ts --compare <checkout>` also starts another checkout's compiled CLI (its
 * dist/cli/main.js, with its own worker bundle), alternated with the two above, so a change is measured
 * against what it changed under the same load (printed, not written to results).
 */
const args = process.argv.slice(2);
const compareRoot = args.includes("--compare") ? path.resolve(args[args.indexOf("--compare") + 1] ?? "") : null;
const loadAverage = () => os.loadavg()[0]?.toFixed(1) ?? "?";

/** A minimal worker with one SQLite Durable Object, started by Miniflare's API as the coordinator is. */
const FLOOR_SCRIPT = `
const { Miniflare } = require(${JSON.stringify(path.join(root, "node_modules", "miniflare"))});
const script = \`
export class Counter { constructor(state) { this.sql = state.storage.sql; this.sql.exec("CREATE TABLE IF NOT EXISTS t (n)"); }
  async fetch() { return new Response(String(this.sql.exec("SELECT count(*) AS n FROM t").one().n)); } }
export default { fetch(request, env) { return env.COUNTER.get(env.COUNTER.idFromName("a")).fetch(request); } };\`;
const mf = new Miniflare({ host: "127.0.0.1", port: Number(process.argv[2]), modules: true, script, compatibilityDate: "2026-04-20",
  durableObjects: { COUNTER: { className: "Counter", useSQLite: true } }, defaultPersistRoot: process.argv[3] });
process.on("SIGINT", () => mf.dispose().finally(() => process.exit(0)));
`;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;

/** Spawns `args`, polls `url` until it answers 200, stops it with SIGINT; answers the ms to that answer. */
async function firstAnswer(args: string[], url: string): Promise<number> {
  const started = performance.now();
  const child = spawn(process.execPath, args, { stdio: "ignore" });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  try {
    for (;;) {
      const ok = await fetch(url)
        .then((response) => response.ok)
        .catch(() => false);
      if (ok) return performance.now() - started;
      if (child.exitCode !== null) throw new Error(`${args.join(" ")} exited ${child.exitCode} before answering`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  } finally {
    child.kill("SIGINT");
    await exited;
  }
}

/**
 * Runs `loopwarden serve` until its start is over (it prints where it listens), then stops it with SIGINT:
 * the state directory is then as every command after the first finds it — migrations applied, and the
 * runtime snapshot kept, which a start stopped at its first answer may not have had time to keep.
 */
async function startFully(args: string[]): Promise<void> {
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "ignore"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  try {
    let printed = "";
    await new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (chunk: Buffer) => {
        printed += chunk.toString("utf8");
        if (printed.includes("coordinator listening on")) resolve();
      });
      child.once("exit", (code) => reject(new Error(`${args.join(" ")} exited ${code} before its start was over`)));
    });
  } finally {
    child.kill("SIGINT");
    await exited;
  }
}

const work = mkdtempSync(path.join(os.tmpdir(), "lw-bench-start-"));
const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};
try {
  const floorFile = path.join(work, "floor.cjs");
  writeFileSync(floorFile, FLOOR_SCRIPT);
  const state = path.join(work, "state");
  const serveArgs = (main: string, stateDir: string, port: number) => [main, "--state", stateDir, "serve", "--port", String(port)];
  const serve = (main: string, stateDir: string) => async () => {
    const port = await freePort();
    return firstAnswer(serveArgs(main, stateDir, port), `http://127.0.0.1:${port}/healthz`);
  };
  const coordinator = serve(cli, state);
  const comparedMain = compareRoot ? path.join(compareRoot, "dist", "cli", "main.js") : null;
  const compareState = path.join(work, "compare-state");
  const compared = comparedMain ? serve(comparedMain, compareState) : null;
  const floor = async () => {
    const port = await freePort();
    return firstAnswer([floorFile, String(port), path.join(work, "floor-state")], `http://127.0.0.1:${port}/`);
  };
  // Once each first, each start to its end: the coordinator's migrations and runtime snapshot, the file caches.
  const loadBefore = loadAverage();
  await startFully(serveArgs(cli, state, await freePort()));
  await floor();
  if (comparedMain) await startFully(serveArgs(comparedMain, compareState, await freePort()));
  // A first command on a state directory of its own: the D1 migrations applied, workerd through Miniflare.
  const firstOnNewState = (run: number) => serve(cli, path.join(work, `new-state-${run}`))();
  const times = { coordinator: [] as number[], floor: [] as number[], compared: [] as number[], newState: [] as number[] };
  for (let run = 0; run < RUNS; run++) {
    // The compared checkout first in every other run, so neither start always follows the same one.
    if (compared && run % 2 === 1) times.compared.push(await compared());
    times.coordinator.push(await coordinator());
    times.floor.push(await floor());
    if (compared && run % 2 === 0) times.compared.push(await compared());
    if (!compared) times.newState.push(await firstOnNewState(run));
  }
  const loadAfter = loadAverage();
  const ours = median(times.coordinator);
  const base = median(times.floor);
  say("# The local coordinator's start");
  say();
  say(
    `\`npm run bench:start\`, ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores, load average ${loadBefore} as the runs began and ${loadAfter} as they ended; medians of ${RUNS} starts, alternated.`,
  );
  say();
  say(
    "From the spawn of the command to the first 200 answer: `loopwarden serve` (the compiled CLI) on a state directory it started on before (to the end of that start: its runtime snapshot kept), polled on /healthz, next to a minimal worker with one SQLite Durable Object started through Miniflare's API in a fresh Node process (the floor).",
  );
  say();
  say(
    "On a state directory it started on before, workerd is spawned from the runtime snapshot that start kept (runner/src/coordinator/runtime-snapshot.ts: Miniflare is not loaded); on a new state directory, the first command's start goes through Miniflare, applies the D1 migrations and keeps the snapshot.",
  );
  say();
  say("| | first answer | all runs |");
  say("|---|---:|---|");
  say(`| \`loopwarden serve\` | ${ours.toFixed(0)} ms | ${times.coordinator.map((ms) => ms.toFixed(0)).join(", ")} |`);
  say(`| minimal worker (floor) | ${base.toFixed(0)} ms | ${times.floor.map((ms) => ms.toFixed(0)).join(", ")} |`);
  if (times.newState.length > 0) {
    say(
      `| \`loopwarden serve\` on a new state directory | ${median(times.newState).toFixed(0)} ms | ${times.newState.map((ms) => ms.toFixed(0)).join(", ")} |`,
    );
  }
  if (compareRoot) {
    const theirs = median(times.compared);
    say(`| \`loopwarden serve\` of ${compareRoot} | ${theirs.toFixed(0)} ms | ${times.compared.map((ms) => ms.toFixed(0)).join(", ")} |`);
    say();
    say(`This checkout's start is ${(ours / theirs).toFixed(2)}× that of ${compareRoot}.`);
  }
  say();
  say(`Goal (issue 30): under ${GOAL_MS} ms — ${ours < GOAL_MS ? "met" : `not met (${(ours / base).toFixed(2)}× the floor)`}.`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
if (compareRoot) {
  console.log("\n(a comparison: not written to bench/results/start.md)");
} else {
  writeFileSync(path.join(root, "bench", "results", "start.md"), `${lines.join("\n")}\n`);
  console.log("\nwritten to bench/results/start.md");
}
