import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { drizzle } from "drizzle-orm/d1";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import type { ArtifactRef } from "#shared/wire/observation.js";
import { app } from "../../worker/src/app.js";
import { recordArtifact, teamUsedBytes } from "../../worker/src/artifacts/artifact-rows.js";
import { RATE_LIMIT_PERIOD_S } from "../../worker/src/http/auth.js";
import { loopIdFor } from "../../worker/src/http/loop-access.js";
import { NOT_FOUND_MAX_AGE_S } from "../../worker/src/routes/receipts.js";
import { candidateBody, createLoopBody, drainOutbox, ndjson, observationOf, readLoopObject } from "./fixtures.js";

// Limits that hold per team (DESIGN §11): requests per window across all of a team's tokens; the owner's
// token and failed authentications per client address; the public receipt routes cached and limited per
// address; revoking a token revokes what it minted; and caps on a team's loops, a loop's candidates and
// interim receipts, and a team's stored bytes, each refused with nothing changed. Small limits come
// from env overrides to app.fetch (a var, or TEST_LOW_RATE_LIMIT, 3 requests per 10 s, in place of a
// rate limit binding), not from thousands of requests.

const OWNER = env.OWNER_TOKEN ?? "";

interface Send {
  method?: string;
  body?: unknown;
  /** The bearer token (the owner's unless given; null: none). */
  token?: string | null;
  /** The client address, as Cloudflare names it (CF-Connecting-IP); none: the worker's "local". */
  address?: string;
  /** What the deployment sets otherwise: vars, or a rate limit binding in place of another. */
  vars?: Record<string, unknown>;
  headers?: Record<string, string>;
}

/** A request to the worker as deployed with `vars`, waiting for what it does after answering (its cache writes). */
async function send(path: string, options: Send = {}): Promise<Response> {
  const headers = new Headers(options.headers);
  const token = options.token === undefined ? OWNER : options.token;
  if (token !== null) headers.set("authorization", `Bearer ${token}`);
  if (options.address) headers.set("cf-connecting-ip", options.address);
  let body: BodyInit | null = null;
  if (options.body instanceof Uint8Array) body = options.body;
  else if (options.body !== undefined) {
    headers.set("content-type", "application/json");
    body = JSON.stringify(options.body);
  }
  const ctx = createExecutionContext();
  const response = await app.fetch(
    new Request(`http://lw.test${path}`, { method: options.method ?? (body === null ? "GET" : "POST"), headers, body }),
    { ...env, ...options.vars },
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return response;
}

async function json<T>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  return JSON.parse(text) as T;
}

/** A response's status and error envelope (a success has none: its code and message are undefined). */
async function errorOf(response: Response): Promise<{ status: number; code: string | undefined; message: string; retryAfter: string | null }> {
  const { error } = (await response.json()) as { error?: { code: string; message: string } };
  return { status: response.status, code: error?.code, message: error?.message ?? "", retryAfter: response.headers.get("retry-after") };
}

async function createTeam(name: string): Promise<{ teamId: string; admin: string; adminId: string }> {
  const created = await json<{ team: { team_id: string }; token: { token: string; token_id: string } }>(await send("/v1/teams", { body: { name } }), 201);
  return { teamId: created.team.team_id, admin: created.token.token, adminId: created.token.token_id };
}

async function createToken(creator: string, body: Record<string, unknown>): Promise<{ token: string; token_id: string }> {
  return json(await send("/v1/tokens", { body, token: creator }), 201);
}

async function createLoop(key: string, token: string, vars: Record<string, string> = {}): Promise<string> {
  const created = await json<{ loop: { loop_id: string } }>(await send("/v1/loops", { body: createLoopBody(key, ["parse.empty"]), token, vars }), 201);
  return created.loop.loop_id;
}

const windowOf = (ms: number): number => Math.floor(ms / (RATE_LIMIT_PERIOD_S * 1_000));

