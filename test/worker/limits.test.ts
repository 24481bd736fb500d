import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { canonicalJson } from "#shared/canonical-json.js";
import { compactTests, foldEvents, LoopEvent, testBaseOf, verifyChain, type EventDraft, type Verdict } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract } from "#shared/wire/contract.js";
import { LoopSummary } from "#shared/wire/api.js";
import type { FullTests, Observation } from "#shared/wire/observation.js";
import { MAX_JSON_BODY_BYTES, MAX_TEST_SET_BODY_BYTES } from "../../worker/src/app.js";
import { EVENTS_PAGE_BYTES, type LoopEventStore } from "../../worker/src/loop/loop-event-store.js";
import { LOOP_OBJECT_MIGRATIONS } from "../../worker/src/loop/loop-object-schema.js";
import { loopIdFor } from "../../worker/src/http/loop-access.js";
import { OWNER_TEAM } from "../../worker/src/http/auth.js";
import { MAX_DECOMPRESSED_BYTES } from "../../worker/src/http/validate.js";
import v1Events from "../fixtures/event-log/v1-demo.events.jsonl?raw";
import v1Summary from "../fixtures/event-log/v1-demo.summary.json?raw";
import { OWNER_CALLER, call, candidateBody, createLoop, createLoopBody, logOf, loopObject, observationOf, postJson, readLoopObject } from "./fixtures.js";

// DESIGN §4 invariant 9, §8: a loop keeps working at 100,000 tests and 10,000 events. t0's collected
// set travels once (gzip-encoded) and is stored once, in the first event; every report is a difference
// from it; an event longer than a row should hold is stored in parts; so no SQLite row grows with the
// suite or the loop.

const ROW_BUDGET = 256 * 1024;

/** `count` test ids shaped like a real pytest suite's. */
const idsOf = (count: number) =>
  Array.from({ length: count }, (_, index) => `tests/test_module_${index % 997}.py::TestClass${index % 13}::test_case_${index}[param${index % 3}]`);

const gate = (exitCode: number) => ({ name: "unit", exit_code: exitCode, signal: null, timed_out: false, duration_ms: 250, log: null });

/** Full test outcomes where `failing` fail and every other id of `ids` passes. */
function outcomes(ids: readonly string[], failing: readonly string[]): FullTests {
  const failed = new Set(failing);
  return { passing: ids.filter((id) => !failed.has(id)), failing: [...failing] };
}

/** A creation body whose t0 ran `ids`, the first `failing` of them failing. */
function baselineOf(key: string, ids: string[], failing = 1) {
  const body = createLoopBody(key, [], { stop: { max_iterations: 100_000, no_progress: 100_000 } });
  body.t0.observation = { gates: [gate(1)], tests: outcomes(ids, ids.slice(0, failing)) };
  return body;
}

/** The largest value stored in any of the loop's tables, in bytes (SQLite's LENGTH of a text counts characters: CAST to a blob counts bytes). */
async function largestRow(loopId: string): Promise<number> {
  return runInDurableObject(loopObject(loopId), (_instance, state) => {
    const sql = state.storage.sql;
    const largest = (query: string) => sql.exec<{ n: number | null }>(query).one().n ?? 0;
    return Math.max(
      largest("SELECT MAX(LENGTH(CAST(body AS BLOB))) AS n FROM events"),
      largest("SELECT MAX(LENGTH(CAST(body AS BLOB))) AS n FROM event_parts"),
      largest("SELECT MAX(LENGTH(CAST(item AS BLOB))) AS n FROM outbox"),
      largest("SELECT MAX(LENGTH(CAST(value AS BLOB))) AS n FROM meta"),
    );
  });
}

/** The whole event log through the events route, page by page as `Loopwarden-More` says; each page bounded. */
async function readLog(loopId: string): Promise<{ lines: string[]; pages: number }> {
  const lines: string[] = [];
  let after = 0;
  for (let pages = 1; ; pages++) {
    const response = await call(`/v1/loops/${loopId}/events?after=${after}&limit=1000`);
    expect(response.status).toBe(200);
    // Decoded by hand: workerd warns about `.text()` on an NDJSON body.
    const page = new TextDecoder()
      .decode(await response.arrayBuffer())
      .split("\n")
      .filter(Boolean);
    // A page ends past EVENTS_PAGE_BYTES only when its one event is longer than that.
    if (page.length > 1) expect(page.join("\n").length).toBeLessThan(EVENTS_PAGE_BYTES + 1024 * 1024);
    lines.push(...page);
    after = (JSON.parse(page.at(-1) ?? "{}") as { seq?: number }).seq ?? after;
    if (response.headers.get("Loopwarden-More") !== "true") return { lines, pages };
  }
}

