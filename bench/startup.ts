// `npm run bench:startup`: how long the CLI takes to start, as a user's shell sees it, and how long the
// on-demand local coordinator takes to answer and to create a first loop (Miniflare's API, as the runner
// starts it, against `wrangler dev`). Prints figures; asserts nothing (timings on shared machines are
// noisy; compare runs of one machine).
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = path.join(root, "runner", "bin", "loopwarden.js");
const RUNS = 20;

function measure(args: string[]): number[] {
  const times: number[] = [];
  for (let run = 0; run < RUNS + 2; run++) {
    const started = performance.now();
    const result = spawnSync(process.execPath, [bin, ...args], { encoding: "utf8" });
    const elapsed = performance.now() - started;
    if (result.status !== 0) throw new Error(`loopwarden ${args.join(" ")} exited ${result.status}: ${result.stderr}`);
    if (run >= 2) times.push(elapsed); // the first two warm the file cache
  }
  return times.sort((a, b) => a - b);
}

const at = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
const node = (() => {
  const times: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const started = performance.now();
    spawnSync(process.execPath, ["-e", "0"]);
    times.push(performance.now() - started);
  }
  return times.sort((a, b) => a - b);
})();

console.log(`loopwarden start-up, ${RUNS} runs each (node ${process.version}, ${process.platform})`);
console.log("command                      median     p90");
for (const [label, times] of [
  ["node -e 0 (floor)", node],
  ["loopwarden --version", measure(["--version"])],
  ["loopwarden --help", measure(["--help"])],
] as const) {
  console.log(`${label.padEnd(28)} ${at(times, 0.5).toFixed(0).padStart(4)} ms ${at(times, 0.9).toFixed(0).padStart(5)} ms`);
}

// The on-demand coordinator, each start in a fresh process: first on a fresh state directory (D1
// migrations applied), then again on the same one, as every later command finds it. The worker bundle is
// built first, as `npm ci` does. Few runs: wrangler dev takes seconds each.
const COORDINATOR_RUNS = 5;
const tsx = path.join(root, "node_modules", "tsx", "dist", "cli.mjs");
spawnSync(process.execPath, [tsx, path.join(root, "scripts", "build-worker.ts")], { stdio: "ignore" });
type Start = { load_ms: number; healthy_ms: number; created_ms: number };
function coordinatorStarts(how: "miniflare" | "wrangler"): { fresh: Start[]; warm: Start[] } {
  const starts = { fresh: [] as Start[], warm: [] as Start[] };
  const start = (state: string): Start => {
    const result = spawnSync(process.execPath, [tsx, path.join(root, "bench", "coordinator-start.ts"), how, state], { encoding: "utf8" });
    if (result.status !== 0) throw new Error(`${how} start failed: ${result.stderr}`);
    return JSON.parse(result.stdout.trim().split("\n").pop() ?? "") as Start;
  };
  for (let run = 0; run < COORDINATOR_RUNS; run++) {
    const state = mkdtempSync(path.join(os.tmpdir(), "lw-bench-start-"));
    try {
      starts.fresh.push(start(state));
      starts.warm.push(start(state));
    } finally {
      rmSync(state, { recursive: true, force: true });
    }
  }
  return starts;
}
const median = (starts: Start[], key: keyof Start) =>
  at(
    starts.map((start) => start[key]).sort((a, b) => a - b),
    0.5,
  );
const miniflare = coordinatorStarts("miniflare");
const wrangler = coordinatorStarts("wrangler");
console.log(
  `\non-demand local coordinator, ${COORDINATOR_RUNS} starts each in a fresh process (medians; healthy and first loop counted after loading Miniflare)`,
);
console.log("started with                   state   load Miniflare   healthy   first loop   total to first loop");
for (const [label, starts] of [
  ["Miniflare API (loopwarden)", miniflare],
  ["wrangler dev", wrangler],
] as const) {
  for (const which of ["fresh", "warm"] as const) {
    const runs = starts[which];
    const total = at(
      runs.map((start) => start.load_ms + start.created_ms).sort((a, b) => a - b),
      0.5,
    );
    console.log(
      `${label.padEnd(30)} ${which.padEnd(5)} ${median(runs, "load_ms").toFixed(0).padStart(10)} ms ${median(runs, "healthy_ms").toFixed(0).padStart(6)} ms ${median(runs, "created_ms").toFixed(0).padStart(9)} ms ${total.toFixed(0).padStart(14)} ms`,
    );
  }
}
const ratio = (which: "fresh" | "warm", key: "healthy_ms" | "created_ms") => (median(miniflare[which], key) / median(wrangler[which], key)).toFixed(2);
console.log(
  `ratio Miniflare / wrangler dev, once loaded: healthy ${ratio("warm", "healthy_ms")} (warm), ${ratio("fresh", "healthy_ms")} (fresh); first loop ${ratio("warm", "created_ms")} (warm)`,
);