/**
 * Runs `requests` inside one window of the rate limiters (fixed windows on multiples of the period, as
 * Cloudflare's and Miniflare's are), starting a fresh one when less than 3 s of the current are left:
 * four requests take milliseconds, so they never straddle two windows, and the test checks they did not.
 */
async function inOneWindow<T>(requests: () => Promise<T>): Promise<T> {
  const period = RATE_LIMIT_PERIOD_S * 1_000;
  const left = period - (Date.now() % period);
  if (left < 3_000) await new Promise((resolve) => setTimeout(resolve, left + 50));
  const started = Date.now();
  const result = await requests();
  expect(windowOf(Date.now()), "the requests fell in two rate-limit windows").toBe(windowOf(started));
  return result;
}

/** A deployment whose `binding` allows 3 requests per 10 s. */
const low = (binding: string) => ({ [binding]: env.TEST_LOW_RATE_LIMIT });

describe("requests per window, per team (DESIGN §11)", { timeout: 60_000 }, () => {
  it("all of a team's tokens share one window: a second token is refused once the first has spent it, while another team is not", async () => {
    const team = await createTeam("window-shared");
    const other = await createTeam("window-other");
    const first = await createToken(team.admin, { scopes: ["read"] });
    const second = await createToken(team.admin, { scopes: ["read"] });
    const vars = low("TEAM_RATE_LIMIT");
    const statuses = await inOneWindow(async () => {
      const spent = [];
      for (let request = 0; request < 3; request++) spent.push((await send("/v1/whoami", { token: first.token, vars })).status);
      return { spent, second: await send("/v1/whoami", { token: second.token, vars }), other: await send("/v1/whoami", { token: other.admin, vars }) };
    });
    expect(statuses.spent).toEqual([200, 200, 200]);
    const refused = await errorOf(statuses.second);
    expect(refused).toMatchObject({ status: 429, code: "rate_limited", retryAfter: String(RATE_LIMIT_PERIOD_S) });
    expect(refused.message).toContain(`team ${team.teamId}`);
    expect(refused.message).toContain("all of the team's tokens together");
    expect(statuses.other.status).toBe(200);
  });

  it("the owner's token is limited per client address: one address past the limit is refused, another is not", async () => {
    const vars = low("OWNER_RATE_LIMIT");
    const answers = await inOneWindow(async () => {
      const spent = [];
      for (let request = 0; request < 3; request++) spent.push((await send("/v1/whoami", { address: "198.51.100.1", vars })).status);
      return {
        spent,
        over: await send("/v1/whoami", { address: "198.51.100.1", vars }),
        elsewhere: await send("/v1/whoami", { address: "198.51.100.2", vars }),
      };
    });
    expect(answers.spent).toEqual([200, 200, 200]);
    expect(await errorOf(answers.over)).toMatchObject({ status: 429, code: "rate_limited", retryAfter: String(RATE_LIMIT_PERIOD_S) });
    expect(answers.elsewhere.status).toBe(200);
  });

  it("failed authentications are counted per address before they are answered: past the limit 429, even for a valid token, while another address still gets 401", async () => {
    const team = await createTeam("brute-force");
    const vars = low("AUTH_FAILURE_RATE_LIMIT");
    const unknown = `lwt_${"0".repeat(16)}_${"A".repeat(43)}`;
    const answers = await inOneWindow(async () => {
      const failures = [];
      for (const token of [unknown, "not-a-token", null]) failures.push((await send("/v1/whoami", { token, address: "203.0.113.9", vars })).status);
      return {
        failures,
        over: await send("/v1/whoami", { token: unknown, address: "203.0.113.9", vars }),
        // A right guess from that address is refused like a wrong one: it was not looked up.
        teamToken: await send("/v1/whoami", { token: team.admin, address: "203.0.113.9", vars }),
        owner: await send("/v1/whoami", { address: "203.0.113.9", vars }),
        elsewhere: await send("/v1/whoami", { token: unknown, address: "203.0.113.10", vars }),
        elsewhereValid: await send("/v1/whoami", { token: team.admin, address: "203.0.113.10", vars }),
      };
    });
    expect(answers.failures).toEqual([401, 401, 401]);
    const over = await errorOf(answers.over);
    expect(over).toMatchObject({ status: 429, code: "rate_limited", retryAfter: String(RATE_LIMIT_PERIOD_S) });
    expect(over.message).toContain("failed authentications from 203.0.113.9");
    expect((await errorOf(answers.teamToken)).status).toBe(429);
    expect((await errorOf(answers.owner)).status).toBe(429);
    expect(await errorOf(answers.elsewhere)).toMatchObject({ status: 401, code: "unauthenticated" });
    expect(answers.elsewhereValid.status).toBe(200);
  });
});

