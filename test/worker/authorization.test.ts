import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import { MAX_PUT_BYTES } from "../../worker/src/artifacts/artifact-limits.js";
import { app } from "../../worker/src/app.js";
import { call, candidateBody, createLoopBody, drainOutbox, logOf, ndjson, observationOf, parseJsonl, pendingBaselineOf, postJson } from "./fixtures.js";

// Authorization before any side effect (DESIGN §11), on every route the worker serves, taken from the
// app itself: each is sent, as every kind of caller that may not use it, a request whose body would
// store something if it were let in — inline evidence, cited digests, bytes to upload — and must
// answer its refusal with nothing changed anywhere: every D1 row, every stored object, every loop's log.

const encode = (text: string) => new TextEncoder().encode(text);
const base64 = (bytes: Uint8Array) => btoa(Array.from(bytes, (byte) => String.fromCharCode(byte)).join(""));

/** The bytes every hostile request carries or cites: stored anywhere, they would show in the snapshot. */
const PAYLOAD = encode("$ npm test\nall green, trust me\n");
const PAYLOAD_SHA = sha256Hex(PAYLOAD);
/** The digest the victim loop's multipart upload is open for. */
const UPLOAD_SHA = "c".repeat(64);

async function json<T>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  return JSON.parse(text) as T;
}

async function createTeam(name: string): Promise<{ admin: string }> {
  return { admin: (await json<{ token: { token: string } }>(await postJson("/v1/teams", { name }), 201)).token.token };
}

async function createToken(admin: string, body: Record<string, unknown>): Promise<string> {
  return (await json<{ token: string }>(await postJson("/v1/tokens", body, admin), 201)).token;
}

/** What the hostile requests aim at: a loop with a candidate leased and an upload open, and a loop awaiting its baseline, leased. */
interface Target {
  loopId: string;
  leaseId: string;
  fencing: number;
  uploadId: string;
  /** The baseline lease of another loop of the team, one awaiting its baseline (the `/baseline` route's target). */
  pendingLoopId: string;
  baselineLeaseId: string;
}

/**
 * A loop of the token's team with a candidate leased and a multipart upload open, and one awaiting its
 * baseline whose measurement the token leased, so every route has something to reach.
 */
async function victimLoop(token: string, key: string): Promise<Target> {
  const loopId = (await json<{ loop: { loop_id: string } }>(await postJson("/v1/loops", createLoopBody(key, ["parse.empty"]), token), 201)).loop.loop_id;
  await json(await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(key), token), 201);
  const lease = await json<{ lease_id: string; fencing_token: number }>(
    await postJson(`/v1/loops/${loopId}/leases`, { runner_id: `runner-${key}` }, token),
    200,
  );
  const upload = await json<{ upload_id: string }>(
    await postJson(`/v1/loops/${loopId}/artifacts`, { sha256: UPLOAD_SHA, size: MAX_PUT_BYTES + 1, content_type: "application/octet-stream" }, token),
    200,
  );
  const { t0, ...body } = createLoopBody(`${key}-pending`, [], { evaluate: { labels: { gpu: "h100" } } });
  const pending = await json<{ awaiting_baseline: { loop_id: string } }>(await postJson("/v1/loops", { ...body, t0_commit: t0.commit }, token), 202);
  const pendingLoopId = pending.awaiting_baseline.loop_id;
  const baseline = await json<{ lease_id: string }>(
    await postJson(`/v1/loops/${pendingLoopId}/leases`, { runner_id: `runner-${key}`, labels: { gpu: "h100" } }, token),
    200,
  );
  return { loopId, leaseId: lease.lease_id, fencing: lease.fencing_token, uploadId: upload.upload_id, pendingLoopId, baselineLeaseId: baseline.lease_id };
}

/** Everything a request could change: every D1 table's rows (but the migrations'), every stored object, and the logs of `loops`. */
async function snapshot(loops: readonly string[]): Promise<unknown> {
  const tables = (
    await env.DB.prepare(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' AND name != 'd1_migrations' ORDER BY name",
    ).all<{
      name: string;
    }>()
  ).results;
  const rows: Record<string, unknown[]> = {};
  for (const { name } of tables) rows[name] = (await env.DB.prepare(`SELECT * FROM "${name}" ORDER BY rowid`).all()).results;
  const objects = (await env.ARTIFACTS.list({ limit: 1_000 })).objects.map((object) => [object.key, object.size, object.etag]);
  const logs = await Promise.all(loops.map((loopId) => logOf(loopId)));
  const pending = await Promise.all(loops.map((loopId) => pendingBaselineOf(loopId)));
  return { rows, objects, logs, pending };
}

