import { spawn, spawnSync } from "node:child_process";
import path from "node:path";
import { freePort } from "../../runner/src/coordinator/free-port.js";
import { wranglerBin } from "../../scripts/lib/worker-bundle.js";
import { ROOT, TEST_OWNER_TOKEN, exitOf } from "./cli.js";

// `wrangler dev` of this worker, for what still compares the local coordinator with it: the test that
// both read the same persisted state, and `npm run bench:startup`. Started as the wrangler process itself
// (not through npx), and stopped by that PID.

/** A running `wrangler dev`. */
export interface WranglerDev {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

const wranglerEnv = (logDir: string) => ({
  ...process.env,
  WRANGLER_SEND_METRICS: "false",
  XDG_CONFIG_HOME: path.join(logDir, "config"),
  WRANGLER_LOG_PATH: logDir,
  CI: "true",
});

/**
 * Applies the D1 migrations to the local database under `persistTo`, as a user of `wrangler dev` does
 * (`wrangler d1 migrations apply DB --local`): wrangler dev itself does not, and until they are applied
 * /healthz and the routes that read D1 answer 503 not_ready.
 */
export function applyWranglerMigrations(persistTo: string, logDir: string): void {
  const result = spawnSync(process.execPath, [wranglerBin(), "d1", "migrations", "apply", "DB", "--local", "--persist-to", persistTo], {
    cwd: ROOT,
    env: wranglerEnv(logDir),
    encoding: "utf8",
  });
  if (result.status !== 0) throw new Error(`wrangler d1 migrations apply exited ${result.status}: ${result.stderr.slice(-2_000)}`);
}

/**
 * Starts `wrangler dev --persist-to <persistTo>` on 127.0.0.1 and waits until `/healthz` answers 200,
 * which needs the D1 migrations applied there (applyWranglerMigrations, or a local coordinator on the
 * same state). With `script` (the built bundle, dist/worker/index.js) wrangler serves that file as it is
 * (`--no-bundle`), so it runs the very worker the local coordinator runs; without, it bundles
 * wrangler.toml's `main` itself.
 */
export async function startWranglerDev(persistTo: string, logDir: string, options: { script?: string } = {}): Promise<WranglerDev> {
  const wrangler = wranglerBin();
  const port = await freePort();
  const inspectorPort = await freePort();
  const child = spawn(
    process.execPath,
    [
      wrangler,
      "dev",
      ...(options.script ? [options.script, "--no-bundle"] : []),
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--inspector-port",
      String(inspectorPort),
      "--persist-to",
      persistTo,
      "--log-level",
      "warn",
      "--show-interactive-dev-session=false",
      // The owner token, a secret when deployed, as the local coordinator's tests have it.
      "--var",
      `OWNER_TOKEN:${TEST_OWNER_TOKEN}`,
    ],
    {
      cwd: ROOT,
      env: wranglerEnv(logDir),
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const pid = child.pid;
  if (pid === undefined) throw new Error("wrangler dev did not start");
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode !== null) return;
    const exited = exitOf(child);
    child.kill("SIGTERM");
    await exited;
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    const healthy = await fetch(`${url}/healthz`).then(
      (response) => response.ok,
      () => false,
    );
    if (healthy) return { url, pid, stop };
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`wrangler dev did not become healthy: ${stderr.slice(-2_000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
