import { createServer, type Server } from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type * as FreePort from "../../runner/src/coordinator/free-port.js";
import { tempDir } from "../support/cli.js";

// A port found free and bound a moment later can be taken meanwhile: by another coordinator starting, or
// by any process's outgoing connection, whose local port comes from the same range. A run on a busy
// machine then failed at its start (exit 1, "the local coordinator did not start"). Here the port a
// free-port probe would find is already held when the coordinator binds: the start must not depend on it.
const held: { server?: Server; port?: number | undefined } = {};

vi.mock("../../runner/src/coordinator/free-port.js", async (original) => ({
  ...(await original<typeof FreePort>()),
  freePort: () => Promise.resolve(held.port ?? 0),
}));

const { startLocalCoordinator } = await import("../../runner/src/coordinator/local-coordinator.js");

describe("the local coordinator's port, when none is asked for", () => {
  const tmp = tempDir("coordinator-port");
  beforeAll(async () => {
    held.server = createServer();
    await new Promise<void>((resolve) => held.server?.listen(0, "127.0.0.1", resolve));
    const address = held.server.address();
    held.port = typeof address === "object" && address ? address.port : undefined;
  });
  afterAll(async () => {
    await new Promise((resolve) => held.server?.close(resolve));
    tmp.cleanup();
  });

  it("is the one the runtime bound, so a port taken meanwhile never fails the start", async () => {
    const coordinator = await startLocalCoordinator({ stateDir: path.join(tmp.dir, "state") });
    try {
      expect(new URL(coordinator.url).port).not.toBe(String(held.port));
      const health = await fetch(`${coordinator.url}/healthz`);
      expect(health.status).toBe(200);
    } finally {
      await coordinator.stop();
    }
  });
});
