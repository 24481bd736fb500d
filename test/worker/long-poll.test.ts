import { describe, expect, it } from "vitest";
import { call, candidateBody, createLoop, ndjson, parseJsonl, postJson } from "./fixtures.js";

// Long-polls (DESIGN §8): a reader waiting for what follows the log's head is answered when an event
// is appended, not by polling; with nothing appended it gets an empty page when its wait ends.

describe("long-polls", () => {
  it("events after the head, with wait_ms: held until a proposal appends, then answered with it", async () => {
    const loop = await createLoop("poll-events", ["parse.empty"]);
    const waiting = call(`/v1/loops/${loop.loop_id}/events?after=${loop.head.seq}&wait_ms=20000`);
    let answered = false;
    void waiting.then(() => (answered = true));
    // Still waiting while nothing happens (the order of these awaits is what is asserted, not a duration).
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(answered).toBe(false);
    expect((await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("poll-events"))).status).toBe(201);
    const events = parseJsonl(await ndjson(await waiting));
    expect(events.map((event) => event.type)).toEqual(["candidate_proposed"]);
    expect(events[0]?.seq).toBe(loop.head.seq + 1);
  });

  it("with nothing appended, an empty page when the wait ends; a wait past 25 s is refused", async () => {
    const loop = await createLoop("poll-quiet", ["parse.empty"]);
    const quiet = await call(`/v1/loops/${loop.loop_id}/events?after=${loop.head.seq}&wait_ms=300`);
    expect(quiet.status).toBe(200);
    expect(await ndjson(quiet)).toBe("");
    expect((await call(`/v1/loops/${loop.loop_id}/events?after=0&wait_ms=25001`)).status).toBe(400);
    // Events already there are answered at once, whatever the wait.
    const ready = parseJsonl(await ndjson(await call(`/v1/loops/${loop.loop_id}/events?after=0&wait_ms=25000`)));
    expect(ready.map((event) => event.type)).toEqual(["loop_created"]);
  });
});
