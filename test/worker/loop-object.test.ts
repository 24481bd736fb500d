import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { canonicalJson } from "#shared/canonical-json.js";
import {
  applyEvent,
  createLoop as createLoopEvents,
  grantLease,
  proposeCandidate,
  reportObservation,
  sealEvent,
  verifyChain,
  type ChainHead,
  type EventDraft,
  type LoopEvent,
  type LoopState,
  type Outcome,
} from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract } from "#shared/wire/contract.js";
import { latestRows, outboxItemsFor, writeProjection, type OutboxItem } from "../../worker/src/db/projection.js";
import { DRAIN_DELAY_MS } from "../../worker/src/loop/loop-receipts.js";
import { LEASE_TTL_MS } from "../../worker/src/loop/lease-ttl.js";
import { loopIdFor } from "../../worker/src/http/loop-access.js";
import { OWNER_TEAM } from "../../worker/src/http/auth.js";
import {
  TEST_IDS,
  candidateBody,
  createLoop,
  createLoopBody,
  drainOutbox,
  logOf,
  loopObject,
  observationOf,
  postJson,
  projectionRows,
  proposeAndLease,
  OWNER_CALLER,
} from "./fixtures.js";

const [A, B] = TEST_IDS;

/** The arguments the POST /v1/loops route passes to `LoopObject.create`. */
function createInput(key: string, t0Failing: string[]) {
  const body = createLoopBody(key, t0Failing);
  const contract = Contract.parse(body.contract);
  return {
    team_id: OWNER_TEAM,
    loop_id: loopIdFor(body.idempotency_key, OWNER_TEAM),
    request_hash: sha256Hex(canonicalJson(body)),
    contract,
    contract_hash: sha256Hex(canonicalJson(contract)),
    t0: body.t0,
  };
}

/** The arguments the candidates route passes to `LoopObject.propose`. */
function proposeInput(key: string) {
  const proposal = candidateBody(key) as Parameters<typeof proposeCandidate>[1];
  return { caller: OWNER_CALLER, proposal, request_hash: sha256Hex(canonicalJson(proposal)) };
}

/** Reads the object's own tables synchronously, as one consistent picture. */
function storedIn(sql: SqlStorage) {
  const events = sql.exec<{ seq: number; body: string; hash: string }>("SELECT seq, body, hash FROM events ORDER BY seq").toArray();
  const outbox = sql
    .exec<{ item: string }>("SELECT item FROM outbox ORDER BY id")
    .toArray()
    .map((row) => JSON.parse(row.item) as OutboxItem);
  const tables = sql
    .exec<{ name: string }>(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf%' ESCAPE '\\' AND name NOT LIKE 'sqlite%' ORDER BY name",
    )
    .toArray()
    .map((row) => row.name);
  return { events, outbox, tables };
}

const POSTPONED = 3_600_000;