describe("revoking a token revokes what it minted (DESIGN §11)", { timeout: 60_000 }, () => {
  it("a chain of three: revoking the first revokes the two below it, in one statement, and says so; its creator and siblings keep working", async () => {
    const team = await createTeam("cascade");
    const first = await createToken(team.admin, { scopes: ["admin"], name: "first" });
    const second = await createToken(first.token, { scopes: ["admin"], name: "second" });
    const third = await createToken(second.token, { scopes: ["read"], name: "third" });
    const sibling = await createToken(team.admin, { scopes: ["read"], name: "sibling" });
    for (const token of [first, second, third, sibling]) expect((await send("/v1/whoami", { token: token.token })).status).toBe(200);

    const revoked = await json<{ token_id: string; revoked_at: string | null; revoked_count: number; revoked_token_ids: string[] }>(
      await send(`/v1/tokens/${first.token_id}`, { method: "DELETE", token: team.admin }),
      200,
    );
    expect(revoked).toMatchObject({ token_id: first.token_id, revoked_count: 3 });
    expect(revoked.revoked_token_ids).toEqual([first.token_id, ...[second.token_id, third.token_id].sort()]);
    // One revocation time for all three: they were revoked together.
    const rows = await env.DB.prepare("SELECT id, revoked_at FROM tokens WHERE id IN (?, ?, ?, ?)")
      .bind(first.token_id, second.token_id, third.token_id, sibling.token_id)
      .all<{ id: string; revoked_at: string | null }>();
    const at = new Map(rows.results.map((row) => [row.id, row.revoked_at]));
    expect([at.get(first.token_id), at.get(second.token_id), at.get(third.token_id)]).toEqual([revoked.revoked_at, revoked.revoked_at, revoked.revoked_at]);
    expect(at.get(sibling.token_id)).toBeNull();
    for (const token of [first, second, third]) {
      expect(await errorOf(await send("/v1/whoami", { token: token.token }))).toMatchObject({ status: 401, code: "token_revoked" });
    }
    expect((await send("/v1/whoami", { token: team.admin })).status).toBe(200);
    expect((await send("/v1/whoami", { token: sibling.token })).status).toBe(200);

    // Again: the first revocation is answered, and nothing more is revoked.
    const again = await json<{ revoked_at: string | null; revoked_count: number }>(
      await send(`/v1/tokens/${first.token_id}`, { method: "DELETE", token: team.admin }),
      200,
    );
    expect(again).toMatchObject({ revoked_at: revoked.revoked_at, revoked_count: 0 });
  });

  it("revoking again a token revoked before revocations cascaded revokes what it left working", async () => {
    const team = await createTeam("cascade-legacy");
    const parent = await createToken(team.admin, { scopes: ["admin"] });
    const child = await createToken(parent.token, { scopes: ["read"] });
    // As a coordinator before this one revoked it: the token alone.
    await env.DB.prepare("UPDATE tokens SET revoked_at = ? WHERE id = ?").bind(new Date().toISOString(), parent.token_id).run();
    expect((await send("/v1/whoami", { token: child.token })).status).toBe(200);
    const revoked = await json<{ revoked_count: number; revoked_token_ids: string[] }>(
      await send(`/v1/tokens/${parent.token_id}`, { method: "DELETE", token: team.admin }),
      200,
    );
    expect(revoked).toMatchObject({ revoked_count: 1, revoked_token_ids: [child.token_id] });
    expect((await send("/v1/whoami", { token: child.token })).status).toBe(401);
  });
});

