// `npm run bench:install`: what installing loopwarden costs, written to bench/results/install.md. The
// package as `npm pack` makes it (after `npm run build:worker && npm run build:cli`) is installed into
// empty directories: runner-only (--omit=dev --omit=optional, for machines that talk to a deployed
// coordinator) and full (--omit=dev, with the Workers runtime for the local coordinator). Start-up times
// are medians of 5 fresh processes next to bare `node -e 0`; warm `status` runs against a warm local
// coordinator of the full install. Prints figures; asserts nothing. Goals (issue 13): runner-only under
// 15 MB; `--help` under 150 ms; warm `status` under 500 ms.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { directorySize } from "../test/support/disk.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const work = mkdtempSync(path.join(os.tmpdir(), "lw-bench-install-"));
const RUNS = 5;

const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;
const ms = (value: number) => `${value.toFixed(0)} ms`;
const metOrNot = (met: boolean) => (met ? "met" : "not met");

/** Median wall time of a command, fresh process each run. */
function timed(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): number {
  const times: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const started = performance.now();
    const result = spawnSync(command, args, { cwd: options.cwd, env: { ...process.env, ...options.env }, stdio: "ignore" });
    times.push(performance.now() - started);
    if (result.status !== 0) throw new Error(`${command} ${args.join(" ")} exited ${result.status}`);
  }
  return median(times);
}

/** Installs the tarball into a new directory; answers the directory, the installed size and the install's seconds. */
function install(tarball: string, name: string, flags: string[]): { dir: string; size: number; seconds: number } {
  const dir = path.join(work, name);
  mkdirSync(dir);
  writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name, private: true }));
  const started = performance.now();
  // --prefer-offline: the packages `npm ci` fetched are in npm's cache; a first install also downloads them.
  execFileSync("npm", ["install", tarball, ...flags, "--prefer-offline", "--no-audit", "--no-fund"], { cwd: dir, stdio: "ignore" });
  return { dir, size: directorySize(path.join(dir, "node_modules")), seconds: (performance.now() - started) / 1_000 };
}

const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};
try {
  const packed = JSON.parse(execFileSync("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", work], { cwd: root, encoding: "utf8" })) as [
    { filename: string },
  ];
  const tarball = path.join(work, packed[0].filename);
  const thin = install(tarball, "runner-only", ["--omit=dev", "--omit=optional"]);
  const full = install(tarball, "full", ["--omit=dev"]);
  const bin = (dir: string) => path.join(dir, "node_modules", ".bin", "loopwarden");

  // A warm local coordinator of the full install, for `status` (stopped by serve --stop at the end).
  const repo = path.join(work, "repo");
  const state = path.join(work, "state");
  cpSync(path.join(root, "examples", "demo"), repo, { recursive: true });
  const git = (...args: string[]) =>
    execFileSync("git", ["-c", "user.name=bench", "-c", "user.email=bench@localhost", ...args], { cwd: repo, stdio: "ignore" });
  git("init", "-q", "-b", "main");
  git("add", "-A");
  git("commit", "-q", "-m", "demo");
  const warm = { LOOPWARDEN_IDLE: "5m", NO_COLOR: "1" };
  spawnSync(bin(full.dir), ["--state", state, "run", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"], {
    cwd: repo,
    env: { ...process.env, ...warm },
    stdio: "ignore",
  });
  try {
    const node = timed(process.execPath, ["-e", "0"]);
    const version = timed(bin(thin.dir), ["--version"]);
    const help = timed(bin(thin.dir), ["--help"]);
    const status = timed(bin(full.dir), ["--state", state, "status"], { cwd: repo, env: warm });

    say("# Installing loopwarden");
    say();
    say(
      `\`npm run bench:install\`, ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores; start-up times are medians of ${RUNS} fresh processes.`,
    );
    say();
    say("| | |");
    say("|---|---:|");
    say(`| tarball (\`npm pack\`) | ${(statSync(tarball).size / 1024).toFixed(0)} KiB |`);
    say(
      `| runner-only install (\`--omit=dev --omit=optional\`): node_modules, sum of file sizes | ${mib(thin.size)} (goal: under 15 MB: ${metOrNot(thin.size < 15_000_000)}) |`,
    );
    say(`| runner-only install time | ${thin.seconds.toFixed(1)} s |`);
    say(`| full install (\`--omit=dev\`, with the Workers runtime): node_modules, sum of file sizes | ${mib(full.size)} |`);
    say(`| full install time | ${full.seconds.toFixed(1)} s |`);
    say(`| \`node -e 0\` | ${ms(node)} |`);
    say(`| \`loopwarden --version\` | ${ms(version)} |`);
    say(`| \`loopwarden --help\` (the compiled CLI) | ${ms(help)} (goal: under 150 ms: ${metOrNot(help < 150)}) |`);
    say(`| \`loopwarden status\` against a warm local coordinator | ${ms(status)} (goal: under 500 ms: ${metOrNot(status < 500)}) |`);
  } finally {
    spawnSync(bin(full.dir), ["--state", state, "serve", "--stop"], { stdio: "ignore" });
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
writeFileSync(path.join(root, "bench", "results", "install.md"), `${lines.join("\n")}\n`);
console.log("\nwritten to bench/results/install.md");