/** A hostile request: method, path and body (JSON, or bytes for an upload). */
interface Attempt {
  method: string;
  path: string;
  body?: unknown;
}

/**
 * The request every route pattern is sent, with the path filled in for `target` (a loop, its lease and
 * its open upload) and a body that stores evidence if it is let in. Throws for a pattern it does not
 * know: a new route must get its hostile request here before the suite passes.
 */
function attemptOn(method: string, pattern: string, target: Target): Attempt {
  const path = pattern
    .replace(":id", target.loopId)
    .replace(":leaseId", pattern.endsWith("/baseline") ? target.baselineLeaseId : target.leaseId)
    .replace(":sha256", pattern.includes("/uploads/") ? UPLOAD_SHA : PAYLOAD_SHA)
    .replace(":uploadId", encodeURIComponent(target.uploadId))
    .replace(":part", "1")
    .replace(":candidateId", "c1");
  const evidence = [{ sha256: PAYLOAD_SHA, base64: base64(PAYLOAD) }];
  const log = { sha256: PAYLOAD_SHA, size: PAYLOAD.length, name: "gate-unit.log", content_type: "text/plain; charset=utf-8" };
  const bodies: Record<string, unknown> = {
    "POST /v1/loops": createLoopBody("intruder", ["parse.empty"]),
    "GET /v1/loops": undefined,
    "GET /v1/loops/:id": undefined,
    "GET /v1/loops/:id/events": undefined,
    "POST /v1/loops/:id/candidates": {
      ...candidateBody("intruder"),
      bundle: { sha256: PAYLOAD_SHA, size: PAYLOAD.length },
      evidence,
    },
    "POST /v1/loops/:id/leases": { runner_id: "intruder" },
    "POST /v1/loops/:id/receipts": {},
    "POST /v1/loops/:id/confirm": { candidate_id: "c1", samples: { t0: [1], best: [1] } },
    "POST /v1/loops/:id/cancel": { reason: "intruder" },
    "POST /v1/loops/:id/candidates/:candidateId/review": { decision: "ack", note: "intruder approves" },
    "POST /v1/loops/:id/context-unsatisfiable": { runner_id: "intruder", tier: "stack_trace", needed: 100_000_000, budget: 32_000 },
    "POST /v1/loops/:id/rechecks": {
      idempotency_key: "intruder-recheck",
      candidate_id: "t0",
      commit: "0".repeat(40),
      purpose: "periodic",
      runner_id: "intruder",
      observation: observationOf(["parse.empty", "parse.nested"], log),
    },
    "GET /v1/loops/:id/artifacts": undefined,
    "POST /v1/loops/:id/artifacts": { sha256: PAYLOAD_SHA, size: PAYLOAD.length, content_type: "text/plain" },
    "GET /v1/loops/:id/artifacts/:sha256": undefined,
    "PUT /v1/loops/:id/artifacts/:sha256": PAYLOAD,
    "PUT /v1/loops/:id/artifacts/:sha256/uploads/:uploadId/parts/:part": PAYLOAD,
    "POST /v1/loops/:id/artifacts/:sha256/uploads/:uploadId/complete": { parts: [{ part_number: 1, etag: "intruder" }] },
    "DELETE /v1/loops/:id/artifacts/:sha256/uploads/:uploadId": undefined,
    "POST /v1/leases/:leaseId/heartbeat": { fencing_token: target.fencing },
    "POST /v1/leases/:leaseId/release": { fencing_token: target.fencing },
    "POST /v1/leases/:leaseId/report": { fencing_token: target.fencing, observation: observationOf([], log), evidence },
    "POST /v1/leases/:leaseId/baseline": { fencing_token: 1, observation: observationOf([], log), evidence },
    "POST /v1/teams": { name: "intruders" },
    "GET /v1/teams": undefined,
    "POST /v1/tokens": { scopes: ["admin"], team_id: "tm_0000000000000000" },
    "GET /v1/tokens": undefined,
    "DELETE /v1/tokens/:id": undefined,
    "GET /v1/whoami": undefined,
    "POST /v1/dashboard/links": {},
  };
  const key = `${method} ${pattern}`;
  if (!(key in bodies)) throw new Error(`no hostile request for ${key}: add one to attemptOn`);
  return { method, path: pattern === "/v1/tokens/:id" ? "/v1/tokens/tk_0000000000000000" : path, body: bodies[key] };
}

