import path from "node:path";
import { Client } from "./client.js";
import { VERSION } from "#shared/version.js";
import { assertWorkersRuntime, findRunningCoordinator, startLocalCoordinator } from "./local-coordinator.js";
import { describeIdle, idleMs, keepActive, startWarmCoordinator, stopCoordinator, touchActivity } from "./warm-coordinator.js";
import { bundleStamp, ensureWorkerBundle } from "../../../scripts/lib/worker-bundle.js";
import { progress, type OutputMode } from "../output.js";
import { defaultStateDir } from "../paths.js";
import { hideFromZones } from "../zones/sandbox.js";
import { onShutdown } from "../process/shutdown.js";
import { localOwnerToken } from "./state-secrets.js";

/** A connection to a coordinator; `close` stops the local one if this process started it. */
export interface Connection {
  client: Client;
  url: string;
  local: boolean;
  /** Whether this process started the coordinator and `close` stops it: its URLs answer only until then. */
  ephemeral: boolean;
  close(): Promise<void>;
}

/** Where a command should find its coordinator. */
export interface ServerOptions {
  server?: string | undefined;
  token?: string | undefined;
  state?: string | undefined;
}

/**
 * Connects to `--server` (or LOOPWARDEN_SERVER); without one, to the local coordinator for the state
 * directory: the one already serving it, else a warm one started on demand that stays up until
 * LOOPWARDEN_IDLE (15 minutes) passes without use — or, with LOOPWARDEN_IDLE=0, one in this process,
 * stopped on close.
 */
export async function connect(options: ServerOptions, mode: OutputMode): Promise<Connection> {
  const onRetry = (reason: string, attempt: number) => {
    if (attempt === 1 || attempt % 5 === 0) progress(mode, `coordinator unreachable (${reason}); retrying…`);
  };
  const server = options.server ?? process.env.LOOPWARDEN_SERVER;
  const token = options.token ?? (process.env.LOOPWARDEN_TOKEN || undefined);
  if (server) {
    return { client: new Client(server, { token, onRetry }), url: server, local: false, ephemeral: false, close: async () => {} };
  }
  const stateDir = options.state ? path.resolve(options.state) : defaultStateDir();
  // The owner token and the signing key live there: no zone may see it (DESIGN §6.7).
  hideFromZones(stateDir);
  // The local coordinator is the user's own: without a token given, commands act as its owner (DESIGN §11).
  const localToken = token ?? (await localOwnerToken(stateDir)).token;
  const idle = idleMs();
  let running = await findRunningCoordinator(stateDir);
  if (running?.daemon && (running.version !== VERSION || running.bundle !== (await currentBundle()))) {
    // A warm coordinator of another version (or, in a source checkout, of older worker code) is replaced.
    progress(
      mode,
      `the warm local coordinator runs ${running.version === VERSION ? "an older worker bundle" : `version ${running.version ?? "unknown"}`}: restarting it`,
    );
    await stopCoordinator(stateDir);
    running = null;
  }
  if (!running && idle > 0) {
    await assertWorkersRuntime();
    progress(mode, `starting the local coordinator (state: ${stateDir}; ${describeIdle(idle)})…`);
    running = await startWarmCoordinator(stateDir, idle);
  }
  if (running) {
    const release = keepActive(stateDir);
    await touchActivity(stateDir);
    return { client: new Client(running.url, { token: localToken, onRetry }), url: running.url, local: true, ephemeral: false, close: release };
  }
  // LOOPWARDEN_IDLE=0: a coordinator in this process, for this command only.
  progress(mode, `starting the local coordinator (state: ${stateDir})…`);
  const coordinator = await startLocalCoordinator({ stateDir, onNote: (text) => progress(mode, text) });
  const unregister = onShutdown(() => coordinator.stop());
  return {
    client: new Client(coordinator.url, { token: localToken, onRetry }),
    url: coordinator.url,
    local: true,
    ephemeral: true,
    close: async () => {
      unregister();
      await coordinator.stop();
    },
  };
}

/** The worker bundle a coordinator started now would run (rebuilt first in a source checkout whose sources changed). */
async function currentBundle(): Promise<string> {
  await ensureWorkerBundle();
  return bundleStamp();
}

/**
 * Runs `use` with a connection to the coordinator (`connect`), closed afterwards whatever happens (a
 * local coordinator this process started is stopped): what every command that only talks to the
 * coordinator does.
 */
export async function withConnection<T>(options: ServerOptions, mode: OutputMode, use: (connection: Connection) => Promise<T>): Promise<T> {
  const connection = await connect(options, mode);
  try {
    return await use(connection);
  } finally {
    await connection.close();
  }
}
