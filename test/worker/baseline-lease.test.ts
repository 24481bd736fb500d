import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { call, createLoopBody, drainOutbox, logOf, ndjson, observationOf, parseJsonl, pendingBaselineOf, postJson } from "./fixtures.js";

// t0 as a leased job (DESIGN §11): a loop created with `t0_commit` has no log until a runner whose labels
// satisfy the contract's `evaluate.labels` measures its baseline on a lease; the loop is created from that
// report, and its first event names the runner. Until then it answers what it waits for.

const GPU = { gpu: "h100" };

/** A creation whose baseline a runner with gpu=h100 is to measure. */
function pendingBody(key: string) {
  const { t0, ...body } = createLoopBody(key, [], { evaluate: { labels: GPU } });
  return { ...body, t0_commit: t0.commit };
}

async function createPending(key: string): Promise<string> {
  const response = await postJson("/v1/loops", pendingBody(key));
  expect(response.status, await response.clone().text()).toBe(202);
  const answer = (await response.json()) as { awaiting_baseline: { loop_id: string; labels: Record<string, string>; lease: unknown }; created: boolean };
  expect(answer).toMatchObject({ created: true, awaiting_baseline: { labels: GPU, lease: null } });
  return answer.awaiting_baseline.loop_id;
}

async function errorCode(response: Response): Promise<string> {
  return ((await response.json()) as { error: { code: string } }).error.code;
}

describe("a loop whose baseline a runner measures", { timeout: 60_000 }, () => {
  it("answers what it waits for, is listed for runners, and is leased only to a runner with the contract's labels", async () => {
    const loopId = await createPending("waits");
    const summary = await call(`/v1/loops/${loopId}`);
    expect(summary.status).toBe(409);
    const refusal = (await summary.json()) as { error: { code: string; message: string } };
    expect(refusal.error.code).toBe("awaiting_baseline");
    expect(refusal.error.message).toMatch(/waiting for a runner with gpu=h100 to measure the baseline/);
    expect(await ndjson(await call(`/v1/loops/${loopId}/events`))).toBe("");
    await drainOutbox(loopId);
    const listed = (await (await call("/v1/loops?status=awaiting_baseline")).json()) as { loops: { loop_id: string; status: string }[] };
    expect(listed.loops.find((loop) => loop.loop_id === loopId)?.status).toBe("awaiting_baseline");

    expect((await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "laptop" })).status).toBe(204);
    const leased = await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box", labels: GPU });
    expect(leased.status).toBe(200);
    const lease = (await leased.json()) as { lease_id: string; job: { kind: string; candidate_id: string; commit: string } };
    expect(lease).toMatchObject({ lease_id: `${loopId}-B1`, job: { kind: "baseline", candidate_id: "t0", commit: pendingBody("waits").t0_commit } });
    // One runner at a time: another with the labels waits.
    expect((await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box-2", labels: GPU })).status).toBe(204);
    const retried = await postJson("/v1/loops", pendingBody("waits"));
    expect(((await retried.json()) as { awaiting_baseline: { lease: { runner_id: string } } }).awaiting_baseline.lease.runner_id).toBe("gpu-box");
  });

  it("a creator waiting for its baseline is answered as soon as a runner takes the measurement", { timeout: 15_000 }, async () => {
    const loopId = await createPending("told");
    const waiting = call("/v1/loops?wait_ms=25000", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(pendingBody("told")),
    });
    // Held while nothing happens (the order of these awaits is what is asserted, as in long-poll.test.ts).
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect((await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box", labels: GPU })).status).toBe(200);
    // Answered with who measures it, long before its 25 s wait ends (the test's own limit is 15 s).
    const answer = (await (await waiting).json()) as { awaiting_baseline: { lease: { runner_id: string } | null } };
    expect(answer.awaiting_baseline.lease?.runner_id).toBe("gpu-box");
  });

  it("is created from its holder's report — the creator's waiting retry answered with the loop — and names the runner in loop_created", async () => {
    const loopId = await createPending("measured");
    const lease = (await (await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box", labels: GPU })).json()) as {
      lease_id: string;
      fencing_token: number;
    };
    const waiting = call("/v1/loops?wait_ms=20000", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(pendingBody("measured")),
    });
    const report = { fencing_token: lease.fencing_token, observation: observationOf(["parse.empty"]) };
    const created = await postJson(`/v1/leases/${lease.lease_id}/baseline`, report);
    expect(created.status, await created.clone().text()).toBe(201);
    expect(await created.json()).toMatchObject({ created: true, loop: { loop_id: loopId, status: "running", t0: { failing: 2 } } });
    const answered = await waiting;
    expect(answered.status).toBe(200);
    expect(await answered.json()).toMatchObject({ created: false, loop: { loop_id: loopId, status: "running" } });

    const [first] = parseJsonl(await ndjson(await call(`/v1/loops/${loopId}/events`))) as {
      type: string;
      data: { t0_measured_by?: Record<string, unknown> };
    }[];
    expect(first?.type).toBe("loop_created");
    expect(first?.data.t0_measured_by).toMatchObject({ runner_id: "gpu-box", holder: "owner", lease_id: lease.lease_id, fencing_token: 1 });
    expect(await pendingBaselineOf(loopId)).toBeNull();
    expect((await call(`/v1/loops/${loopId}`)).status).toBe(200);

    // A retry of the report answers the loop; the same lease with another body is a conflict; both change nothing.
    const log = await logOf(loopId);
    const again = await postJson(`/v1/leases/${lease.lease_id}/baseline`, report);
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ created: false });
    const other = await postJson(`/v1/leases/${lease.lease_id}/baseline`, { ...report, observation: observationOf([]) });
    expect(other.status).toBe(422);
    expect(await logOf(loopId)).toEqual(log);
    // The baseline lease is over: its heartbeat says stop.
    expect(await errorCode(await postJson(`/v1/leases/${lease.lease_id}/heartbeat`, { fencing_token: 1 }))).toBe("stale_lease");
  });

  it("refuses a report from a lease given back, a candidate's lease on the baseline route, and both t0 and t0_commit — changing nothing", async () => {
    const loopId = await createPending("refused");
    const lease = (await (await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box", labels: GPU })).json()) as {
      lease_id: string;
      fencing_token: number;
    };
    expect((await postJson(`/v1/leases/${lease.lease_id}/release`, { fencing_token: 1 })).status).toBe(200);
    const record = await pendingBaselineOf(loopId);
    const stale = await postJson(`/v1/leases/${lease.lease_id}/baseline`, { fencing_token: 1, observation: observationOf([]) });
    expect(stale.status).toBe(409);
    expect(await errorCode(stale)).toBe("stale_lease");
    const candidates = await postJson(`/v1/leases/${loopId}-L1/baseline`, { fencing_token: 1, observation: observationOf([]) });
    expect(candidates.status).toBe(404);
    expect(await pendingBaselineOf(loopId)).toBe(record);
    expect((await logOf(loopId)).events).toBe(0);
    // The job is back: the next runner with the labels takes it under a higher fencing token.
    const next = (await (await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box-2", labels: GPU })).json()) as { lease_id: string };
    expect(next.lease_id).toBe(`${loopId}-B2`);

    const { t0, ...body } = createLoopBody("both", []);
    const both = await postJson("/v1/loops", { ...body, t0, t0_commit: t0.commit });
    expect(both.status).toBe(400);
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM loops WHERE name = ?").bind("loop-both").first<{ n: number }>();
    expect(rows?.n).toBe(0);
  });
});
