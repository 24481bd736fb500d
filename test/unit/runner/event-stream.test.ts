import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import type { LoopEvent } from "#shared/engine/index.js";
import { Client } from "../../../runner/src/coordinator/client.js";
import { followEvents } from "../../../runner/src/coordinator/event-stream.js";
import { LoopHarness, sealedLog } from "../engine-harness.js";

// `watch` follows the log as Server-Sent Events (coordinator/event-stream.ts). A connection that drops is
// opened again with Last-Event-ID set to the last event handled: every event is handled once, in order.

function loopEvents(): LoopEvent[] {
  const harness = new LoopHarness(["suite.a"]);
  harness.evaluate("c1", ["suite.a"]);
  return sealedLog(harness.events);
}

const sse = (event: LoopEvent) => `id: ${event.seq}\ndata: ${JSON.stringify(event)}\n\n`;

/**
 * Serves `respond` as the coordinator (told which Last-Event-ID each connection asked from, in order),
 * follows the loop's events through it until the last one, and answers what was handled and said.
 */
async function followThrough(
  events: LoopEvent[],
  respond: (response: ServerResponse, asked: (string | undefined)[]) => void,
): Promise<{ handled: number[]; dropped: string[]; asked: (string | undefined)[]; last: number }> {
  const asked: (string | undefined)[] = [];
  server = createServer((request, response) => {
    connections++;
    const lastId = request.headers["last-event-id"];
    asked.push(Array.isArray(lastId) ? lastId[0] : lastId);
    response.writeHead(200, { "Content-Type": "text/event-stream" });
    respond(response, asked);
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const client = new Client(`http://127.0.0.1:${port}`, { token: "t", retryForMs: 2_000 });
  const handled: number[] = [];
  const dropped: string[] = [];
  const lastSeq = events.at(-1)?.seq ?? 0;
  const last = await followEvents(
    client,
    "lp_0123456789abcdef01234567",
    0,
    (event) => {
      handled.push(event.seq);
      return event.seq === lastSeq;
    },
    (why) => dropped.push(why),
  );
  return { handled, dropped, asked, last };
}

let server: Server | undefined;
/** Connections the coordinator was asked for, in this test. */
let connections = 0;

describe("following a loop's events", () => {
  afterEach(async () => {
    connections = 0;
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  it("resumes a dropped stream from the last event handled, missing none and handling none twice", async () => {
    const events = loopEvents();
    expect(events.length).toBeGreaterThanOrEqual(4);
    const { handled, dropped, asked, last } = await followThrough(events, (response, asked) => {
      if (asked.length === 1) {
        // The first connection carries two events, then drops mid-stream.
        response.write(`retry: 10\n\n${sse(events[0] as LoopEvent)}${sse(events[1] as LoopEvent)}`);
        setTimeout(() => response.socket?.destroy(), 20);
        return;
      }
      // The second starts where the reader said, with the last one again (a stale repeat), and stays open.
      response.write(
        events
          .slice(Number(asked.at(-1)) - 1)
          .map(sse)
          .join(""),
      );
    });
    expect(handled).toEqual(events.map((event) => event.seq));
    expect(last).toBe(events.at(-1)?.seq);
    expect(asked).toEqual(["0", "2"]);
    expect(dropped).toHaveLength(1);
  });

  it("reads on at once, saying nothing, when the coordinator ends a stream (each lasts at most ten minutes)", async () => {
    const events = loopEvents();
    const { handled, dropped, asked } = await followThrough(events, (response, asked) => {
      // Each stream carries two events and ends cleanly, as a bounded one does.
      const from = Number(asked.at(-1));
      response.end(
        events
          .slice(from, from + 2)
          .map(sse)
          .join(""),
      );
    });
    expect(handled).toEqual(events.map((event) => event.seq));
    expect(asked.slice(0, 2)).toEqual(["0", "2"]);
    expect(dropped).toEqual([]);
  });

  it("stops with the error on an event it cannot read, instead of reconnecting to meet it again for ever", async () => {
    const events = loopEvents();
    const unknown = { ...(events[1] as LoopEvent), type: "from_a_newer_coordinator" };
    const following = followThrough(events, (response) => {
      response.write(`retry: 10\n\n${sse(events[0] as LoopEvent)}id: 2\ndata: ${JSON.stringify(unknown)}\n\n`);
    });
    await expect(following).rejects.toThrow(/from_a_newer_coordinator|Invalid/);
    expect(connections).toBe(1);
  });
});