/** Every D1 row about a team's loops and a loop's object: what a refused request must leave as it was. */
async function traces(teamId: string, loopIds: readonly string[]) {
  const rows = async (sql: string, ...binds: string[]) =>
    (
      await env.DB.prepare(sql)
        .bind(...binds)
        .all()
    ).results;
  const marks = loopIds.map(() => "?").join(", ") || "''";
  return {
    loops: await rows("SELECT id, head_seq FROM loops WHERE team_id = ? ORDER BY id", teamId),
    artifacts: await rows(`SELECT loop_id, sha256, size FROM artifacts WHERE loop_id IN (${marks}) ORDER BY loop_id, sha256`, ...loopIds),
    usage: await rows(`SELECT loop_id, bytes FROM loop_artifact_usage WHERE loop_id IN (${marks}) ORDER BY loop_id`, ...loopIds),
    receipts: await rows(`SELECT id FROM receipts WHERE loop_id IN (${marks}) ORDER BY id`, ...loopIds),
    objects: (
      await Promise.all(loopIds.map(async (loopId) => (await env.ARTIFACTS.list({ prefix: `loops/${loopId}/` })).objects.map((object) => object.key)))
    ).flat(),
    logs: await Promise.all(loopIds.map(async (loopId) => (await readLoopObject(loopId)).head)),
  };
}

