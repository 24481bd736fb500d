import { describe, expect, it } from "vitest";
import { loopIdFor } from "../../worker/src/loops.js";
import { call, createLoopBody, postJson, readLoopObject } from "./fixtures.js";

// A loop whose state no longer fits the Durable Object's row limit (2 MB) answers what happened — a
// storage_limit refusal (507) — rather than a generic 500 the runner would retry for a minute; and a
// creation that fails that way leaves nothing behind, not an object with tables but no loop.

/** A t0 observation of `count` passing tests with realistic ids, all passing but one. */
function bigBaseline(key: string, count: number) {
  const body = createLoopBody(key, []);
  const ids = Array.from({ length: count }, (_, index) => `tests/test_module_${index % 97}.py::TestClass::test_case_${index}[p]`);
  body.t0.observation.tests = { passing: ids.slice(1), failing: ids.slice(0, 1) };
  body.t0.observation.gates[0] = { ...body.t0.observation.gates[0], exit_code: 1 } as (typeof body.t0.observation.gates)[0];
  return body;
}

describe("storage limits", () => {
  it("a creation the storage cannot hold is refused with storage_limit (507), and leaves nothing behind", async () => {
    const body = bigBaseline("too-big", 15_000);
    expect(JSON.stringify(body).length).toBeLessThan(1024 * 1024);
    const refused = await postJson("/v1/loops", body);
    expect(refused.status).toBe(507);
    expect(((await refused.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: "storage_limit",
      message: expect.stringContaining("nothing was recorded"),
    });
    const loopId = loopIdFor(body.idempotency_key);
    expect((await call(`/v1/loops/${loopId}`)).status).toBe(404);
    expect(await readLoopObject(loopId)).toMatchObject({ tables: [], events: 0, head: null });

    // The key is not half-used: a creation that fits succeeds under it.
    const fits = { ...createLoopBody("too-big", ["parse.empty"]), idempotency_key: body.idempotency_key };
    expect((await postJson("/v1/loops", fits)).status).toBe(201);
  });
});
