import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { verifyChain } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import {
  TEST_IDS,
  call,
  candidateBody,
  createLoop,
  createLoopBody,
  drainOutbox,
  observationOf,
  ndjson,
  parseJsonl,
  postJson,
  proposeAndLease,
  logOf,
  commitOf,
} from "./fixtures.js";

const [A, B, C] = TEST_IDS;

interface ErrorEnvelope {
  error: { code: string; message: string; issues?: { path: string; message: string }[] };
}

async function errorOf(response: Response): Promise<ErrorEnvelope["error"]> {
  expect(response.headers.get("content-type")).toContain("application/json");
  return ((await response.json()) as ErrorEnvelope).error;
}

async function report(leaseId: string, body: unknown): Promise<Response> {
  return postJson(`/v1/leases/${leaseId}/report`, body);
}

describe("POST /v1/loops", () => {
  it("creates a loop (201), answers the same loop on a retry (200), refuses the key with another body (422)", async () => {
    const body = createLoopBody("create", [A, B]);
    const first = await postJson("/v1/loops", body);
    expect(first.status).toBe(201);
    const created = (await first.json()) as { created: boolean; loop: { loop_id: string; head: unknown } };
    expect(created).toMatchObject({
      created: true,
      loop: {
        loop_id: expect.stringMatching(/^lp_[0-9a-f]{24}$/),
        name: "loop-create",
        mode: "check_fixpoint",
        status: "running",
        iteration: 0,
        max_iterations: 50,
        // Two failing tests, plus the gate that reported them (a failed gate is a failing test too).
        t0: { failing: 3 },
        best: { candidate_id: "t0", failing: 3 },
        halt: null,
        head: { seq: 1 },
      },
    });

    const retry = await postJson("/v1/loops", body);
    expect(retry.status).toBe(200);
    expect(await retry.json()).toEqual({ ...created, created: false });

    const conflicting = await postJson("/v1/loops", createLoopBody("create", [A]));
    expect(conflicting.status).toBe(422);
    expect(await errorOf(conflicting)).toMatchObject({ code: "idempotency_conflict" });
    expect(await logOf(created.loop.loop_id)).toEqual({ events: 1, head: created.loop.head });
  });

  it("halts a loop whose baseline already passes with success_condition_met", async () => {
    const loop = await createLoop("already-green", []);
    // loop_created, halted, then the final receipt's receipt_issued.
    expect(loop).toMatchObject({
      status: "halted",
      halt: { halt_reason: "success_condition_met", exit_class: 10 },
      head: { seq: 3 },
      receipt_id: expect.any(String),
    });
    const proposed = await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("already-green"));
    expect(proposed.status).toBe(409);
    expect(await errorOf(proposed)).toMatchObject({ code: "loop_halted" });
  });

  it("creates a task_list loop whose tasks, not yet checked at t0, all count as failing", async () => {
    const response = await postJson(
      "/v1/loops",
      createLoopBody("task-list", [A], { mode: "task_list", tasks: [{ id: "t1", title: "one", check: "node t1.js" }] }),
    );
    expect(response.status).toBe(201);
    // suite.a, the gate that reported it, and task:t1 (no task result was observed at t0).
    expect(await response.json()).toMatchObject({ loop: { mode: "task_list", status: "running", t0: { failing: 3 } } });
  });
});