function send(attempt: Attempt, token: string | null): Promise<Response> {
  const { method, path, body } = attempt;
  if (body === undefined) return call(path, { method }, token);
  if (body instanceof Uint8Array) return call(path, { method, headers: { "content-type": "application/octet-stream" }, body }, token);
  return call(path, { method, headers: { "content-type": "application/json" }, body: JSON.stringify(body) }, token);
}

/** Every route the worker serves under /v1, as the app has them mounted: method and pattern. */
const apiRoutes = () => [
  ...new Map(
    app.routes
      // The API's description is public (openapi.test.ts): nothing to refuse.
      .filter((route) => route.method !== "ALL" && route.path.startsWith("/v1/") && route.path !== "/v1/openapi.json")
      .map((route) => [`${route.method} ${route.path}`, route]),
  ).values(),
];
/** The POSTs a `read` token may make: a login link for the dashboard changes nothing a loop has, and its token may look. */
const READ_SCOPE_POSTS = new Set(["POST /v1/dashboard/links"]);
/** A route about one loop: under /v1/loops/:id or /v1/leases. */
const isLoopRoute = (pattern: string) => /^\/v1\/(loops\/:id|leases\/)/.test(pattern);

describe("authorization before any side effect, on every route (DESIGN §11)", { timeout: 120_000 }, () => {
  it("refuses every caller that may not use a route — no token, another team, a token for another loop, one without the scope, a loop nobody has, another runner's token on a lease — and changes nothing", async () => {
    const victim = await createTeam("victims");
    const intruder = await createTeam("intruders-team");
    const loop = await victimLoop(victim.admin, "victim-loop");
    const other = await victimLoop(victim.admin, "victim-other");
    const otherLoopOnly = await createToken(victim.admin, { scopes: ["propose", "evaluate", "review"], loop_id: other.loopId });
    const readOnly = await createToken(victim.admin, { scopes: ["read"] });
    const otherRunner = await createToken(victim.admin, { scopes: ["evaluate"] });
    const nobodys = { ...loop, loopId: `lp_${"9".repeat(24)}`, leaseId: `lp_${"9".repeat(24)}-L1`, baselineLeaseId: `lp_${"9".repeat(24)}-B1` };

    const routes = apiRoutes();
    // Every route has its hostile request (attemptOn throws otherwise), and there are as many as the app serves.
    expect(routes.length).toBeGreaterThanOrEqual(24);
    // The setup's own events reach D1 through each loop's outbox: drained first, so only the attempts could change a row.
    const loops = [loop.loopId, other.loopId, loop.pendingLoopId, other.pendingLoopId];
    for (const loopId of loops) await drainOutbox(loopId);
    const before = await snapshot(loops);
    const refusals: string[] = [];
    const expectRefused = async (who: string, attempt: Attempt, token: string | null, status: number) => {
      const response = await send(attempt, token);
      const text = await response.text();
      if (response.status !== status) refusals.push(`${attempt.method} ${attempt.path} as ${who}: ${response.status} ${text.slice(0, 200)}`);
    };
    for (const { method, path: pattern } of routes) {
      const attempt = attemptOn(method, pattern, loop);
      await expectRefused("no token", attempt, null, 401);
      if (method !== "GET" && !READ_SCOPE_POSTS.has(`${method} ${pattern}`))
        await expectRefused("a read-only token of the loop's team", attempt, readOnly, 403);
      if (!isLoopRoute(pattern)) continue;
      await expectRefused("another team's admin", attempt, intruder.admin, 404);
      await expectRefused("a token restricted to another loop of the team", attempt, otherLoopOnly, 404);
      await expectRefused("another team's admin, on a loop nobody has", attemptOn(method, pattern, nobodys), intruder.admin, 404);
      // A lease belongs to the token that took it: another evaluate token of the same team may not touch it.
      if (pattern.startsWith("/v1/leases/")) await expectRefused("another runner's token of the team", attempt, otherRunner, 403);
    }
    expect(refusals).toEqual([]);
    expect(await snapshot(loops)).toEqual(before);
    // The made-up loop was never created either.
    expect((await call(`/v1/loops/${nobodys.loopId}`)).status).toBe(404);
  });

  it("the hostile bodies are ones that store evidence when the caller may: the victim's own proposal with the same inline bundle is stored", async () => {
    const team = await createTeam("controls");
    const loop = await victimLoop(team.admin, "control-loop");
    const attempt = attemptOn("POST", "/v1/loops/:id/candidates", loop);
    const response = await send(attempt, team.admin);
    expect(response.status, await response.clone().text()).toBe(201);
    const stored = await env.DB.prepare("SELECT sha256 FROM artifacts WHERE loop_id = ?").bind(loop.loopId).all<{ sha256: string }>();
    expect(stored.results.map((row) => row.sha256)).toContain(PAYLOAD_SHA);
  });
});