describe("LoopObject storage", () => {
  it("writes each decision's events and outbox rows together (no row holds the whole state), and the alarm drains the outbox into D1", async () => {
    const input = createInput("together", [A, B]);
    const stub = loopObject(input.loop_id);

    const afterCreate = await runInDurableObject(stub, async (instance, state) => {
      const created = await instance.create(input);
      const stored = storedIn(state.storage.sql);
      // Keep the alarm from draining on its own while the test looks at the outbox.
      await state.storage.setAlarm(Date.now() + POSTPONED);
      return { created, stored };
    });
    expect(afterCreate.created).toMatchObject({ ok: true, created: true });
    const { events, outbox, tables } = afterCreate.stored;
    expect(events.map((event) => event.seq)).toEqual([1]);
    // The state is the fold of the event rows: there is no snapshot row to outgrow SQLite's row limit
    // (and an event too long for one row is kept in parts).
    expect(tables).toEqual(["_schema", "event_parts", "events", "meta", "outbox"]);
    expect(afterCreate.created).toMatchObject({ loop: { loop_id: input.loop_id, head: { seq: 1, hash: events[0]?.hash } } });
    expect(outbox.map((item) => item.kind)).toEqual(["event", "loop"]);
    expect(outbox[1]).toMatchObject({ kind: "loop", row: { id: input.loop_id, headSeq: 1, headHash: events[0]?.hash, status: "running" } });
    // Each row's body is its event's canonical JSON, hash included (what GET …/events serves), written once with the hash.
    for (const event of events) expect(event.body).toBe(canonicalJson(JSON.parse(event.body)));
    expect(verifyChain(events.map((event) => JSON.parse(event.body) as Record<string, unknown>))).toMatchObject({ ok: true, head: { seq: 1 } });

    const afterPropose = await runInDurableObject(stub, async (instance, state) => {
      const proposed = await instance.propose(proposeInput("together"));
      const stored = storedIn(state.storage.sql);
      await state.storage.setAlarm(Date.now() + POSTPONED);
      return { proposed, stored };
    });
    expect(afterPropose.proposed).toMatchObject({ ok: true, candidate: { candidate_id: "c1", status: "queued" } });
    const second = afterPropose.stored;
    expect(second.events.map((event) => event.seq)).toEqual([1, 2]);
    expect(afterPropose.proposed).toMatchObject({ loop: { head: { seq: 2, hash: second.events[1]?.hash } } });
    expect(second.outbox.map((item) => item.kind)).toEqual(["event", "loop", "event", "candidate", "loop"]);
    // The stored bodies are the exact bytes that were hashed: they chain to the loop's head.
    expect(verifyChain(second.events.map((event) => JSON.parse(event.body) as Record<string, unknown>))).toEqual({
      ok: true,
      head: { seq: 2, hash: second.events[1]?.hash },
    });

    // Nothing reached D1 yet: the projection is written only by the alarm.
    expect(await projectionRows(input.loop_id)).toEqual({ loops: 0, candidates: 0, events: 0 });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await projectionRows(input.loop_id)).toEqual({ loops: 1, candidates: 1, events: 2 });
    const row = await env.DB.prepare("SELECT status, iteration, head_seq, head_hash, best_candidate_id FROM loops WHERE id = ?").bind(input.loop_id).first();
    expect(row).toEqual({ status: "running", iteration: 0, head_seq: 2, head_hash: second.events[1]?.hash, best_candidate_id: "t0" });
    const drained = await runInDurableObject(stub, async (_instance, state) => ({
      outbox: storedIn(state.storage.sql).outbox.length,
      alarm: await state.storage.getAlarm(),
    }));
    // Nothing left to drain and no lease out: the alarm does not re-arm.
    expect(drained).toEqual({ outbox: 0, alarm: null });
  });

  it("drains a new loop's row at once, and the rows of later appends together within DRAIN_DELAY_MS (issue 30)", async () => {
    const input = createInput("batched", [A, B]);
    const stub = loopObject(input.loop_id);
    const created = await runInDurableObject(stub, async (instance, state) => {
      await instance.create(input);
      return { alarm: await state.storage.getAlarm(), now: Date.now() };
    });
    // How the loop is listed (what TEAM_MAX_LOOPS counts) changed: due now.
    expect(created.alarm).not.toBeNull();
    expect(created.alarm ?? Number.POSITIVE_INFINITY).toBeLessThanOrEqual(created.now);
    await drainOutbox(input.loop_id);

    const proposed = await runInDurableObject(stub, async (instance, state) => {
      const before = Date.now();
      const answer = await instance.propose(proposeInput("batched"));
      return { answer, before, alarm: await state.storage.getAlarm(), after: Date.now() };
    });
    expect(proposed.answer).toMatchObject({ ok: true, candidate: { candidate_id: "c1" } });
    expect(proposed.alarm).toBeGreaterThanOrEqual(proposed.before + DRAIN_DELAY_MS);
    expect(proposed.alarm).toBeLessThanOrEqual(proposed.after + DRAIN_DELAY_MS);
    // A later append does not put the drain off: its rows go in the same batch.
    const leased = await runInDurableObject(stub, async (instance, state) => {
      const answer = await instance.lease({ caller: OWNER_CALLER, runner_id: "laptop", labels: {}, wait_ms: 0 });
      return { answer, alarm: await state.storage.getAlarm() };
    });
    expect(leased.answer).toMatchObject({ ok: true, lease: { job: { candidate_id: "c1" } } });
    expect(leased.alarm).toBe(proposed.alarm);
    expect(await projectionRows(input.loop_id)).toEqual({ loops: 1, candidates: 0, events: 1 });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await projectionRows(input.loop_id)).toEqual({ loops: 1, candidates: 1, events: 3 });
    const row = await env.DB.prepare("SELECT status, head_seq, runners FROM loops WHERE id = ?").bind(input.loop_id).first();
    expect(row).toEqual({ status: "running", head_seq: 3, runners: 1 });
  });

  it("stores nothing of a decision whose transaction fails part-way, and carries on from the same head", async () => {
    const input = createInput("atomic", [A]);
    const stub = loopObject(input.loop_id);
    const outcome = await runInDurableObject(stub, async (instance, state) => {
      await instance.create(input);
      const before = storedIn(state.storage.sql);
      // Fault injection: the outbox insert, the last write of the transaction, fails.
      state.storage.sql.exec("DROP TABLE outbox");
      const failure = await instance.propose(proposeInput("atomic")).then(
        () => null,
        (error: unknown) => String(error),
      );
      const events = state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM events").one().n;
      const lastSeq = state.storage.sql.exec<{ seq: number }>("SELECT MAX(seq) AS seq FROM events").one().seq;
      const summary = await instance.get(OWNER_CALLER);
      state.storage.sql.exec("CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL)");
      const retried = await instance.propose(proposeInput("atomic"));
      const after = storedIn(state.storage.sql);
      return { before, failure, events, lastSeq, summary, retried, after };
    });
    expect(outcome.failure).toContain("outbox");
    expect(outcome.events).toBe(outcome.before.events.length);
    expect(outcome.lastSeq).toBe(outcome.before.events.at(-1)?.seq);
    expect(outcome.summary).toMatchObject({ ok: true, loop: { head: { seq: 1, hash: outcome.before.events[0]?.hash } } });
    // Memory did not run ahead of storage: the retry is the first candidate, not a replay or a c2.
    expect(outcome.retried).toMatchObject({ ok: true, replayed: false, candidate: { candidate_id: "c1" } });
    expect(verifyChain(outcome.after.events.map((event) => JSON.parse(event.body) as Record<string, unknown>))).toMatchObject({
      ok: true,
      head: { seq: 2 },
    });
  });
});