describe("a check_fixpoint loop through HTTP", () => {
  it("runs propose → lease → report to a promotion, a regression and a success halt, with a verifiable log", async () => {
    const loop = await createLoop("slice", [A, B]);
    const id = loop.loop_id;

    const got = await call(`/v1/loops/${id}`);
    expect(got.status).toBe(200);
    expect(await got.json()).toEqual(loop);

    // Propose; a retried proposal is answered from the log, not registered twice.
    const proposed = await postJson(`/v1/loops/${id}/candidates`, candidateBody("slice-1"));
    expect(proposed.status).toBe(201);
    expect(await proposed.json()).toMatchObject({ replayed: false, candidate: { candidate_id: "c1", parent: "t0", status: "queued", verdict: null } });
    const replayed = await postJson(`/v1/loops/${id}/candidates`, candidateBody("slice-1"));
    expect(replayed.status).toBe(200);
    expect(await replayed.json()).toMatchObject({ replayed: true, candidate: { candidate_id: "c1" } });

    // Lease: the job names the candidate and the contract hash, never a command (DESIGN §4.4).
    const leased = await postJson(`/v1/loops/${id}/leases`, { runner_id: "laptop" });
    expect(leased.status).toBe(200);
    const lease = (await leased.json()) as { lease_id: string; fencing_token: number; job: Record<string, unknown> };
    expect(lease).toMatchObject({
      loop_id: id,
      fencing_token: 1,
      ttl_ms: 120_000,
      job: { kind: "evaluate", candidate_id: "c1", commit: candidateBody("slice-1").commit, contract_hash: loop.contract_hash },
    });
    // What it is compared against and where its commits are, but still no command.
    expect(Object.keys(lease.job).sort()).toEqual(["bundles", "candidate_id", "commit", "compare_to", "contract_hash", "kind"]);
    expect(lease.job).toMatchObject({ compare_to: { candidate_id: "t0", commit: commitOf("t0-slice") }, bundles: [] });
    const idle = await postJson(`/v1/loops/${id}/leases`, { runner_id: "ci-box" });
    expect(idle.status).toBe(204);
    expect(await idle.text()).toBe("");

    const promoted = await report(lease.lease_id, { fencing_token: lease.fencing_token, observation: observationOf([A]) });
    expect(promoted.status).toBe(200);
    expect(await promoted.json()).toMatchObject({
      verdict: { candidate_id: "c1", decision: "promoted", reason: "fewer_failures", failing_before: 3, failing_after: 2 },
      loop: { iteration: 1, status: "running", best: { candidate_id: "c1", failing: 2 } },
    });

    // B passed in the best-so-far: breaking it is rejected even though A got fixed.
    const second = await proposeAndLease(id, "slice-2");
    const regressed = await report(second.lease_id, { fencing_token: second.fencing_token, observation: observationOf([B]) });
    expect(await regressed.json()).toMatchObject({
      verdict: { candidate_id: "c2", decision: "rejected", reason: "regressed", regressed: [B] },
      loop: { iteration: 2, best: { candidate_id: "c1" } },
    });

    const third = await proposeAndLease(id, "slice-3");
    const success = await report(third.lease_id, { fencing_token: third.fencing_token, observation: observationOf([]) });
    const final = (await success.json()) as { loop: { head: { seq: number; hash: string } } };
    expect(final).toMatchObject({
      verdict: { candidate_id: "c3", decision: "promoted" },
      loop: { status: "halted", iteration: 3, halt: { halt_reason: "success_condition_met", exit_class: 10 }, best: { candidate_id: "c3", failing: 0 } },
    });

    const late = await postJson(`/v1/loops/${id}/candidates`, candidateBody("slice-4"));
    expect(late.status).toBe(409);
    expect(await errorOf(late)).toMatchObject({ code: "loop_halted" });

    // The log: JSONL whose hash chain verifies to the head the loop reports.
    const events = await call(`/v1/loops/${id}/events`);
    expect(events.status).toBe(200);
    expect(events.headers.get("content-type")).toContain("application/x-ndjson");
    const log = parseJsonl(await ndjson(events));
    expect(log.map((event) => event.type)).toEqual([
      "loop_created",
      "candidate_proposed",
      "lease_granted",
      "observation_reported",
      "verdict",
      "candidate_proposed",
      "lease_granted",
      "observation_reported",
      "verdict",
      "candidate_proposed",
      "lease_granted",
      "observation_reported",
      "verdict",
      "halted",
      "receipt_issued",
    ]);
    expect(verifyChain(log)).toEqual({ ok: true, head: final.loop.head });

    // `?after=seq` serves the tail, which chains on from the event before it.
    const tail = parseJsonl(await ndjson(await call(`/v1/loops/${id}/events?after=12`)));
    expect(tail.map((event) => event.seq)).toEqual([13, 14, 15]);
    expect(tail[0]?.prev).toBe(log[11]?.hash);
  });

  it("answers a retried report with the same verdict and no new event; another body under that lease is 422", async () => {
    const loop = await createLoop("retry-report", [A, B]);
    const lease = await proposeAndLease(loop.loop_id, "retry-report");
    const body = { fencing_token: lease.fencing_token, observation: observationOf([A]) };
    const first = await report(lease.lease_id, body);
    const verdict = ((await first.json()) as { verdict: unknown }).verdict;
    const before = await logOf(loop.loop_id);

    const retry = await report(lease.lease_id, body);
    expect(retry.status).toBe(200);
    expect(((await retry.json()) as { verdict: unknown }).verdict).toEqual(verdict);

    // Invariant 6: the same key (lease and fencing token) with a different body is 422, and changes nothing.
    const different = await report(lease.lease_id, { ...body, observation: observationOf([]) });
    expect(different.status).toBe(422);
    expect(await errorOf(different)).toMatchObject({ code: "idempotency_conflict" });
    expect(await logOf(loop.loop_id)).toEqual(before);
  });

  it("refuses a report or heartbeat under the wrong fencing token with 409 stale_lease and records nothing", async () => {
    const loop = await createLoop("stale-token", [A]);
    const lease = await proposeAndLease(loop.loop_id, "stale-token");
    const before = await logOf(loop.loop_id);

    const beat = await postJson(`/v1/leases/${lease.lease_id}/heartbeat`, { fencing_token: lease.fencing_token + 1 });
    expect(beat.status).toBe(409);
    expect(await errorOf(beat)).toMatchObject({ code: "stale_lease" });
    const stale = await report(lease.lease_id, { fencing_token: lease.fencing_token + 1, observation: observationOf([]) });
    expect(stale.status).toBe(409);
    expect(await errorOf(stale)).toMatchObject({ code: "stale_lease" });
    expect(await logOf(loop.loop_id)).toEqual(before);

    const live = await postJson(`/v1/leases/${lease.lease_id}/heartbeat`, { fencing_token: lease.fencing_token });
    expect(live.status).toBe(200);
    expect(await live.json()).toMatchObject({ lease_id: lease.lease_id, fencing_token: lease.fencing_token });
  });

  it("a released lease re-queues its job at once: another runner leases it with a higher token; a retry answers the same; a stale release is 409", async () => {
    const loop = await createLoop("release", [A, B]);
    const lease = await proposeAndLease(loop.loop_id, "release");
    const released = await postJson(`/v1/leases/${lease.lease_id}/release`, { fencing_token: lease.fencing_token });
    expect(released.status).toBe(200);
    expect(await released.json()).toEqual({ lease_id: lease.lease_id, candidate_id: lease.job.candidate_id, replayed: false });
    const events = parseJsonl(await ndjson(await call(`/v1/loops/${loop.loop_id}/events`)));
    expect(events.at(-1)).toMatchObject({
      type: "lease_released",
      data: { lease_id: lease.lease_id, candidate_id: lease.job.candidate_id, fencing_token: lease.fencing_token },
    });
    expect(verifyChain(events).ok).toBe(true);

    // Queued now, long before the lease's TTL: the next runner gets it under a higher fencing token.
    const next = await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "runner-next" });
    expect(next.status).toBe(200);
    const relet = (await next.json()) as { lease_id: string; fencing_token: number; job: { candidate_id: string } };
    expect(relet.job.candidate_id).toBe(lease.job.candidate_id);
    expect(relet.fencing_token).toBeGreaterThan(lease.fencing_token);

    // A retried release (its answer lost) answers the same and records nothing; the old lease is stale for
    // everything else, and a release under another token, or of the new holder's lease by a wrong token, is 409.
    const before = await logOf(loop.loop_id);
    const retry = await postJson(`/v1/leases/${lease.lease_id}/release`, { fencing_token: lease.fencing_token });
    expect(retry.status).toBe(200);
    expect(await retry.json()).toEqual({ lease_id: lease.lease_id, candidate_id: lease.job.candidate_id, replayed: true });
    const beat = await postJson(`/v1/leases/${lease.lease_id}/heartbeat`, { fencing_token: lease.fencing_token });
    expect(beat.status).toBe(409);
    expect(await errorOf(beat)).toMatchObject({ code: "stale_lease" });
    const late = await report(lease.lease_id, { fencing_token: lease.fencing_token, observation: observationOf([A]) });
    expect(late.status).toBe(409);
    expect(await errorOf(late)).toMatchObject({ code: "stale_lease" });
    const wrong = await postJson(`/v1/leases/${relet.lease_id}/release`, { fencing_token: lease.fencing_token });
    expect(wrong.status).toBe(409);
    expect(await errorOf(wrong)).toMatchObject({ code: "stale_lease" });
    const unknown = await postJson(`/v1/leases/${loop.loop_id}-L99/release`, { fencing_token: 99 });
    expect(unknown.status).toBe(404);
    expect(await errorOf(unknown)).toMatchObject({ code: "lease_not_found" });
    expect(await logOf(loop.loop_id)).toEqual(before);

    // The new holder reports as usual; a release after its report is 409 (the job is judged, not out).
    const judged = await report(relet.lease_id, { fencing_token: relet.fencing_token, observation: observationOf([A]) });
    expect(await judged.json()).toMatchObject({ verdict: { candidate_id: lease.job.candidate_id, decision: "promoted" } });
    const afterReport = await postJson(`/v1/leases/${relet.lease_id}/release`, { fencing_token: relet.fencing_token });
    expect(afterReport.status).toBe(409);
    expect(await errorOf(afterReport)).toMatchObject({ code: "stale_lease" });
  });

  it("a heartbeat in a loop that halted since its lease is 409 loop_halted: the job can never be judged", async () => {
    const loop = await createLoop("halted-heartbeat", [A]);
    const held = await proposeAndLease(loop.loop_id, "halted-heartbeat-1");
    const winner = await proposeAndLease(loop.loop_id, "halted-heartbeat-2");
    const success = await report(winner.lease_id, { fencing_token: winner.fencing_token, observation: observationOf([]) });
    expect(await success.json()).toMatchObject({ loop: { status: "halted", halt: { halt_reason: "success_condition_met" } } });
    const beat = await postJson(`/v1/leases/${held.lease_id}/heartbeat`, { fencing_token: held.fencing_token });
    expect(beat.status).toBe(409);
    expect(await errorOf(beat)).toMatchObject({ code: "loop_halted" });
  });

  it("a proposal that asks for the lease gets it in the same answer: one round trip, the same log as propose then lease", async () => {
    const loop = await createLoop("propose-lease", [A, B]);
    const body = { ...candidateBody("propose-lease"), lease: { runner_id: "laptop" } };
    const proposed = await postJson(`/v1/loops/${loop.loop_id}/candidates`, body);
    expect(proposed.status).toBe(201);
    const answer = (await proposed.json()) as {
      candidate: { candidate_id: string; status: string };
      lease: { lease_id: string; fencing_token: number; job: { candidate_id: string } };
    };
    expect(answer.candidate.status).toBe("queued");
    expect(answer.lease.job.candidate_id).toBe(answer.candidate.candidate_id);
    const types = parseJsonl(await ndjson(await call(`/v1/loops/${loop.loop_id}/events`))).map((event) => event.type);
    expect(types.slice(-2)).toEqual(["candidate_proposed", "lease_granted"]);
    // The lease is not part of the proposal: without it, the same key is a replay, not a conflict, and
    // a retry with it answers the lease this runner already holds.
    const without = await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("propose-lease"));
    expect(without.status).toBe(200);
    const retried = await postJson(`/v1/loops/${loop.loop_id}/candidates`, body);
    expect(retried.status).toBe(200);
    expect(((await retried.json()) as { lease: unknown }).lease).toEqual(answer.lease);
    // The report under that lease decides the candidate, as under a lease asked for on its own.
    const reported = await report(answer.lease.lease_id, { fencing_token: answer.lease.fencing_token, observation: observationOf([A]) });
    expect(reported.status).toBe(200);
    expect(await reported.json()).toMatchObject({ verdict: { decision: "promoted" } });
  });

  it("a proposal decided without evaluation leases nothing, even with another candidate queued", async () => {
    const loop = await createLoop("propose-lease-decided", [A]);
    const queued = await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("propose-lease-queued"));
    expect(queued.status).toBe(201);
    const failed = await postJson(`/v1/loops/${loop.loop_id}/candidates`, {
      ...candidateBody("propose-lease-failed", { exit_code: 1 }),
      lease: { runner_id: "laptop" },
    });
    expect(failed.status).toBe(201);
    expect(await failed.json()).toMatchObject({ candidate: { status: "rejected" }, lease: null });
    // The queued one is still there for whoever asks.
    const leased = await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "other" });
    expect(leased.status).toBe(200);
  });

  it("a proposal asking for the lease with labels the contract's lack is registered, with lease null", async () => {
    const loop = await createLoop("propose-lease-labels", [A], { evaluate: { labels: { gpu: "a100" } } });
    const proposed = await postJson(`/v1/loops/${loop.loop_id}/candidates`, { ...candidateBody("propose-lease-labels"), lease: { runner_id: "laptop" } });
    expect(proposed.status).toBe(201);
    expect(await proposed.json()).toMatchObject({ candidate: { status: "queued" }, lease: null });
  });

  it("rejects a failed agent run at once without offering a job, and three in a row halt execution_failure (40)", async () => {
    const loop = await createLoop("agent-fails", [A]);
    for (const [index, expected] of [
      [1, "running"],
      [2, "running"],
      [3, "halted"],
    ] as const) {
      const proposed = await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody(`agent-fails-${index}`, { exit_code: 1 }));
      expect(proposed.status).toBe(201);
      expect(await proposed.json()).toMatchObject({
        candidate: { status: "rejected", verdict: { decision: "rejected", reason: "agent_failed" } },
        loop: { status: expected },
      });
      const leased = await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "laptop" });
      expect(leased.status).toBe(204);
    }
    const summary = (await (await call(`/v1/loops/${loop.loop_id}`)).json()) as { halt: unknown };
    expect(summary.halt).toMatchObject({ halt_reason: "execution_failure", exit_class: 40 });
  });
});