describe("only a person answers a review request (docs/design.md §6.8)", { timeout: 60_000 }, () => {
  it("a runner's propose and evaluate token, and a read token, cannot ack a candidate (403, nothing changed); a review token can, and is recorded as who approved", async () => {
    const team = await createTeam("reviewers");
    const runner = await createToken(team.admin, { scopes: ["propose", "evaluate"] });
    const reader = await createToken(team.admin, { scopes: ["read"] });
    const reviewer = await createToken(team.admin, { scopes: ["review"] });
    const loopId = (await json<{ loop: { loop_id: string } }>(await postJson("/v1/loops", createLoopBody("reviewed", ["parse.empty"]), team.admin), 201)).loop
      .loop_id;
    const proposed = await json<{ candidate: { candidate_id: string; status: string }; loop: { awaiting_review?: string[] } }>(
      await postJson(
        `/v1/loops/${loopId}/candidates`,
        { ...candidateBody("reviewed"), review_request: { files: ["test/parse.test.js"], why: "the test expects the wrong error message" } },
        runner,
      ),
      201,
    );
    expect(proposed.candidate.status).toBe("awaiting_review");
    expect(proposed.loop.awaiting_review).toEqual([proposed.candidate.candidate_id]);
    // Nothing to lease while it waits: a runner finds no job.
    expect((await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "r1" }, runner)).status).toBe(204);

    await drainOutbox(loopId);
    const before = await snapshot([loopId]);
    const path = `/v1/loops/${loopId}/candidates/${proposed.candidate.candidate_id}/review`;
    for (const token of [runner, reader]) {
      const refused = await postJson(path, { decision: "ack", note: "looks right to me" }, token);
      expect(refused.status).toBe(403);
    }
    expect(await snapshot([loopId])).toEqual(before);

    const acked = await json<{ candidate: { status: string } }>(await postJson(path, { decision: "ack", note: "the message changed in v2" }, reviewer), 201);
    expect(acked.candidate.status).toBe("queued");
    const events = parseJsonl(await ndjson(await call(`/v1/loops/${loopId}/events`, {}, reviewer))) as { type: string; data: { by?: string } }[];
    const decided = events.find((event) => event.type === "review_decided");
    expect(decided?.data.by).toMatch(/^tk_[0-9a-f]{16}$/);
    // Answered once: another answer is refused, and the same one again changes nothing.
    expect((await postJson(path, { decision: "reject", note: "changed my mind" }, reviewer)).status).toBe(409);
    expect((await postJson(path, { decision: "ack", note: "the message changed in v2" }, reviewer)).status).toBe(200);
    expect((await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "r1" }, runner)).status).toBe(200);
  });
});