/** Plays creation → proposal → lease → report through the engine, collecting each append's outbox items. */
function projectionBatches(loopId: string): { batches: OutboxItem[][]; state: LoopState } {
  let state: LoopState | null = null;
  let head: ChainHead | null = null;
  const batches: OutboxItem[][] = [];
  const at = (second: number) => new Date(Date.UTC(2026, 2, 1, 9, 0, second)).toISOString();
  const append = (outcome: Outcome<unknown>) => {
    if (!outcome.ok) throw new Error(outcome.error.message);
    const sealed: LoopEvent[] = [];
    for (const draft of outcome.events as EventDraft[]) {
      const event = sealEvent(draft, head);
      head = { seq: event.seq, hash: event.hash };
      state = applyEvent(state, draft);
      sealed.push(event);
    }
    if (!state) throw new Error("no state");
    batches.push(outboxItemsFor(state, sealed, OWNER_TEAM));
    return state;
  };
  const input = createInput("projection", [A, B]);
  let current = append(createLoopEvents({ ...input, loop_id: loopId, at: at(0) }));
  current = append(proposeCandidate(current, proposeInput("projection").proposal, { request_hash: sha256Hex("p"), at: at(1) }));
  const leased = grantLease(current, { runner_id: "laptop", labels: {}, at: at(2), ttl_ms: 60_000 });
  current = append(leased);
  if (!leased.ok || !leased.value) throw new Error("no lease");
  current = append(
    reportObservation(current, { lease_id: leased.value.lease_id, fencing_token: 1, observation: observationOf([A]), request_hash: sha256Hex("r"), at: at(3) }),
  );
  return { batches, state: current };
}

async function projectionOf(loopId: string) {
  const all = async (sql: string) => (await env.DB.prepare(sql).bind(loopId).all()).results;
  return {
    loops: await all("SELECT * FROM loops WHERE id = ?"),
    candidates: await all("SELECT * FROM candidates WHERE loop_id = ? ORDER BY id"),
    events: await all("SELECT * FROM events_index WHERE loop_id = ? ORDER BY seq"),
  };
}

