import { createServer } from "node:net";

/** A TCP server on 127.0.0.1 that accepts and closes every connection, for network-isolation tests. */
export interface LoopbackServer {
  port: number;
  close(): Promise<void>;
}

/** Starts a LoopbackServer on a free port. */
export async function startLoopbackServer(): Promise<LoopbackServer> {
  const server = createServer((socket) => socket.on("error", () => {}).end());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as { port: number }).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
