import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { canonicalJson } from "../../shared/canonical-json.js";
import { sha256Hex } from "../../shared/hash.js";
import { Contract } from "../../shared/wire/contract.js";
import { EVENTS_PAGE_BYTES } from "../../worker/src/loop-object.js";
import { loopIdFor } from "../../worker/src/loops.js";
import { call, candidateBody, createLoop, createLoopBody, loopObject, observationOf, postJson, readLoopObject } from "./fixtures.js";

// DESIGN §4 invariant 9: no SQLite row grows with the loop. The state is the fold of the event rows, so
// a long loop keeps working; a single value over SQLite's row limit (2 MB) is refused as storage_limit
// (507, not retried) and leaves nothing behind.

/** `count` realistic test ids. */
const idsOf = (count: number) => Array.from({ length: count }, (_, index) => `tests/test_module_${index % 97}.py::TestClass::test_case_${index}[p]`);

/** A creation body whose t0 ran `ids`, the first failing. */
function baselineOf(key: string, ids: string[]) {
  const body = createLoopBody(key, [], { stop: { max_iterations: 100_000, no_progress: 100_000 } });
  body.t0.observation.tests = { passing: ids.slice(1), failing: ids.slice(0, 1) };
  body.t0.observation.gates[0] = { ...body.t0.observation.gates[0], exit_code: 1 } as (typeof body.t0.observation.gates)[0];
  return body;
}

/** The largest value stored in any of the loop's tables, in bytes. */
async function largestRow(loopId: string): Promise<number> {
  return runInDurableObject(loopObject(loopId), (_instance, state) => {
    const sql = state.storage.sql;
    const sizes = [
      sql.exec<{ n: number | null }>("SELECT MAX(LENGTH(body)) AS n FROM events").one().n,
      sql.exec<{ n: number | null }>("SELECT MAX(LENGTH(item)) AS n FROM outbox").one().n,
      sql.exec<{ n: number | null }>("SELECT MAX(LENGTH(value)) AS n FROM meta").one().n,
    ];
    return Math.max(...sizes.map((size) => size ?? 0));
  });
}