describe("writeProjection (the outbox → D1 drain)", () => {
  it("writes the rows a loop's history implies", async () => {
    const loopId = `lp_${"1".repeat(24)}`;
    const { batches } = projectionBatches(loopId);
    await writeProjection(env.DB, batches.flat());
    const rows = await projectionOf(loopId);
    expect(rows.loops).toEqual([expect.objectContaining({ id: loopId, iteration: 1, best_candidate_id: "c1", head_seq: 5, status: "running" })]);
    expect(rows.candidates).toEqual([expect.objectContaining({ id: "c1", status: "promoted", reason: "fewer_failures", updated_seq: 5 })]);
    expect(rows.events.map((row) => row.type)).toEqual(["loop_created", "candidate_proposed", "lease_granted", "observation_reported", "verdict"]);
  });

  it("writes each loop and candidate row of a batch once, the newest, with every event (issue 30)", () => {
    const { batches } = projectionBatches(`lp_${"5".repeat(24)}`);
    const items = batches.flat();
    const ofKind = (list: readonly OutboxItem[], kind: OutboxItem["kind"]) => list.filter((item) => item.kind === kind);
    for (const given of [items, [...items].reverse()]) {
      const kept = latestRows(given);
      expect(ofKind(kept, "event")).toEqual(ofKind(given, "event"));
      expect(ofKind(kept, "loop")).toEqual([ofKind(items, "loop").at(-1)]);
      expect(ofKind(kept, "candidate")).toEqual([ofKind(items, "candidate").at(-1)]);
    }
  });

  it("writes every event of a batch longer than one statement's rows, once", async () => {
    const loopId = `lp_${"6".repeat(24)}`;
    const { batches } = projectionBatches(loopId);
    const items = batches.flat();
    // 40 more events of the loop (an outbox drained after a long wait holds many).
    const more: OutboxItem[] = Array.from({ length: 40 }, (_, index) => ({
      kind: "event",
      row: {
        loopId,
        seq: 6 + index,
        type: "lease_renewed",
        at: new Date(Date.UTC(2026, 2, 1, 9, 1, index)).toISOString(),
        hash: sha256Hex(`e${index}`),
        candidateId: "c1",
      },
    }));
    await writeProjection(env.DB, [...items, ...more]);
    await writeProjection(env.DB, [...items, ...more]);
    const rows = await projectionOf(loopId);
    expect(rows.events.map((row) => row.seq)).toEqual(Array.from({ length: 45 }, (_, index) => index + 1));
    expect(rows.loops).toEqual([expect.objectContaining({ id: loopId, head_seq: 5 })]);
  });

  it("changes nothing when the same items are delivered again", async () => {
    const loopId = `lp_${"2".repeat(24)}`;
    const { batches } = projectionBatches(loopId);
    await writeProjection(env.DB, batches.flat());
    const once = await projectionOf(loopId);
    await writeProjection(env.DB, batches.flat());
    expect(await projectionOf(loopId)).toEqual(once);
  });

  it("never lets an older item overwrite a newer one, whatever the delivery order", async () => {
    const inOrder = `lp_${"3".repeat(24)}`;
    const { batches: ordered } = projectionBatches(inOrder);
    await writeProjection(env.DB, ordered.flat());
    const expected = await projectionOf(inOrder);

    // A stale redelivery of the proposal batch (candidate queued, loop at seq 2) after the verdict.
    const [, proposal] = ordered;
    await writeProjection(env.DB, proposal ?? []);
    expect(await projectionOf(inOrder)).toEqual(expected);

    // Newest batch first, then the older ones: the rows end where in-order delivery ends.
    const reversed = `lp_${"4".repeat(24)}`;
    const { batches } = projectionBatches(reversed);
    for (const batch of [...batches].reverse()) await writeProjection(env.DB, batch);
    const rows = await projectionOf(reversed);
    // The two loops differ only in their id, and so in every hash of their chains.
    const normalized = (projection: typeof rows) =>
      JSON.parse(
        JSON.stringify(projection)
          .replaceAll(reversed, "LOOP")
          .replaceAll(inOrder, "LOOP")
          .replace(/[0-9a-f]{64}/g, "HASH"),
      ) as unknown;
    expect(normalized(rows)).toEqual(normalized(expected));
    expect(rows.loops).toEqual([expect.objectContaining({ head_seq: 5, iteration: 1 })]);
  });
});