describe("caps per team and per loop, refused with nothing changed (DESIGN §11)", { timeout: 60_000 }, () => {
  it("loops per team (TEAM_MAX_LOOPS): a third loop is 507 limit_reached with no object made; a retried creation, another team and the owner are not refused", async () => {
    const team = await createTeam("loop-cap");
    const vars = { TEAM_MAX_LOOPS: "2" };
    const loops = [await createLoop("cap-1", team.admin, vars), await createLoop("cap-2", team.admin, vars)];
    // The count is D1's, which a loop reaches when its outbox drains.
    for (const loopId of loops) await drainOutbox(loopId);
    const before = await traces(team.teamId, loops);
    const third = await send("/v1/loops", { body: createLoopBody("cap-3", ["parse.empty"]), token: team.admin, vars });
    const refused = await errorOf(third);
    expect(refused).toMatchObject({ status: 507, code: "limit_reached" });
    expect(refused.message).toContain("TEAM_MAX_LOOPS");
    expect(await traces(team.teamId, loops)).toEqual(before);
    expect((await readLoopObject(loopIdFor("loop-key-cap-3", team.teamId))).tables).toEqual([]);
    // The same creation again is its loop, created before the team was full.
    expect(
      (await json<{ created: boolean }>(await send("/v1/loops", { body: createLoopBody("cap-1", ["parse.empty"]), token: team.admin, vars }), 200)).created,
    ).toBe(false);
    const other = await createTeam("loop-cap-other");
    await createLoop("cap-other", other.admin, vars);
    // The owner's own loops are held to no team's count.
    await createLoop("cap-owner", OWNER, { TEAM_MAX_LOOPS: "0" });
  });

  it("candidates per loop (LOOP_MAX_CANDIDATES): a third candidate is 507 limit_reached with nothing appended or stored, inline bundle or not; a replay is answered", async () => {
    const team = await createTeam("candidate-cap");
    const loopId = await createLoop("candidates", team.admin);
    const vars = { LOOP_MAX_CANDIDATES: "2" };
    for (const key of ["cand-1", "cand-2"])
      await json(await send(`/v1/loops/${loopId}/candidates`, { body: candidateBody(key), token: team.admin, vars }), 201);
    await drainOutbox(loopId);
    const before = await traces(team.teamId, [loopId]);
    const third = await errorOf(await send(`/v1/loops/${loopId}/candidates`, { body: candidateBody("cand-3"), token: team.admin, vars }));
    expect(third).toMatchObject({ status: 507, code: "limit_reached" });
    expect(third.message).toContain("LOOP_MAX_CANDIDATES");
    // With its bundle inline: refused before the bytes are stored.
    const bytes = new TextEncoder().encode("# v2 git bundle\nthe third candidate's commits\n");
    const bundle = { sha256: sha256Hex(bytes), size: bytes.byteLength };
    const inline = await send(`/v1/loops/${loopId}/candidates`, {
      body: { ...candidateBody("cand-3"), bundle, evidence: [{ sha256: bundle.sha256, base64: btoa(String.fromCharCode(...bytes)) }] },
      token: team.admin,
      vars,
    });
    expect(await errorOf(inline)).toMatchObject({ status: 507, code: "limit_reached" });
    expect(await traces(team.teamId, [loopId])).toEqual(before);
    // A candidate the loop holds, proposed again, is no new candidate.
    expect(
      (await json<{ replayed: boolean }>(await send(`/v1/loops/${loopId}/candidates`, { body: candidateBody("cand-2"), token: team.admin, vars }), 200))
        .replayed,
    ).toBe(true);
  });

  it("interim receipts per loop (LOOP_MAX_INTERIM_RECEIPTS): the second is 507 limit_reached with nothing signed, appended or written", async () => {
    const team = await createTeam("receipt-cap");
    const loopId = await createLoop("receipts", team.admin);
    const vars = { LOOP_MAX_INTERIM_RECEIPTS: "1" };
    await json(await send(`/v1/loops/${loopId}/receipts`, { body: {}, token: team.admin, vars }), 201);
    await drainOutbox(loopId);
    const before = await traces(team.teamId, [loopId]);
    const second = await errorOf(await send(`/v1/loops/${loopId}/receipts`, { body: {}, token: team.admin, vars }));
    expect(second).toMatchObject({ status: 507, code: "limit_reached" });
    expect(second.message).toContain("LOOP_MAX_INTERIM_RECEIPTS");
    expect(await traces(team.teamId, [loopId])).toEqual(before);
    // Another loop of the team has its own count.
    const other = await createLoop("receipts-other", team.admin);
    await json(await send(`/v1/loops/${other}/receipts`, { body: {}, token: team.admin, vars }), 201);
  });

  it("storage per team (TEAM_ARTIFACT_QUOTA_BYTES): an upload that takes the team's loops together past it is 507 quota_exceeded, intent, PUT or inline, with nothing stored", async () => {
    const team = await createTeam("storage-cap");
    const [first, second] = [await createLoop("storage-1", team.admin), await createLoop("storage-2", team.admin)];
    for (const loopId of [first, second]) await drainOutbox(loopId);
    const vars = { TEAM_ARTIFACT_QUOTA_BYTES: "100" };
    const file = (text: string) => {
      const bytes = new TextEncoder().encode(text);
      return { bytes, sha256: sha256Hex(bytes) };
    };
    const put = (loopId: string, { bytes, sha256 }: { bytes: Uint8Array; sha256: string }) =>
      send(`/v1/loops/${loopId}/artifacts/${sha256}?name=file.txt`, {
        method: "PUT",
        body: bytes,
        token: team.admin,
        vars,
        headers: { "content-type": "text/plain", "content-length": String(bytes.byteLength) },
      });
    const sixty = file("x".repeat(60));
    expect((await put(first, sixty)).status).toBe(201);
    const fifty = file("y".repeat(50));
    const before = await traces(team.teamId, [first, second]);
    // The second loop has nothing stored: its own quota (20 GiB) has room, the team's does not.
    const intent = await errorOf(
      await send(`/v1/loops/${second}/artifacts`, { body: { sha256: fifty.sha256, size: 50, content_type: "text/plain" }, token: team.admin, vars }),
    );
    expect(intent).toMatchObject({ status: 507, code: "quota_exceeded" });
    expect(intent.message).toContain(`team ${team.teamId}`);
    expect(intent.message).toContain("TEAM_ARTIFACT_QUOTA_BYTES");
    expect(await errorOf(await put(second, fifty))).toMatchObject({ status: 507, code: "quota_exceeded" });
    // Inline with a proposal: refused before it is stored.
    const bundle = { sha256: fifty.sha256, size: 50 };
    const inline = await send(`/v1/loops/${second}/candidates`, {
      body: { ...candidateBody("storage-inline"), bundle, evidence: [{ sha256: fifty.sha256, base64: btoa(String.fromCharCode(...fifty.bytes)) }] },
      token: team.admin,
      vars,
    });
    expect(await errorOf(inline)).toMatchObject({ status: 507, code: "quota_exceeded" });
    expect(await traces(team.teamId, [first, second])).toEqual(before);
    // Within the team's quota it is stored; the owner's loops are held to no team's.
    expect((await put(second, file("z".repeat(40)))).status).toBe(201);
    const owner = await createLoop("storage-owner", OWNER);
    const ownerPut = await send(`/v1/loops/${owner}/artifacts/${fifty.sha256}?name=file.txt`, {
      method: "PUT",
      body: fifty.bytes,
      vars: { TEAM_ARTIFACT_QUOTA_BYTES: "1" },
      headers: { "content-type": "text/plain", "content-length": "50" },
    });
    expect(ownerPut.status).toBe(201);

    // The team's quota holds in the D1 batch that records an artifact, as the loop's does: of two records
    // racing for the team's last room (100 of 150 bytes taken), one to each loop, exactly one is made.
    const racing = (loopId: string, label: string) =>
      recordArtifact(drizzle(env.DB), { loopId, sha256: sha256Hex(label), size: 30, name: `${label}.txt`, contentType: "text/plain", etag: label }, 1_000, {
        teamId: team.teamId,
        quotaBytes: 150,
      });
    const raced = await Promise.all([racing(first, "race-a"), racing(second, "race-b")]);
    expect(raced.filter((recorded) => recorded !== null)).toHaveLength(1);
    expect(await teamUsedBytes(drizzle(env.DB), first, team.teamId)).toBe(130);
  });
});

