import path from "node:path";
import { Client } from "./client.js";
import { findRunningCoordinator, startLocalCoordinator } from "./local-coordinator.js";
import { progress, type OutputMode } from "./output.js";
import { defaultStateDir } from "./paths.js";
import { onShutdown } from "./shutdown.js";

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
 * directory, starting it on demand and stopping it on close.
 */
export async function connect(options: ServerOptions, mode: OutputMode): Promise<Connection> {
  const onRetry = (reason: string, attempt: number) => {
    if (attempt === 1 || attempt % 5 === 0) progress(mode, `coordinator unreachable (${reason}); retrying…`);
  };
  const server = options.server ?? process.env.LOOPWARDEN_SERVER;
  const token = options.token ?? process.env.LOOPWARDEN_TOKEN;
  if (server) {
    return { client: new Client(server, { token, onRetry }), url: server, local: false, ephemeral: false, close: async () => {} };
  }
  const stateDir = options.state ? path.resolve(options.state) : defaultStateDir();
  const running = await findRunningCoordinator(stateDir);
  if (running) {
    return { client: new Client(running, { token, onRetry }), url: running, local: true, ephemeral: false, close: async () => {} };
  }
  progress(mode, `starting the local coordinator (state: ${stateDir})…`);
  const coordinator = await startLocalCoordinator({ stateDir, onNote: (text) => progress(mode, text) });
  const unregister = onShutdown(() => coordinator.stop());
  return {
    client: new Client(coordinator.url, { token, onRetry }),
    url: coordinator.url,
    local: true,
    ephemeral: true,
    close: async () => {
      unregister();
      await coordinator.stop();
    },
  };
}
