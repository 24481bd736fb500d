import { describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import { streamEvents } from "../../worker/src/loop/event-stream.js";
import type { LoopEventStore } from "../../worker/src/loop/loop-event-store.js";
import type { LoopObject } from "../../worker/src/loop/loop-object.js";
import { call, candidateBody, createLoop, loopObject, postJson } from "./fixtures.js";

// GET /v1/loops/:id/events as Server-Sent Events (DESIGN §8): the log after Last-Event-ID, then each
// event as it is appended, on one open connection, each with its seq as the SSE id.

/** Reads SSE messages from a stream until `count` have come; answers their ids and event types. */
async function readMessages(body: ReadableStream<Uint8Array>, count: number): Promise<{ id: string; type: string }[]> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const messages: { id: string; type: string }[] = [];
  while (messages.length < count) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = text.indexOf("\n\n")) >= 0) {
      const block = text.slice(0, end);
      text = text.slice(end + 2);
      const id = /^id: (\d+)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (id && data) messages.push({ id, type: (JSON.parse(data) as { type: string }).type });
    }
  }
  await reader.cancel();
  return messages;
}

describe("the event stream", () => {
  it("sends the log after Last-Event-ID, then a proposal as it is appended, on the same connection", async () => {
    const loop = await createLoop("stream", ["parse.empty"]);
    const response = await call(`/v1/loops/${loop.loop_id}/events`, { headers: { accept: "text/event-stream", "last-event-id": "0" } });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toContain("text/event-stream");
    const reading = readMessages(response.body as ReadableStream<Uint8Array>, 2);
    expect((await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("stream"))).status).toBe(201);
    expect(await reading).toEqual([
      { id: "1", type: "loop_created" },
      { id: "2", type: "candidate_proposed" },
    ]);
    // A reader reconnecting after event 1 gets event 2 first, never event 1 again.
    const resumed = await call(`/v1/loops/${loop.loop_id}/events`, { headers: { accept: "text/event-stream", "last-event-id": "1" } });
    expect(await readMessages(resumed.body as ReadableStream<Uint8Array>, 1)).toEqual([{ id: "2", type: "candidate_proposed" }]);
  });

  it("refuses a malformed Last-Event-ID (400), and another team's caller as for any loop route (404)", async () => {
    const loop = await createLoop("stream-refused", ["parse.empty"]);
    expect((await call(`/v1/loops/${loop.loop_id}/events`, { headers: { accept: "text/event-stream", "last-event-id": "x" } })).status).toBe(400);
    expect((await call(`/v1/loops/lp_${"9".repeat(24)}/events`, { headers: { accept: "text/event-stream" } })).status).toBe(404);
  });

  it("ends once its time is up, after the events it has, so its reader reconnects and the object may be evicted", async () => {
    const loop = await createLoop("stream-bounded", ["parse.empty"]);
    const text = await runInDurableObject(loopObject(loop.loop_id), async (instance: LoopObject) => {
      const store = (instance as unknown as { store: LoopEventStore }).store;
      return new Response(streamEvents(store, 0, 200)).text();
    });
    expect(text).toContain("id: 1\n");
    expect(text).toMatch(/"type":"loop_created"/);
  });
});