/** A loop of the owner's whose t0 cites a stored gate log, and an interim receipt over it. */
async function receiptWithFile(key: string): Promise<{ receiptId: string; log: ArtifactRef }> {
  const bytes = new TextEncoder().encode(`${key}: the gate's log\n`);
  const log: ArtifactRef = { sha256: sha256Hex(bytes), size: bytes.byteLength, name: "gate-unit.log", content_type: "text/plain; charset=utf-8" };
  const body = createLoopBody(key, ["parse.empty"]);
  const created = await json<{ loop: { loop_id: string } }>(
    await send("/v1/loops", { body: { ...body, t0: { ...body.t0, observation: observationOf(["parse.empty"], log) } } }),
    201,
  );
  const loopId = created.loop.loop_id;
  const stored = await send(`/v1/loops/${loopId}/artifacts/${log.sha256}?name=gate-unit.log`, {
    method: "PUT",
    body: bytes,
    headers: { "content-type": log.content_type, "content-length": String(bytes.byteLength) },
  });
  expect(stored.status).toBe(201);
  const receipt = await json<{ receipt_id: string }>(await send(`/v1/loops/${loopId}/receipts`, { body: {} }), 201);
  return { receiptId: receipt.receipt_id, log };
}

/** A receipt route's answer: status, the cache header, and the body (NDJSON decoded by hand). */
async function fetchPublic(path: string, options: Send = {}) {
  const response = await send(path, { token: null, ...options });
  return { status: response.status, cacheControl: response.headers.get("cache-control"), body: await ndjson(response) };
}

