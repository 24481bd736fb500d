import { describe, expect, it } from "vitest";
import { call, commitOf, createLoop, createLoopBody, logOf, ndjson, observationOf, parseJsonl, postJson } from "./fixtures.js";

// `POST /v1/loops/:id/rechecks` (DESIGN §6.5): a runner re-runs the best's gates — on resume, before the
// next agent run, or every determinism.recheck_every iterations — and the coordinator judges the run
// against the outcome it recorded for that best. A refused request appends nothing.

async function json<T>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  return JSON.parse(text) as T;
}

const MEASURED = { status: "measured", tree: "a".repeat(40), runs: 3, deviations: [], rerun: { changed: [], count: 0 }, duration_ms: 1_000 } as const;

function recheckBody(key: string, failing: readonly string[], overrides: Record<string, unknown> = {}) {
  return {
    idempotency_key: `recheck-${key}`,
    candidate_id: "t0",
    commit: commitOf(`t0-${key}`),
    purpose: "resume",
    runner_id: "runner-a",
    observation: observationOf(failing),
    ...overrides,
  };
}

async function createMonitoredLoop(key: string): Promise<string> {
  const created = await postJson("/v1/loops", { ...createLoopBody(key, ["parse.empty"]), doctor: MEASURED });
  return (await json<{ loop: { loop_id: string } }>(created, 201)).loop.loop_id;
}

describe("rechecks of the best over the API", () => {
  it("records a recheck that reproduces the best's outcome, and answers a retry as the first", async () => {
    const loopId = await createMonitoredLoop("recheck-same");
    const body = recheckBody("recheck-same", ["parse.empty"]);
    const first = await json<{ changed: string[]; replayed: boolean; loop: { status: string } }>(await postJson(`/v1/loops/${loopId}/rechecks`, body), 201);
    expect(first).toMatchObject({ changed: [], replayed: false, loop: { status: "running" } });
    const log = await logOf(loopId);
    expect(await json<{ replayed: boolean }>(await postJson(`/v1/loops/${loopId}/rechecks`, body), 200)).toMatchObject({ replayed: true });
    expect(await logOf(loopId)).toEqual(log);
    const events = parseJsonl(await ndjson(await call(`/v1/loops/${loopId}/events`)));
    expect(events.map((event) => event.type)).toEqual(["loop_created", "recheck_reported"]);
    expect(events[0]).toMatchObject({ data: { doctor: { status: "measured", runs: 3 } } });
  });

  it("halts check_flaky on resume when the best's gates no longer give its recorded outcome, naming the test, and signs the receipt", async () => {
    const loopId = await createMonitoredLoop("recheck-drift");
    const answer = await json<{
      changed: string[];
      loop: { status: string; halt: { halt_reason: string; exit_class: number; detail: string }; receipt_id?: string };
    }>(await postJson(`/v1/loops/${loopId}/rechecks`, recheckBody("recheck-drift", ["parse.empty", "parse.nested"])), 201);
    expect(answer.changed).toEqual(["parse.nested"]);
    // A retry (the answer was lost) is told what the recheck changed, not that nothing did.
    const retried = await json<{ changed: string[]; changed_count: number; replayed: boolean }>(
      await postJson(`/v1/loops/${loopId}/rechecks`, recheckBody("recheck-drift", ["parse.empty", "parse.nested"])),
      200,
    );
    expect(retried).toMatchObject({ changed: ["parse.nested"], changed_count: 1, replayed: true });
    expect(answer.loop).toMatchObject({ status: "halted", halt: { halt_reason: "check_flaky", exit_class: 14 } });
    expect(answer.loop.halt.detail).toContain("parse.nested");
    expect(answer.loop.halt.detail).toContain("on resume");
    const events = parseJsonl(await ndjson(await call(`/v1/loops/${loopId}/events`))).map((event) => event.type);
    expect(events).toEqual(["loop_created", "recheck_reported", "halted", "receipt_issued"]);
  });

  it("refuses a recheck of what is not a best, of another commit, with a reused key or a malformed body, and appends nothing", async () => {
    const loopId = await createMonitoredLoop("recheck-refused");
    await json(await postJson(`/v1/loops/${loopId}/rechecks`, recheckBody("recheck-refused", ["parse.empty"])), 201);
    const log = await logOf(loopId);
    const refusals: [Record<string, unknown>, number, string][] = [
      [recheckBody("recheck-refused", ["parse.empty"], { idempotency_key: "recheck-other-1", candidate_id: "c9" }), 422, "not_a_best"],
      [recheckBody("recheck-refused", ["parse.empty"], { idempotency_key: "recheck-other-2", commit: commitOf("elsewhere") }), 422, "invalid_observation"],
      [recheckBody("recheck-refused", []), 422, "idempotency_conflict"],
      [recheckBody("recheck-refused", ["parse.empty"], { idempotency_key: "recheck-other-3", purpose: "whenever" }), 400, "invalid_request"],
    ];
    for (const [body, status, code] of refusals) {
      const refused = await json<{ error: { code: string } }>(await postJson(`/v1/loops/${loopId}/rechecks`, body), status);
      expect(refused.error.code).toBe(code);
    }
    expect(await logOf(loopId)).toEqual(log);
  });

  it("refuses a precondition record that does not fit the contract, creating nothing", async () => {
    const body = { ...createLoopBody("doctor-misfit", ["parse.empty"], { doctor: { mutate: "node scripts/break.js" } }), doctor: MEASURED };
    const refused = await json<{ error: { code: string; message: string } }>(await postJson("/v1/loops", body), 422);
    expect(refused.error.message).toContain("doctor.mutate");
    // Nothing was created: the same key with a fitting record creates the loop.
    const fitted = { ...body, doctor: { status: "skipped" } };
    expect((await postJson("/v1/loops", fitted)).status).toBe(201);
  });

  it("halts a loop at creation when its precondition shows the check flaky", async () => {
    const loop = await json<{ loop: { status: string; halt: { halt_reason: string; detail: string } } }>(
      await postJson("/v1/loops", {
        ...createLoopBody("doctor-flaky", ["parse.empty"]),
        doctor: { ...MEASURED, deviations: [{ run: 3, tests: ["parse.unicode"], count: 1 }] },
      }),
      201,
    );
    expect(loop.loop).toMatchObject({ status: "halted", halt: { halt_reason: "check_flaky" } });
    expect(loop.loop.halt.detail).toContain("parse.unicode");
    const untouched = await createLoop("doctor-legacy", ["parse.empty"]);
    expect(untouched.status).toBe("running");
  });
});
