// One measurement for `npm run bench:startup`, in a fresh process: how long the on-demand local
// coordinator takes to answer /healthz and to create a first loop, started either way. Loading
// Miniflare's module is timed apart, since a process pays it once whatever it then starts. Prints one
// JSON line: { load_ms, healthy_ms, created_ms } (the last two counted after loading).
// Usage: tsx bench/coordinator-start.ts miniflare|wrangler STATE_DIR
import path from "node:path";
import { Client } from "../runner/src/coordinator/client.js";
import { startLocalCoordinator } from "../runner/src/coordinator/local-coordinator.js";
import { Contract } from "#shared/wire/contract.js";
import { TEST_OWNER_TOKEN } from "../test/support/cli.js";
import { applyWranglerMigrations, startWranglerDev } from "../test/support/wrangler-dev.js";

const [how, stateDir] = process.argv.slice(2);
if ((how !== "miniflare" && how !== "wrangler") || !stateDir) throw new Error("usage: coordinator-start.ts miniflare|wrangler STATE_DIR");

// Both ways of starting it accept the same owner token (wrangler dev is given it with --var).
process.env.LOOPWARDEN_OWNER_TOKEN = TEST_OWNER_TOKEN;
// wrangler dev applies no D1 migrations, and /healthz answers 503 until they are: they are applied first
// (untimed), as a user of wrangler dev does; the local coordinator applies them itself, timed.
if (how === "wrangler") applyWranglerMigrations(path.join(stateDir, "data"), path.join(stateDir, "logs"));
const loading = performance.now();
if (how === "miniflare") await import("miniflare");
const started = performance.now();
const coordinator =
  how === "miniflare" ? await startLocalCoordinator({ stateDir }) : await startWranglerDev(path.join(stateDir, "data"), path.join(stateDir, "logs"));
const healthy = performance.now();
await new Client(coordinator.url, { token: TEST_OWNER_TOKEN }).createLoop({
  idempotency_key: `bench-${process.pid}-${Date.now()}`,
  contract: Contract.parse({ name: "bench", mode: "check_fixpoint", gates: [{ name: "check", run: "true" }], agent: { run: "true" } }),
  t0: {
    commit: "0".repeat(40),
    observation: {
      gates: [{ name: "check", exit_code: 1, signal: null, timed_out: false, duration_ms: 1, log: null }],
      tests: { passing: [], failing: [] },
    },
  },
});
const created = performance.now();
await coordinator.stop();
console.log(JSON.stringify({ load_ms: Math.round(started - loading), healthy_ms: Math.round(healthy - started), created_ms: Math.round(created - started) }));