/** gzip-encodes bytes with the platform's CompressionStream. */
async function gzip(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
}

const sendGzip = async (path: string, body: unknown) =>
  call(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Content-Encoding": "gzip" },
    body: await gzip(new TextEncoder().encode(JSON.stringify(body))),
  });

describe("state at scale", () => {
  it("a loop of a 100,000-test suite takes 50 reports, each a few KB, and keeps every row under 256 KB", async () => {
    const ids = idsOf(100_000);
    const body = baselineOf("wide", ids, 60);
    // t0's collected set is sent once, gzip-encoded: several MB as JSON, well under the route's cap sent.
    const t0Text = JSON.stringify(body);
    expect(t0Text.length).toBeGreaterThan(MAX_TEST_SET_BODY_BYTES);
    expect((await gzip(new TextEncoder().encode(t0Text))).length).toBeLessThan(MAX_JSON_BODY_BYTES);
    const created = await sendGzip("/v1/loops", body);
    expect(created.status).toBe(201);
    const loopId = loopIdFor(body.idempotency_key, OWNER_TEAM);
    const base = testBaseOf(body.t0.observation.tests);

    const reportSizes: number[] = [];
    for (let report = 1; report <= 50; report++) {
      expect((await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(`wide-${report}`))).status).toBe(201);
      const lease = (await (await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "runner-wide" })).json()) as { lease_id: string; fencing_token: number };
      // Each candidate fixes one more of t0's failing tests.
      const tests = compactTests(outcomes(ids, ids.slice(report, 60)), base);
      const request = { fencing_token: lease.fencing_token, observation: { gates: [gate(1)], tests } };
      reportSizes.push(JSON.stringify(request).length);
      const answer = await postJson(`/v1/leases/${lease.lease_id}/report`, request);
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as { verdict: Verdict }).verdict).toMatchObject({ decision: "promoted", reason: "fewer_failures" });
    }
    expect(Math.max(...reportSizes)).toBeLessThan(16 * 1024);

    // The worst case: a candidate that breaks the whole suite. Its difference is the suite itself, sent
    // gzip-encoded and stored in parts; it is judged like any other.
    await postJson(`/v1/loops/${loopId}/candidates`, candidateBody("wide-broken"));
    const lease = (await (await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "runner-wide" })).json()) as { lease_id: string; fencing_token: number };
    const broken = await sendGzip(`/v1/leases/${lease.lease_id}/report`, {
      fencing_token: lease.fencing_token,
      observation: { gates: [gate(1)], tests: compactTests({ passing: [], failing: ids }, base) } satisfies Observation,
    });
    expect(broken.status).toBe(200);
    const verdict = ((await broken.json()) as { verdict: Verdict }).verdict;
    expect(verdict).toMatchObject({ decision: "rejected", reason: "regressed", failing_before: 11, failing_after: 100_001 });
    expect(verdict.regressed).toHaveLength(100_000 - 10);

    expect(await largestRow(loopId)).toBeLessThan(ROW_BUDGET);
    // The log as anyone reads it: the chain verifies, and it folds to the coordinator's own summary.
    const { lines } = await readLog(loopId);
    const events = lines.map((line) => LoopEvent.parse(JSON.parse(line)));
    const summary = LoopSummary.parse(await (await call(`/v1/loops/${loopId}`)).json());
    expect(verifyChain(events)).toEqual({ ok: true, head: summary.head });
    const state = foldEvents(events);
    expect(state?.best).toMatchObject({ candidate_id: "c50", passing_count: 100_000 - 10 });
    expect(summary).toMatchObject({ iteration: 51, best: { candidate_id: "c50", failing: 11 } });
  }, 120_000);

  it("a 100,000-test t0 measured on a baseline lease is taken gzip-encoded, as a creation's is, and the loop created from it", async () => {
    const ids = idsOf(100_000);
    const { t0, ...body } = baselineOf("wide-leased", ids, 60);
    const request = { ...body, contract: { ...body.contract, evaluate: { labels: { gpu: "h100" } } }, t0_commit: t0.commit };
    const pending = await postJson("/v1/loops", request);
    expect(pending.status).toBe(202);
    const loopId = loopIdFor(body.idempotency_key, OWNER_TEAM);
    const lease = (await (await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box", labels: { gpu: "h100" } })).json()) as {
      lease_id: string;
      fencing_token: number;
    };
    const report = { fencing_token: lease.fencing_token, observation: t0.observation };
    expect(JSON.stringify(report).length).toBeGreaterThan(MAX_TEST_SET_BODY_BYTES);
    const created = await sendGzip(`/v1/leases/${lease.lease_id}/baseline`, report);
    expect(created.status, await created.clone().text()).toBe(201);
    expect(((await created.json()) as { loop: { t0: { failing: number } } }).loop.t0.failing).toBe(61);
    expect(await largestRow(loopId)).toBeLessThan(256 * 1024);
  }, 120_000);

  it("a loop of a small suite keeps answering through 10,000 events, and its largest row stays small", async () => {
    const loop = await createLoop("long", ["parse.empty"], { stop: { max_iterations: 100_000, no_progress: 100_000 } });
    // Straight to the object's methods, as the routes call them: thousands of requests through HTTP
    // would measure the test harness, not the storage.
    const seq = await runInDurableObject(loopObject(loop.loop_id), async (instance) => {
      let head = loop.head.seq;
      for (let iteration = 1; head < 10_000; iteration++) {
        const proposal = candidateBody(`long-${iteration}`) as Parameters<typeof instance.propose>[0]["proposal"];
        const proposed = await instance.propose({ caller: OWNER_CALLER, proposal, request_hash: sha256Hex(canonicalJson(proposal)) });
        if (!proposed.ok) throw new Error(`propose refused: ${proposed.code}`);
        const leased = await instance.lease({ caller: OWNER_CALLER, runner_id: "runner-long", labels: {}, wait_ms: 0 });
        if (!leased.ok || !leased.lease) throw new Error("no lease");
        const observation = observationOf(["parse.empty"]);
        const reported = await instance.report({
          caller: OWNER_CALLER,
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
    expect(await largestRow(loop.loop_id)).toBeLessThan(ROW_BUDGET);
    // 10,000 events come in pages (1,000 rows at most each), and following `Loopwarden-More` reads them all.
    const { lines, pages } = await readLog(loop.loop_id);
    expect(pages).toBeGreaterThan(1);
    expect(lines.map((line) => (JSON.parse(line) as { seq: number }).seq)).toEqual(Array.from({ length: seq }, (_, index) => index + 1));
  }, 240_000);

  it("a gzip-encoded body is taken up to 32 MiB decompressed; a bomb, bad gzip or another encoding is refused", async () => {
    const send = (bytes: BodyInit, encoding: string) =>
      call("/v1/loops", { method: "POST", headers: { "Content-Type": "application/json", "Content-Encoding": encoding }, body: bytes });
    const bomb = await send(await gzip(new Uint8Array(MAX_DECOMPRESSED_BYTES + 1024)), "gzip");
    expect(bomb.status).toBe(413);
    expect(((await bomb.json()) as { error: { code: string } }).error.code).toBe("body_too_large");
    const broken = await send(new TextEncoder().encode("not gzip at all"), "gzip");
    expect(((await broken.json()) as { error: { code: string } }).error).toMatchObject({ code: "invalid_encoding" });
    expect(broken.status).toBe(400);
    expect((await send(JSON.stringify(createLoopBody("brotli", [])), "br")).status).toBe(415);
  });

  it("every other route's cap holds decompressed too: a small gzip body that inflates past 1 MiB is refused before it is parsed", async () => {
    const loop = await createLoop("inflate", ["parse.empty"]);
    const inflated = await gzip(new Uint8Array(MAX_JSON_BODY_BYTES + 1024).fill(0x20));
    expect(inflated.length).toBeLessThan(16 * 1024);
    const before = await logOf(loop.loop_id);
    for (const path of [`/v1/loops/${loop.loop_id}/candidates`, `/v1/loops/${loop.loop_id}/leases`, "/v1/teams"]) {
      const response = await call(path, { method: "POST", headers: { "Content-Type": "application/json", "Content-Encoding": "gzip" }, body: inflated });
      expect(response.status, path).toBe(413);
      expect(((await response.json()) as { error: { message: string } }).error.message).toContain(`at most ${MAX_JSON_BODY_BYTES} bytes once decompressed`);
    }
    expect(await logOf(loop.loop_id)).toEqual(before);
    // The test-set routes still take what a 100,000-test suite needs: past 1 MiB decompressed, the body is parsed (and here, refused as JSON).
    const creation = await call("/v1/loops", { method: "POST", headers: { "Content-Type": "application/json", "Content-Encoding": "gzip" }, body: inflated });
    expect(creation.status).toBe(400);
  });

  it("a value over SQLite's row limit is answered storage_limit, and a creation refused so leaves nothing behind", async () => {
    // Events are stored in parts, so no request reaches the limit today; the answer stays for what
    // could (a value a later version stores whole). A 3 MB row written in the creation's transaction
    // meets it for real.
    const body = baselineOf("too-big", idsOf(10));
    const contract = Contract.parse(body.contract);
    const loopId = loopIdFor(body.idempotency_key, OWNER_TEAM);
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const answer = await runInDurableObject(loopObject(loopId), (instance, state) => {
      // The object's event store, as `create` uses it (private to the object).
      const object = (instance as unknown as { store: LoopEventStore }).store;
      const created: EventDraft = {
        type: "loop_created",
        at: new Date().toISOString(),
        data: { loop_id: loopId, contract, contract_hash: sha256Hex(canonicalJson(contract)), t0: body.t0 },
      };
      return object.tryAppend([created], () => {
        object.applyMigrations();
        state.storage.sql.exec("INSERT INTO meta (key, value) VALUES ('oversized', ?)", "x".repeat(3 * 1024 * 1024));
      });
    });
    expect(answer).toMatchObject({ ok: false, code: "storage_limit", message: expect.stringContaining("nothing was recorded") });
    expect(logged).toHaveBeenCalledWith("loopwarden: storage refused a value over its size limit", expect.stringContaining("SQLITE_TOOBIG"));
    logged.mockRestore();
    expect(await readLoopObject(loopId)).toMatchObject({ tables: [], events: 0, head: null });
    expect((await call(`/v1/loops/${loopId}`)).status).toBe(404);
  });

  it("an append refused in its transaction leaves the state as the stored events fold, though the state is folded in place", async () => {
    const loop = await createLoop("refused-append", ["parse.empty"]);
    expect((await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("kept"))).status).toBe(201);
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const answer = await runInDurableObject(loopObject(loop.loop_id), (instance, state) => {
      const object = (instance as unknown as { store: LoopEventStore }).store;
      const before = object.state;
      const proposed: EventDraft = {
        type: "candidate_proposed",
        at: new Date().toISOString(),
        data: { ...candidateBody("refused"), candidate_id: "c2", parent: "t0", idempotency_key: "refused-key", request_hash: "0".repeat(64) },
      } as EventDraft;
      const refused = object.tryAppend([proposed], () =>
        state.storage.sql.exec("INSERT INTO meta (key, value) VALUES ('oversized', ?)", "x".repeat(3 * 1024 * 1024)),
      );
      return { refused, candidates: Object.keys(object.state?.candidates ?? {}), head: object.head?.seq, stillTheSameObject: object.state === before };
    });
    logged.mockRestore();
    expect(answer.refused).toMatchObject({ ok: false, code: "storage_limit" });
    // c2 was folded into the state in memory inside the transaction; the refusal folded the log again without it.
    expect(answer.candidates).toEqual(["c1"]);
    expect(answer.head).toBe((await logOf(loop.loop_id)).head?.seq);
    expect(answer.stillTheSameObject).toBe(false);
    expect(await (await call(`/v1/loops/${loop.loop_id}`)).json()).toMatchObject({ head: { seq: answer.head } });
  });

  it("an object stored by the previous schema and event format migrates when it wakes and answers the same loop", async () => {
    const summary = LoopSummary.parse(JSON.parse(v1Summary));
    const events = v1Events.trim().split("\n");
    const loopId = summary.loop_id;
    const answer = await runInDurableObject(loopObject(loopId), async (instance, state) => {
      const sql = state.storage.sql;
      // The object as schema version 2 left it: the events table without parts.
      sql.exec("CREATE TABLE _schema (version INTEGER NOT NULL)");
      for (const [index, migration] of LOOP_OBJECT_MIGRATIONS.slice(0, 2).entries()) {
        sql.exec(migration);
        sql.exec("INSERT INTO _schema (version) VALUES (?)", index + 1);
      }
      for (const line of events) {
        const event = JSON.parse(line) as { seq: number; type: string; at: string; hash: string };
        sql.exec("INSERT INTO events (seq, type, at, body, hash) VALUES (?, ?, ?, ?, ?)", event.seq, event.type, event.at, line, event.hash);
      }
      // What the constructor does when the object wakes.
      const object = (instance as unknown as { store: LoopEventStore }).store;
      object.migrate();
      object.load();
      const version = sql.exec<{ version: number }>("SELECT MAX(version) AS version FROM _schema").one().version;
      return { version, loop: await instance.get(OWNER_CALLER) };
    });
    expect(answer.version).toBe(LOOP_OBJECT_MIGRATIONS.length);
    expect(answer.loop).toEqual({ ok: true, loop: summary });
    const served = await readLog(loopId);
    expect(served.lines).toEqual(events);
  });
});