describe("a lease belongs to the token that took it (DESIGN §11)", { timeout: 60_000 }, () => {
  it("another evaluate token of the team cannot heartbeat, release or report on it, nor be handed it under the same runner id; the holder's report is judged", async () => {
    const team = await createTeam("lease-holders");
    const holder = await createToken(team.admin, { scopes: ["evaluate"] });
    const thief = await createToken(team.admin, { scopes: ["evaluate"] });
    const loopId = (await json<{ loop: { loop_id: string } }>(await postJson("/v1/loops", createLoopBody("held", ["parse.empty"]), team.admin), 201)).loop
      .loop_id;
    await json(await postJson(`/v1/loops/${loopId}/candidates`, candidateBody("held"), team.admin), 201);
    const lease = await json<{ lease_id: string; fencing_token: number }>(await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box" }, holder), 200);
    const events = parseJsonl(await ndjson(await call(`/v1/loops/${loopId}/events`))) as { type: string; data: { holder?: string } }[];
    const granted = events.find((event) => event.type === "lease_granted");
    expect(granted?.data.holder).toMatch(/^tk_[0-9a-f]{16}$/);

    await drainOutbox(loopId);
    const before = await snapshot([loopId]);
    const body = { fencing_token: lease.fencing_token };
    for (const [route, payload] of [
      ["heartbeat", body],
      ["release", body],
      ["report", { ...body, observation: observationOf([]) }],
    ] as const) {
      const response = await postJson(`/v1/leases/${lease.lease_id}/${route}`, payload, thief);
      expect(response.status, route).toBe(403);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("lease_not_yours");
    }
    // Claiming the holder's runner id hands the thief nothing: the job is out, and not to it.
    const claimed = await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box" }, thief);
    expect(claimed.status).toBe(204);
    expect(await snapshot([loopId])).toEqual(before);

    const judged = await json<{ verdict: { decision: string } }>(
      await postJson(`/v1/leases/${lease.lease_id}/report`, { ...body, observation: observationOf([]) }, holder),
      200,
    );
    expect(judged.verdict.decision).toBe("promoted");
  });
});

describe("the confirm measurement is bound like a lease (DESIGN §11)", { timeout: 60_000 }, () => {
  it("another token cannot replace or join it, the first figure recorded is final, and it re-signs the final receipt once", async () => {
    const team = await createTeam("confirmers");
    const runner = await createToken(team.admin, { scopes: ["propose", "evaluate"] });
    const forger = await createToken(team.admin, { scopes: ["evaluate"] });
    const readings = (center: number, count: number) => Array.from({ length: count }, (_, index) => center * (1 + 0.01 * Math.sin(index)));
    const metric = { run: "node bench.js", name: "parse_ms", direction: "lower" as const, min_effect: "2%", samples: { min: 5, max: 40 } };
    const body = createLoopBody("confirm-bound", [], { mode: "optimize", metric, stop: { max_iterations: 1 } });
    const created = await postJson(
      "/v1/loops",
      { ...body, t0: { ...body.t0, observation: { ...body.t0.observation, samples: { best: [], candidate: readings(100, 5) } } } },
      runner,
    );
    const loopId = (await json<{ loop: { loop_id: string } }>(created, 201)).loop.loop_id;
    await json(await postJson(`/v1/loops/${loopId}/candidates`, candidateBody("confirm-bound"), runner), 201);
    const lease = await json<{ lease_id: string; fencing_token: number }>(
      await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "bench-box" }, runner),
      200,
    );
    const observation = { ...observationOf([]), samples: { best: readings(100, 8), candidate: readings(70, 8) }, compared_to: body.t0.commit };
    await json(await postJson(`/v1/leases/${lease.lease_id}/report`, { fencing_token: lease.fencing_token, observation }, runner), 200);

    const confirm = (token: string, best: number, count: number) =>
      postJson(`/v1/loops/${loopId}/confirm`, { candidate_id: "c1", samples: { t0: readings(100, count), best: readings(best, count) } }, token);
    const finalReceipts = async () =>
      (parseJsonl(await ndjson(await call(`/v1/loops/${loopId}/events`))) as { type: string; data: { kind?: string } }[]).filter(
        (event) => event.type === "receipt_issued" && event.data.kind === "final",
      ).length;
    expect(await finalReceipts()).toBe(1);
    expect(await json(await confirm(runner, 70, 3), 200)).toMatchObject({ status: "need_samples" });
    // The forger's readings ("1900% better") neither join nor replace the runner's measurement.
    await drainOutbox(loopId);
    const before = await snapshot([loopId]);
    const joined = await confirm(forger, 5, 8);
    expect(joined.status).toBe(403);
    expect(((await joined.json()) as { error: { code: string } }).error.code).toBe("confirm_not_yours");
    expect(await snapshot([loopId])).toEqual(before);
    const recorded = await json<{ status: string; confirm: { estimate: number } }>(await confirm(runner, 70, 8), 200);
    expect(recorded.status).toBe("recorded");
    expect(await finalReceipts()).toBe(2);
    // Final: neither the forger nor the runner itself replaces it, and no further receipt is signed.
    expect((await confirm(forger, 5, 8)).status).toBe(403);
    const replaced = await confirm(runner, 5, 8);
    expect(replaced.status).toBe(409);
    expect(((await replaced.json()) as { error: { code: string } }).error.code).toBe("confirm_recorded");
    expect(await finalReceipts()).toBe(2);
    const summary = await json<{ receipt_id: string }>(await call(`/v1/loops/${loopId}`, {}, runner), 200);
    const signed = (await (await call(`/r/${summary.receipt_id}.json`, {}, null)).json()) as { payload: string };
    const statement = JSON.parse(atob(signed.payload)) as { predicate: { confirm: { estimate: number } } };
    expect(statement.predicate.confirm.estimate).toBeCloseTo(recorded.confirm.estimate, 10);
  });
});