describe("public receipt routes: cached, and limited per address (DESIGN §11)", { timeout: 60_000 }, () => {
  it("a receipt served twice reads storage once: the envelope, the log, the page and a file's evidence are answered from the cache once D1 no longer has the receipt", async () => {
    const { receiptId, log } = await receiptWithFile("cached-receipt");
    const paths = [`/r/${receiptId}.json`, `/r/${receiptId}/events.jsonl`, `/r/${receiptId}`, `/r/${receiptId}?page=2`];
    const first = await Promise.all(paths.map((path) => fetchPublic(path)));
    for (const answer of first) expect(answer).toMatchObject({ status: 200, cacheControl: "public, max-age=31536000, immutable" });
    const file = await fetchPublic(`/r/${receiptId}/files/${log.sha256}`);
    expect(file).toMatchObject({ status: 200, body: "cached-receipt: the gate's log\n" });

    // Storage no longer has the receipt: a route that read it would answer 404 no such receipt.
    await env.DB.prepare("DELETE FROM receipts WHERE id = ?").bind(receiptId).run();
    expect(await Promise.all(paths.map((path) => fetchPublic(path)))).toEqual(first);
    // A query the page does not read is the first page, from the cache too.
    expect(await fetchPublic(`/r/${receiptId}?page=x&cache=busted`)).toEqual(first[2]);
    // The files route keeps what the log names: its file is still served (its bytes from storage), and a
    // digest the log does not name is still "names no such file", not "no such receipt".
    expect(await fetchPublic(`/r/${receiptId}/files/${log.sha256}`)).toEqual(file);
    const unnamed = await send(`/r/${receiptId}/files/${"e".repeat(64)}`, { token: null });
    expect(await errorOf(unnamed)).toMatchObject({ status: 404, message: "the receipt's log names no such file" });
  });

  it("a receipt id with no receipt is a 404 cached briefly: one written meanwhile is not read until it expires", async () => {
    const { receiptId } = await receiptWithFile("cached-404");
    const row = await env.DB.prepare("SELECT * FROM receipts WHERE id = ?").bind(receiptId).first<Record<string, string | number>>();
    const missing = `rc_${sha256Hex("a receipt nobody issued").slice(0, 32)}`;
    const refused = await send(`/r/${missing}.json`, { token: null });
    expect(refused.status).toBe(404);
    expect(refused.headers.get("cache-control")).toBe(`public, max-age=${NOT_FOUND_MAX_AGE_S}`);
    await refused.body?.cancel();
    // A row under that id now (a copy of a real one): the cached 404 still answers.
    await env.DB.prepare("INSERT INTO receipts (id, loop_id, kind, head_seq, head_hash, keyid, envelope, issued_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
      .bind(missing, row?.loop_id, row?.kind, row?.head_seq, row?.head_hash, row?.keyid, row?.envelope, row?.issued_at)
      .run();
    expect((await send(`/r/${missing}.json`, { token: null })).status).toBe(404);
    await env.DB.prepare("DELETE FROM receipts WHERE id = ?").bind(missing).run();
  });

  it("receipt routes and the key set are limited per client address: past the limit 429, another address is answered", async () => {
    const { receiptId } = await receiptWithFile("limited-receipt");
    const vars = low("RECEIPT_RATE_LIMIT");
    const answers = await inOneWindow(async () => {
      const spent = [];
      for (const path of [`/r/${receiptId}.json`, "/.well-known/loopwarden/keys.json", `/r/${receiptId}`]) {
        spent.push((await fetchPublic(path, { address: "192.0.2.44", vars })).status);
      }
      return {
        spent,
        over: await send(`/r/${receiptId}.json`, { token: null, address: "192.0.2.44", vars }),
        keys: await send("/.well-known/loopwarden/keys.json", { token: null, address: "192.0.2.44", vars }),
        elsewhere: await fetchPublic(`/r/${receiptId}.json`, { address: "192.0.2.45", vars }),
      };
    });
    expect(answers.spent).toEqual([200, 200, 200]);
    expect(await errorOf(answers.over)).toMatchObject({ status: 429, code: "rate_limited", retryAfter: String(RATE_LIMIT_PERIOD_S) });
    expect((await errorOf(answers.keys)).status).toBe(429);
    expect(answers.elsewhere.status).toBe(200);
  });
});
