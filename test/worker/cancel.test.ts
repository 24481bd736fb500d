import { describe, expect, it } from "vitest";
import { call, createLoop, drainOutbox, logOf, ndjson, parseJsonl, postJson } from "./fixtures.js";

// `POST /v1/loops/:id/cancel` (DESIGN §7, §8): a person stops a running loop. The request and the halt
// are appended together, the final receipt is signed as at any halt, and the D1 row says halted.

async function json<T>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  return JSON.parse(text) as T;
}

describe("cancelling a loop over the API", () => {
  it("halts a running loop with cancelled, signs its receipt, and answers a retry as the first", async () => {
    const loop = await createLoop("cancel-me", ["parse.empty"]);
    const first = await json<{
      loop: { status: string; halt: { halt_reason: string; exit_class: number; detail: string }; receipt_id?: string };
      replayed: boolean;
    }>(await postJson(`/v1/loops/${loop.loop_id}/cancel`, { reason: "wrong branch" }), 201);
    expect(first).toMatchObject({
      replayed: false,
      loop: { status: "halted", halt: { halt_reason: "cancelled", exit_class: 11, detail: "cancelled by owner: wrong branch" } },
    });
    expect(first.loop.receipt_id).toMatch(/^rc_/);
    const events = parseJsonl(await ndjson(await call(`/v1/loops/${loop.loop_id}/events`))).map((event) => event.type);
    expect(events).toEqual(["loop_created", "cancel_requested", "halted", "receipt_issued"]);
    expect((await call(`/r/${first.loop.receipt_id ?? ""}.json`)).status).toBe(200);

    const log = await logOf(loop.loop_id);
    const again = await json<{ replayed: boolean }>(await postJson(`/v1/loops/${loop.loop_id}/cancel`, {}), 200);
    expect(again.replayed).toBe(true);
    expect(await logOf(loop.loop_id)).toEqual(log);
    await drainOutbox(loop.loop_id);
    const listed = await json<{ loops: { loop_id: string; status: string; halt_reason: string | null }[] }>(await call("/v1/loops?status=halted"), 200);
    expect(listed.loops.find((row) => row.loop_id === loop.loop_id)).toMatchObject({ status: "halted", halt_reason: "cancelled" });
  });

  it("leaves a loop halted for another reason as it was (409), and refuses a malformed reason (400), changing nothing", async () => {
    const converged = await createLoop("cancel-converged", []);
    expect(converged.halt?.halt_reason).toBe("success_condition_met");
    const log = await logOf(converged.loop_id);
    const refused = await postJson(`/v1/loops/${converged.loop_id}/cancel`, {});
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("loop_halted");
    const running = await createLoop("cancel-malformed", ["parse.empty"]);
    const runningLog = await logOf(running.loop_id);
    expect((await postJson(`/v1/loops/${running.loop_id}/cancel`, { reason: "x".repeat(501) })).status).toBe(400);
    expect((await postJson(`/v1/loops/${running.loop_id}/cancel`, { by: "someone else" })).status).toBe(400);
    expect(await logOf(converged.loop_id)).toEqual(log);
    expect(await logOf(running.loop_id)).toEqual(runningLog);
  });
});