describe("a token minted with runner labels claims only those (DESIGN §11)", { timeout: 60_000 }, () => {
  it("refuses a lease, a proposal's lease and a confirm claiming other labels, changing nothing; those labels or fewer are served", async () => {
    const team = await createTeam("gpu-owners");
    const gpu = await json<{ token: string; labels: Record<string, string> | null }>(
      await postJson("/v1/tokens", { scopes: ["propose", "evaluate"], labels: { gpu: "h100" } }, team.admin),
      201,
    );
    expect(gpu.labels).toEqual({ gpu: "h100" });
    const loopId = (
      await json<{ loop: { loop_id: string } }>(
        await postJson("/v1/loops", createLoopBody("gpu-only", ["parse.empty"], { evaluate: { labels: { gpu: "h100" } } }), team.admin),
        201,
      )
    ).loop.loop_id;
    await json(await postJson(`/v1/loops/${loopId}/candidates`, candidateBody("gpu-only"), team.admin), 201);
    await drainOutbox(loopId);
    const before = await snapshot([loopId]);
    for (const [path, body] of [
      [`/v1/loops/${loopId}/leases`, { runner_id: "laptop", labels: { gpu: "a10" } }],
      [`/v1/loops/${loopId}/leases`, { runner_id: "laptop", labels: { gpu: "h100", os: "macos" } }],
      [`/v1/loops/${loopId}/candidates`, { ...candidateBody("gpu-second"), lease: { runner_id: "laptop", labels: { gpu: "a10" } } }],
      [`/v1/loops/${loopId}/confirm`, { candidate_id: "c1", samples: { t0: [1], best: [1] }, labels: { gpu: "a10" } }],
    ] as const) {
      const response = await postJson(path, body, gpu.token);
      expect(response.status, path).toBe(403);
      expect(((await response.json()) as { error: { code: string; message: string } }).error).toMatchObject({
        code: "labels_not_allowed",
        message: expect.stringContaining("may claim only the labels gpu=h100"),
      });
    }
    expect(await snapshot([loopId])).toEqual(before);
    const lease = await json<{ lease_id: string }>(
      await postJson(`/v1/loops/${loopId}/leases`, { runner_id: "gpu-box", labels: { gpu: "h100" } }, gpu.token),
      200,
    );
    expect(lease.lease_id).toMatch(/-L1$/);
  });

  it("a labelled token mints only tokens limited to its labels or fewer, and whoami says what it may claim", async () => {
    const team = await createTeam("gpu-admins");
    const labelled = await json<{ token: string }>(await postJson("/v1/tokens", { scopes: ["admin"], labels: { gpu: "h100", os: "linux" } }, team.admin), 201);
    for (const labels of [undefined, { gpu: "a10" }, { gpu: "h100", arch: "arm" }]) {
      const refused = await postJson("/v1/tokens", { scopes: ["evaluate"], ...(labels ? { labels } : {}) }, labelled.token);
      expect(refused.status, JSON.stringify(labels)).toBe(403);
    }
    const narrower = await json<{ labels: Record<string, string> }>(
      await postJson("/v1/tokens", { scopes: ["evaluate"], labels: { gpu: "h100" } }, labelled.token),
      201,
    );
    expect(narrower.labels).toEqual({ gpu: "h100" });
    expect(await json<{ labels: Record<string, string> | null }>(await call("/v1/whoami", {}, labelled.token), 200)).toMatchObject({
      labels: { gpu: "h100", os: "linux" },
    });
    expect(await json<{ labels: Record<string, string> | null }>(await call("/v1/whoami", {}, team.admin), 200)).toMatchObject({ labels: null });
  });
});