describe("LoopObject alarm: lease expiry", () => {
  it("keeps a live lease, re-arms for its deadline, and reclaims it once the deadline has passed", async () => {
    // Time is faked with vi's Date only: the LoopObject runs in this isolate, so `new Date()` inside
    // it reads the faked clock. The alarm itself is run on demand with runDurableObjectAlarm.
    const loop = await createLoop("expiry", [A, B]);
    const stub = loopObject(loop.loop_id);
    const lease = (await proposeAndLease(loop.loop_id, "expiry")) as Awaited<ReturnType<typeof proposeAndLease>> & { expires_at: string };

    await drainOutbox(loop.loop_id);
    const armed = await runInDurableObject(stub, (_instance, state) => state.storage.getAlarm());
    expect(armed).toBe(Date.parse(lease.expires_at));
    expect(Date.parse(lease.expires_at) - Date.now()).toBeLessThanOrEqual(LEASE_TTL_MS);
    const held = await logOf(loop.loop_id);

    // The alarm firing early (a retry, or a drain) reclaims nothing.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await logOf(loop.loop_id)).toEqual(held);

    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      vi.setSystemTime(Date.parse(lease.expires_at) + 1_000);
      expect(await runDurableObjectAlarm(stub)).toBe(true);
    } finally {
      vi.useRealTimers();
    }

    const log = await runInDurableObject(stub, (_instance, state) =>
      state.storage.sql
        .exec<{ body: string }>("SELECT body FROM events ORDER BY seq")
        .toArray()
        .map((row) => JSON.parse(row.body) as LoopEvent),
    );
    expect(log.at(-1)).toMatchObject({ type: "lease_expired", data: { lease_id: lease.lease_id, candidate_id: "c1" } });
    expect(verifyChain(log as unknown as Record<string, unknown>[]).ok).toBe(true);

    // The job is back in the queue: another runner gets it under a higher fencing token.
    const next = await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "ci-box" });
    expect(next.status).toBe(200);
    const relet = (await next.json()) as { lease_id: string; fencing_token: number; job: { candidate_id: string } };
    expect(relet).toMatchObject({ fencing_token: 2, job: { candidate_id: "c1" } });

    // The first runner's late report is refused and records nothing; the new holder's is decided.
    const before = await logOf(loop.loop_id);
    const late = await postJson(`/v1/leases/${lease.lease_id}/report`, { fencing_token: lease.fencing_token, observation: observationOf([]) });
    expect(late.status).toBe(409);
    expect(await late.json()).toMatchObject({ error: { code: "stale_lease" } });
    const lateHeartbeat = await postJson(`/v1/leases/${lease.lease_id}/heartbeat`, { fencing_token: lease.fencing_token });
    expect(lateHeartbeat.status).toBe(409);
    expect(await logOf(loop.loop_id)).toEqual(before);
    const current = await postJson(`/v1/leases/${relet.lease_id}/report`, { fencing_token: relet.fencing_token, observation: observationOf([A]) });
    expect(await current.json()).toMatchObject({ verdict: { candidate_id: "c1", decision: "promoted" } });
  });

  it("run twice after the deadline (alarms are at least once), reclaims the lease once: one lease_expired, the job queued once", async () => {
    const loop = await createLoop("expiry-twice", [A, B]);
    const stub = loopObject(loop.loop_id);
    const lease = (await proposeAndLease(loop.loop_id, "expiry-twice")) as Awaited<ReturnType<typeof proposeAndLease>> & { expires_at: string };
    await drainOutbox(loop.loop_id);
    const deadline = Date.parse(lease.expires_at);
    const expiries = async () =>
      runInDurableObject(stub, (_instance, state) =>
        state.storage.sql
          .exec<{ body: string }>("SELECT body FROM events ORDER BY seq")
          .toArray()
          .map((row) => JSON.parse(row.body) as LoopEvent)
          .filter((event) => event.type === "lease_expired"),
      );

    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      vi.setSystemTime(deadline + 1_000);
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect(await expiries()).toHaveLength(1);
      const afterFirst = await logOf(loop.loop_id);
      // The same alarm delivered again, later still: set for the deadline it fired at, as a retried alarm is.
      vi.setSystemTime(deadline + 5_000);
      await runInDurableObject(stub, (_instance, state) => state.storage.setAlarm(deadline));
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect(await logOf(loop.loop_id)).toEqual(afterFirst);
    } finally {
      vi.useRealTimers();
    }

    const log = await expiries();
    expect(log).toHaveLength(1);
    expect(log[0]).toMatchObject({ data: { lease_id: lease.lease_id, candidate_id: "c1" } });
    // The job is queued once: one runner gets it again, the next finds nothing to do.
    const relet = await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "second-runner" });
    expect(await relet.json()).toMatchObject({ fencing_token: 2, job: { candidate_id: "c1" } });
    expect((await postJson(`/v1/loops/${loop.loop_id}/leases`, { runner_id: "third-runner" })).status).toBe(204);
  });
});
