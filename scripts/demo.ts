// `npm start`: the demo loop end to end on a throwaway copy of examples/demo. It starts the local
// coordinator (the worker in workerd, through Miniflare's API) on a temporary state directory, runs the
// loop to its halt against it, verifies the loop's signed receipt from its URL, saves the receipt's
// documents for verifying offline, stops the coordinator and removes every other temporary file.
import { execFileSync, spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startLocalCoordinator } from "../runner/src/coordinator/local-coordinator.js";
import { Client } from "../runner/src/coordinator/client.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = path.join(root, "runner", "bin", "loopwarden.js");
const work = mkdtempSync(path.join(os.tmpdir(), "loopwarden-demo-"));
const repo = path.join(work, "textkit");
const state = path.join(work, "state");

function git(...args: string[]): string {
  return execFileSync("git", args, { cwd: repo, encoding: "utf8" });
}

/** Runs the CLI with the terminal's stdio, as the coordinator's owner; answers its exit code. */
function loopwarden(args: string[]): Promise<number> {
  const child = spawn(process.execPath, [bin, ...args], { cwd: repo, stdio: "inherit", env: { ...process.env, LOOPWARDEN_TOKEN: coordinator.owner.token } });
  return new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? (signal ? 128 : 1))));
}

cpSync(path.join(root, "examples", "demo"), repo, { recursive: true });
git("init", "-q", "-b", "main");
git("-c", "user.name=demo", "-c", "user.email=demo@localhost", "add", "-A");
git("-c", "user.name=demo", "-c", "user.email=demo@localhost", "commit", "-q", "-m", "textkit with three bugs");

console.log(`loopwarden demo: a copy of examples/demo in ${repo}`);
console.log("starting the local coordinator…");
const coordinator = await startLocalCoordinator({ stateDir: state });
// Ctrl-C reaches the runner through the terminal's process group; the coordinator stops here.
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await coordinator.stop();
  rmSync(work, { recursive: true, force: true });
};
process.on("SIGINT", () => void stop().then(() => process.exit(130)));

let exitCode = 1;
try {
  console.log(`$ loopwarden run --check "node --test" --exec "node agent.mjs" --scope 'src/**' --max-iterations 10\n`);
  const code = await loopwarden([
    "--server",
    coordinator.url,
    "run",
    "--check",
    "node --test",
    "--exec",
    "node agent.mjs",
    "--scope",
    "src/**",
    "--max-iterations",
    "10",
  ]);
  console.log("");
  if (code !== 10) {
    console.log(`The demo loop did not converge: runner exit code ${code} (expected 10).`);
  } else {
    console.log("The loop converged: success_condition_met, runner exit code 10.");
    const branch = git("branch", "--list", "loopwarden/*", "--format=%(refname:short)").trim();
    console.log(`\nThe loop's branch ${branch}:`);
    console.log(git("log", "--oneline", "--format=  %h %s", `main..${branch}`).trimEnd());
    console.log("\nRejected candidates, kept so nothing is lost:");
    console.log(git("for-each-ref", "--format=  %(refname) %(objectname:short)", "refs/loopwarden/rejected/").trimEnd());

    const loop = (await (
      await fetch(`${coordinator.url}/v1/loops/${branch.replace("loopwarden/", "")}`, { headers: { Authorization: `Bearer ${coordinator.owner.token}` } })
    ).json()) as { receipt_id?: string };
    const url = `${coordinator.url}/r/${loop.receipt_id}`;
    const loopId = branch.replace("loopwarden/", "");
    const login = await new Client(coordinator.url, { token: coordinator.owner.token }).loginLink(`/loops/${loopId}`);
    console.log(`\nIts dashboard: ${coordinator.url}/loops/${loopId} (opened logged in by a one-time link: ${login.url})`);
    console.log(`Its signed receipt: ${url}\n$ loopwarden verify ${url}`);
    const verified = await loopwarden(["verify", url]);
    // The coordinator stops with the demo: its receipt is kept as files, verifiable offline.
    const kept = path.join(os.tmpdir(), `loopwarden-demo-receipt-${loop.receipt_id}`);
    mkdirSync(kept, { recursive: true });
    const files = { envelope: path.join(kept, "receipt.json"), events: path.join(kept, "events.jsonl"), keys: path.join(kept, "keys.json") };
    writeFileSync(files.envelope, await (await fetch(`${url}.json`)).text());
    writeFileSync(files.events, await (await fetch(`${url}/events.jsonl`)).text());
    writeFileSync(files.keys, await (await fetch(`${coordinator.url}/.well-known/loopwarden/keys.json`)).text());
    console.log(`\nThe coordinator stops with the demo; the receipt is saved in ${kept}. Verify it offline:`);
    console.log(`  npx loopwarden verify ${files.envelope} --events ${files.events} --key ${files.keys}`);
    exitCode = verified === 0 ? 0 : 1;
    // At a terminal, the pages stay up until the person is done with them; in CI the demo ends here.
    if (process.stdin.isTTY) {
      console.log("\nThe dashboard and the receipt page answer until you press Enter (Ctrl-C works too).");
      await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
      process.stdin.pause();
    }
  }
} finally {
  await stop();
}
process.exit(exitCode);
