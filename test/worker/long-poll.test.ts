import { describe, expect, it } from "vitest";
import { call, candidateBody, createLoop, logOf, ndjson, parseJsonl, postJson } from "./fixtures.js";

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

  it("two runners racing for one job: exactly one gets it, the other is answered 204", async () => {
    const loop = await createLoop("race", ["parse.empty"]);
    expect((await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("race"))).status).toBe(201);
    const answers = await Promise.all(["runner-a", "runner-b"].map((runner_id) => postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id })));
    expect(answers.map((answer) => answer.status).sort()).toEqual([200, 204]);
    const events = parseJsonl(await ndjson(await call(`/v1/loops/${loop.loop_id}/events`)));
    expect(events.filter((event) => event.type === "lease_granted")).toHaveLength(1);
  });

  it("a lease long-poll is held while nothing is queued and answered with the job a proposal queues", async () => {
    const loop = await createLoop("poll-lease", ["parse.empty"]);
    const waiting = postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "patient", wait_ms: 20_000 });
    let answered = false;
    void waiting.then(() => (answered = true));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(answered).toBe(false);
    expect((await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("poll-lease"))).status).toBe(201);
    const leased = await waiting;
    expect(leased.status).toBe(200);
    expect(await leased.json()).toMatchObject({ job: { candidate_id: "c1", compare_to: { candidate_id: "t0" } } });
    // With nothing queued, a short wait ends in 204; a wait past 25 s is refused.
    expect((await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "patient-2", wait_ms: 100 })).status).toBe(204);
    expect((await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "patient-2", wait_ms: 25_001 })).status).toBe(400);
  });

  it("a runner waiting in a lease long-poll gets a job the moment its holder releases it, under a higher fencing token", async () => {
    const loop = await createLoop("poll-release", ["parse.empty"]);
    expect((await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("poll-release"))).status).toBe(201);
    const held = await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "stopping" });
    const lease = (await held.json()) as { lease_id: string; fencing_token: number };
    const waiting = postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "patient-3", wait_ms: 20_000 });
    let answered = false;
    void waiting.then(() => (answered = true));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(answered).toBe(false);
    expect((await postJson(`/v1/leases/${lease.lease_id}/release`, { fencing_token: lease.fencing_token })).status).toBe(200);
    const leased = await waiting;
    expect(leased.status).toBe(200);
    expect(await leased.json()).toMatchObject({ fencing_token: lease.fencing_token + 1, job: { candidate_id: "c1" } });
  });

  it("a contract's evaluate.labels: a runner without them gets no job, one with them does", async () => {
    const loop = await createLoop("labels", ["parse.empty"], { evaluate: { labels: { gpu: "h100" } } });
    expect((await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("labels"))).status).toBe(201);
    const before = await logOf(loop.loop_id);
    expect((await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "laptop" })).status).toBe(204);
    expect((await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "cpu-box", labels: { gpu: "none" } })).status).toBe(204);
    expect(await logOf(loop.loop_id)).toEqual(before);
    const leased = await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "gpu-box", labels: { gpu: "h100", os: "linux" } });
    expect(leased.status).toBe(200);
    // Malformed labels are refused as a bad request, not matched.
    expect((await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "odd", labels: { "gpu model": "x" } })).status).toBe(400);
  });
});