describe("artifacts", () => {
  const bytes = new TextEncoder().encode("FAIL parse.nested\nexpected 3, got 4\n");
  const digest = sha256Hex(bytes);
  const intent = { sha256: digest, size: bytes.length, content_type: "text/plain" };

  it("takes an upload intent, stores the bytes once, and serves them back", async () => {
    const loop = await createLoop("artifacts", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;

    const first = await postJson(base, intent);
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ status: "upload", method: "PUT", url: `${base}/${digest}?name=${digest.slice(0, 12)}.bin` });

    const put = await call(`${base}/${digest}`, { method: "PUT", headers: { "content-type": "text/plain" }, body: bytes });
    expect(put.status).toBe(201);
    expect(await put.json()).toMatchObject({ status: "stored", artifact: { sha256: digest, size: bytes.length, content_type: "text/plain" } });

    const again = await postJson(base, intent);
    expect(await again.json()).toEqual({ status: "exists" });

    const got = await call(`${base}/${digest}`);
    expect(got.status).toBe(200);
    // Served as bytes to save (only explicit `text/plain; charset=utf-8` is shown inline; artifacts.test.ts).
    expect(got.headers.get("content-type")).toBe("application/octet-stream");
    expect(new Uint8Array(await got.arrayBuffer())).toEqual(bytes);
  });

  it("refuses bytes that do not hash to the declared sha256 with 400 digest_mismatch, and stores nothing", async () => {
    const loop = await createLoop("artifact-mismatch", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    const tampered = new TextEncoder().encode("FAIL parse.nested\nexpected 3, got 5\n");

    // The refusal is logged for the operator: captured here and checked, not printed.
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    const put = await call(`${base}/${digest}`, { method: "PUT", body: tampered });
    expect(put.status).toBe(400);
    expect(await errorOf(put)).toMatchObject({ code: "digest_mismatch" });
    expect(warn).toHaveBeenCalledWith("loopwarden: artifact upload refused", expect.anything());
    warn.mockRestore();

    const got = await call(`${base}/${digest}`);
    expect(got.status).toBe(404);
    expect(await errorOf(got)).toMatchObject({ code: "not_found" });
    expect(await (await postJson(base, intent)).json()).toMatchObject({ status: "upload" });
  });

  it("refuses a report citing a log that was never uploaded with 422 artifact_missing, appending nothing", async () => {
    const loop = await createLoop("evidence", [A, C]);
    const lease = await proposeAndLease(loop.loop_id, "evidence");
    const log = { sha256: digest, size: bytes.length, name: "unit.log", content_type: "text/plain" };
    const body = { fencing_token: lease.fencing_token, observation: observationOf([A], log) };
    const before = await logOf(loop.loop_id);

    const refused = await report(lease.lease_id, body);
    expect(refused.status).toBe(422);
    const error = await errorOf(refused);
    expect(error.code).toBe("artifact_missing");
    expect(error.message).toContain('"unit"');
    expect(await logOf(loop.loop_id)).toEqual(before);

    // Once the evidence is stored, the same report is accepted and the candidate links to it.
    const put = await call(`/v1/loops/${loop.loop_id}/artifacts/${digest}`, { method: "PUT", body: bytes });
    expect(put.status).toBe(201);
    const accepted = await report(lease.lease_id, body);
    expect(accepted.status).toBe(200);
    expect(await accepted.json()).toMatchObject({ verdict: { decision: "promoted" } });
    await drainOutbox(loop.loop_id);
    const row = await env.DB.prepare("SELECT status, log_digests FROM candidates WHERE loop_id = ?").bind(loop.loop_id).first();
    expect(row).toEqual({ status: "promoted", log_digests: JSON.stringify([digest]) });
  });
});
