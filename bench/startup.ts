// `npm run bench:startup`: how long the CLI takes to start, as a user's shell sees it. Prints figures;
// asserts nothing (timings on shared machines are noisy; compare runs of one machine).
import { spawnSync } from "node:child_process";
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