describe("state at scale", () => {
  it("a loop of a small suite keeps answering through 10,000 events, and its largest row stays small", async () => {
    const loop = await createLoop("long", ["parse.empty"], { stop: { max_iterations: 100_000, no_progress: 100_000 } });
    // Straight to the object's methods, as the routes call them: thousands of requests through HTTP
    // would measure the test harness, not the storage.
    const seq = await runInDurableObject(loopObject(loop.loop_id), async (instance) => {
      let head = loop.head.seq;
      for (let iteration = 1; head < 10_000; iteration++) {
        const proposal = candidateBody(`long-${iteration}`) as Parameters<typeof instance.propose>[0]["proposal"];
        const proposed = await instance.propose({ proposal, request_hash: sha256Hex(canonicalJson(proposal)) });
        if (!proposed.ok) throw new Error(`propose refused: ${proposed.code}`);
        const leased = await instance.lease({ runner_id: "runner-long" });
        if (!leased.ok || !leased.lease) throw new Error("no lease");
        const observation = observationOf(["parse.empty"]);
        const reported = await instance.report({
          lease_id: leased.lease.lease_id,
          fencing_token: leased.lease.fencing_token,
          observation,
          request_hash: sha256Hex(canonicalJson({ fencing_token: leased.lease.fencing_token, observation })),
        });
        if (!reported.ok) throw new Error(`report ${iteration} refused: ${reported.code} ${reported.message}`);
        head = reported.loop.head.seq;
      }
      return head;
    });
    expect(seq).toBeGreaterThanOrEqual(10_000);
    const summary = (await (await call(`/v1/loops/${loop.loop_id}`)).json()) as { status: string; head: { seq: number } };
    expect(summary).toMatchObject({ status: "running", head: { seq } });
    expect(await largestRow(loop.loop_id)).toBeLessThan(256 * 1024);
  }, 240_000);

  it("a suite of 15,000 tests — the body cap's size — is created and reported on (one row held it three times before)", async () => {
    const ids = idsOf(15_000);
    const body = baselineOf("wide", ids);
    expect(JSON.stringify(body).length).toBeLessThan(1024 * 1024);
    const created = await postJson("/v1/loops", body);
    expect(created.status).toBe(201);
    const loopId = loopIdFor(body.idempotency_key);
    for (let report = 1; report <= 5; report++) {
      await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(`wide-${report}`));
      const lease = (await (await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "runner-wide" })).json()) as { lease_id: string; fencing_token: number };
      const observation = { ...body.t0.observation, tests: { passing: ids.slice(1), failing: ids.slice(0, 1) } };
      expect((await postJson(`/v1/leases/${lease.lease_id}/report`, { fencing_token: lease.fencing_token, observation })).status).toBe(200);
    }
    // The events route pages by bytes too: these reports (~0.9 MB each) come in more than one page, each
    // bounded, and following `Loopwarden-More` reads the whole log.
    const seen: number[] = [];
    let after = 0;
    for (let page = 1; ; page++) {
      const response = await call(`/v1/loops/${loopId}/events?after=${after}&limit=1000`);
      const lines = (await response.text()).split("\n").filter(Boolean);
      expect(lines.join("\n").length).toBeLessThan(EVENTS_PAGE_BYTES + 1024 * 1024);
      seen.push(...lines.map((line) => (JSON.parse(line) as { seq: number }).seq));
      after = seen.at(-1) ?? after;
      if (response.headers.get("Loopwarden-More") !== "true") {
        expect(page).toBeGreaterThan(1);
        break;
      }
    }
    expect(seen).toEqual(Array.from({ length: seen.length }, (_, index) => index + 1));
    const summary = (await (await call(`/v1/loops/${loopId}`)).json()) as { head: { seq: number } };
    expect(seen.at(-1)).toBe(summary.head.seq);
  });

  it("a gzip-encoded body is taken up to 16 MiB decompressed: a 25,000-test baseline fits; a bomb, bad gzip or another encoding is refused", async () => {
    const body = baselineOf("gzipped", idsOf(25_000));
    const text = JSON.stringify(body);
    expect(text.length).toBeGreaterThan(1024 * 1024);
    const send = (bytes: BodyInit, encoding: string) =>
      call("/v1/loops", { method: "POST", headers: { "Content-Type": "application/json", "Content-Encoding": encoding }, body: bytes });
    const created = await send(await gzip(new TextEncoder().encode(text)), "gzip");
    expect(created.status).toBe(201);
    expect(((await created.json()) as { loop: { loop_id: string } }).loop.loop_id).toBe(loopIdFor(body.idempotency_key));

    const bomb = await send(await gzip(new Uint8Array(17 * 1024 * 1024)), "gzip");
    expect(bomb.status).toBe(413);
    expect(((await bomb.json()) as { error: { code: string } }).error.code).toBe("body_too_large");
    const broken = await send(new TextEncoder().encode("not gzip at all"), "gzip");
    expect(((await broken.json()) as { error: { code: string } }).error).toMatchObject({ code: "invalid_encoding" });
    expect(broken.status).toBe(400);
    expect((await send(JSON.stringify(createLoopBody("brotli", [])), "br")).status).toBe(415);
  });

  it("a value over the row limit is refused as storage_limit, and a creation refused so leaves nothing behind", async () => {
    // Past the HTTP body cap, so straight to the object: what a larger event would meet.
    const body = baselineOf("too-big", idsOf(40_000));
    const contract = Contract.parse(body.contract);
    const loopId = loopIdFor(body.idempotency_key);
    // The refusal is logged for the operator: captured here and checked, not printed.
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const answer = await runInDurableObject(loopObject(loopId), (instance) =>
      instance.create({ loop_id: loopId, request_hash: sha256Hex(canonicalJson(body)), contract, contract_hash: sha256Hex(canonicalJson(contract)), t0: body.t0 }),
    );
    expect(answer).toMatchObject({ ok: false, code: "storage_limit", message: expect.stringContaining("nothing was recorded") });
    expect(logged).toHaveBeenCalledWith("loopwarden: storage refused a value over its size limit", expect.stringContaining("SQLITE_TOOBIG"));
    logged.mockRestore();
    expect(await readLoopObject(loopId)).toMatchObject({ tables: [], events: 0, head: null });
    expect((await call(`/v1/loops/${loopId}`)).status).toBe(404);
  });
});

/** gzip-encodes bytes with the platform's CompressionStream. */
async function gzip(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
}
