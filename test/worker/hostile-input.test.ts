import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import { ArtifactIntentResponse, UploadedPart } from "#shared/wire/api.js";
import { MAX_JSON_BODY_BYTES, MAX_TEST_SET_BODY_BYTES } from "../../worker/src/app.js";
import { OWNER_TEAM } from "../../worker/src/http/auth.js";
import { loopIdFor } from "../../worker/src/http/loop-access.js";
import { MAX_PUT_BYTES, PART_SIZE } from "../../worker/src/artifacts/artifact-limits.js";
import {
  TEST_IDS,
  call,
  candidateBody,
  createLoop,
  createLoopBody,
  drainOutbox,
  logOf,
  observationOf,
  postJson,
  proposeAndLease,
  readLoopObject,
} from "./fixtures.js";

// DESIGN §4.7 on every mutating route: a body over the route's cap (declared, or streamed without a
// Content-Length), malformed JSON, and well-formed JSON the route's strict schema refuses are each a 4xx
// in the JSON error envelope, and afterwards the loop's log, every D1 table and the R2 bucket are exactly
// as they were. (bad-input.test.ts checks particular refusals in detail; this sweeps every route.)

const [A, B] = TEST_IDS;

/**
 * What one test of this file set up: a loop with a leased and a queued candidate, one artifact, a
 * multipart upload in progress with one part, a team.
 */
const world = { loopId: "", leaseId: "", fencingToken: 0, candidateId: "", teamId: "", tokenId: "", uploadPath: "", partEtag: "" };

/** A stored artifact, and another (with its digest) that is never stored. */
const STORED = new TextEncoder().encode("FAIL parse.nested\nexpected 3, got 4\n");
const UNSTORED = new TextEncoder().encode("FAIL parse.unicode\nexpected é, got e\n");
const UNSTORED_SHA = sha256Hex(UNSTORED);

/** A loop the creation bodies below would create, were one accepted. */
const NEW_LOOP_ID = loopIdFor("loop-key-hostile-new", OWNER_TEAM);

// ---- bodies --------------------------------------------------------------------------------------

const JSON_HEADERS = { "content-type": "application/json" };

/**
 * `body` as JSON padded with whitespace before its closing brace to exactly `size` bytes: still valid
 * JSON, and still a body the route would take, but for its size.
 */
function padded(body: object, size: number): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(body));
  if (json.length > size) throw new Error(`the body is already ${json.length} bytes`);
  const bytes = new Uint8Array(size).fill(0x20);
  bytes.set(json.subarray(0, -1), 0);
  bytes[size - 1] = json[json.length - 1] ?? 0x7d;
  return bytes;
}

/** The same bytes as a stream of 64 KiB chunks, so the request carries no Content-Length. */
function chunked(bytes: Uint8Array): ReadableStream<Uint8Array> {
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.length) return controller.close();
      controller.enqueue(bytes.slice(offset, offset + 65_536));
      offset += 65_536;
    },
  });
}

function send(method: string, path: string, body: BodyInit, headers: Record<string, string> = JSON_HEADERS): Promise<Response> {
  return call(path, { method, headers, body, ...(body instanceof ReadableStream ? { duplex: "half" } : {}) } as RequestInit);
}

// ---- what a refusal looks like, and what it must leave alone --------------------------------------

/** Text a stack trace leaves: `at fn (file:1:2)` frames, `TypeError:`, source paths. */
const STACK_TRACE = /(^|\n)\s*at\s|\bat \S+ \(|\b[A-Z]\w*Error:|\.[cm]?[jt]s:\d+|node_modules/;

async function expectRefusal(response: Response, status: number, code: string): Promise<{ path: string; message: string }[]> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  expect(response.headers.get("content-type")).toContain("application/json");
  expect(text).not.toMatch(STACK_TRACE);
  const body = JSON.parse(text) as { error: { code: string; message: string; issues?: { path: string; message: string }[] } };
  expect(body).toEqual({ error: { code, message: expect.any(String), ...("issues" in body.error ? { issues: expect.any(Array) } : {}) } });
  expect(body.error.message.length).toBeGreaterThan(0);
  return body.error.issues ?? [];
}

const D1_TABLES = ["loops", "candidates", "events_index", "receipts", "teams", "tokens", "artifacts"] as const;

/** Every row of every D1 table (so a revocation, which adds no row, shows too), sorted. */
async function d1Rows(): Promise<Record<string, { count: number; rows: string[] }>> {
  const tables: Record<string, { count: number; rows: string[] }> = {};
  for (const table of D1_TABLES) {
    const count = (await env.DB.prepare(`SELECT COUNT(*) AS n FROM ${table}`).first<{ n: number }>())?.n ?? -1;
    const { results } = await env.DB.prepare(`SELECT * FROM ${table}`).all();
    tables[table] = { count, rows: results.map((row) => JSON.stringify(row)).sort() };
  }
  return tables;
}

/** Every object in the bucket: key, size, etag. */
async function r2Objects(): Promise<{ key: string; size: number; etag: string }[]> {
  const objects: { key: string; size: number; etag: string }[] = [];
  let cursor: string | undefined;
  do {
    const page = await env.ARTIFACTS.list(cursor ? { cursor } : {});
    objects.push(...page.objects.map(({ key, size, etag }) => ({ key, size, etag })));
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return objects.sort((a, b) => a.key.localeCompare(b.key));
}

/** Everything a request could change: the loop's log (drained to D1 first), D1, R2, and the object a creation would make. */
async function footprint() {
  await drainOutbox(world.loopId);
  return { log: await logOf(world.loopId), d1: await d1Rows(), r2: await r2Objects(), newLoopTables: (await readLoopObject(NEW_LOOP_ID)).tables };
}

// ---- the routes ----------------------------------------------------------------------------------

interface Route {
  route: string;
  method: "POST" | "DELETE";
  path: () => string;
  cap: number;
  /** A body the route takes and acts on (creates, appends, revokes) — refused here only for its size. */
  valid: () => object;
  /** Well-formed JSON of the wrong type somewhere, and the issue path that names it. */
  wrongType: () => { body: unknown; path: string };
  /** The status a valid body at exactly the cap answers (it got past every body check). */
  accepted: number;
}

const ROUTES: Route[] = [
  {
    route: "POST /v1/loops",
    method: "POST",
    path: () => "/v1/loops",
    cap: MAX_TEST_SET_BODY_BYTES,
    valid: () => createLoopBody("hostile-new", [A]),
    wrongType: () => {
      const body = createLoopBody("hostile-new", [A]);
      return { body: { ...body, t0: { ...body.t0, commit: 42 } }, path: "t0.commit" };
    },
    accepted: 201,
  },
  {
    route: "POST /v1/loops/:id/candidates",
    method: "POST",
    path: () => `/v1/loops/${world.loopId}/candidates`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => candidateBody("hostile-new"),
    wrongType: () => ({ body: { ...candidateBody("hostile-new"), empty: "no" }, path: "empty" }),
    accepted: 201,
  },
  {
    route: "POST /v1/loops/:id/leases",
    method: "POST",
    path: () => `/v1/loops/${world.loopId}/leases`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ runner_id: "runner-hostile-2" }),
    wrongType: () => ({ body: { runner_id: 7 }, path: "runner_id" }),
    accepted: 200,
  },
  {
    route: "POST /v1/leases/:leaseId/heartbeat",
    method: "POST",
    path: () => `/v1/leases/${world.leaseId}/heartbeat`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ fencing_token: world.fencingToken }),
    wrongType: () => ({ body: { fencing_token: String(world.fencingToken) }, path: "fencing_token" }),
    accepted: 200,
  },
  {
    route: "POST /v1/leases/:leaseId/report",
    method: "POST",
    path: () => `/v1/leases/${world.leaseId}/report`,
    cap: MAX_TEST_SET_BODY_BYTES,
    valid: () => ({ fencing_token: world.fencingToken, observation: observationOf([A]) }),
    wrongType: () => ({ body: { fencing_token: String(world.fencingToken), observation: observationOf([A]) }, path: "fencing_token" }),
    accepted: 200,
  },
  {
    // After the report above the lease is judged, not out: a release taken gets as far as the loop's 409.
    route: "POST /v1/leases/:leaseId/release",
    method: "POST",
    path: () => `/v1/leases/${world.leaseId}/release`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ fencing_token: world.fencingToken }),
    wrongType: () => ({ body: { fencing_token: String(world.fencingToken) }, path: "fencing_token" }),
    accepted: 409,
  },
  {
    // The runner sends `{}`: the route takes no fields.
    route: "POST /v1/loops/:id/receipts",
    method: "POST",
    path: () => `/v1/loops/${world.loopId}/receipts`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({}),
    wrongType: () => ({ body: ["interim"], path: "(body)" }),
    accepted: 201,
  },
  {
    // A check_fixpoint loop has nothing to confirm: a valid body gets as far as the loop's 422.
    route: "POST /v1/loops/:id/confirm",
    method: "POST",
    path: () => `/v1/loops/${world.loopId}/confirm`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ candidate_id: world.candidateId, samples: { t0: [1.5], best: [1.2] } }),
    wrongType: () => ({ body: { candidate_id: world.candidateId, samples: { t0: "fast", best: [1.2] } }, path: "samples.t0" }),
    accepted: 422,
  },
  {
    route: "POST /v1/loops/:id/artifacts",
    method: "POST",
    path: () => `/v1/loops/${world.loopId}/artifacts`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ sha256: UNSTORED_SHA, size: UNSTORED.length, content_type: "text/plain" }),
    wrongType: () => ({ body: { sha256: UNSTORED_SHA, size: String(UNSTORED.length), content_type: "text/plain" }, path: "size" }),
    accepted: 200,
  },
  {
    // The upload holds one small part, not the file its intent declared: a completion taken gets past
    // every body check to the size check, which deletes the object it made (400 size_mismatch).
    route: "POST /v1/loops/:id/artifacts/:sha256/uploads/:uploadId/complete",
    method: "POST",
    path: () => `${world.uploadPath}/complete`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ parts: [{ part_number: 1, etag: world.partEtag }] }),
    wrongType: () => ({ body: { parts: [{ part_number: "1", etag: world.partEtag }] }, path: "parts.0.part_number" }),
    accepted: 400,
  },
  {
    // The route takes no body; the upload named is a real one (a request taken aborts it, or finds it gone).
    route: "DELETE /v1/loops/:id/artifacts/:sha256/uploads/:uploadId",
    method: "DELETE",
    path: () => world.uploadPath,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({}),
    wrongType: () => ({ body: ["abort"], path: "(body)" }),
    accepted: 200,
  },
  {
    route: "POST /v1/teams",
    method: "POST",
    path: () => "/v1/teams",
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ name: "hostile-team-2" }),
    wrongType: () => ({ body: { name: 7 }, path: "name" }),
    accepted: 201,
  },
  {
    route: "POST /v1/tokens",
    method: "POST",
    path: () => "/v1/tokens",
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({ scopes: ["read"], team_id: world.teamId, name: "hostile" }),
    wrongType: () => ({ body: { scopes: "read", team_id: world.teamId }, path: "scopes" }),
    accepted: 201,
  },
  {
    // The route takes no body; the token named is a real one, so a request taken would revoke it.
    route: "DELETE /v1/tokens/:id",
    method: "DELETE",
    path: () => `/v1/tokens/${world.tokenId}`,
    cap: MAX_JSON_BODY_BYTES,
    valid: () => ({}),
    wrongType: () => ({ body: ["revoke"], path: "(body)" }),
    accepted: 200,
  },
];

/** Each route's over-cap body (valid but for its size), built once and sent twice (with and without a length). */
const oversized = new Map<string, Uint8Array>();

function oversizedBody(route: Route): Uint8Array {
  let bytes = oversized.get(route.route);
  if (!bytes) {
    bytes = padded(route.valid(), route.cap + 1);
    oversized.set(route.route, bytes);
  }
  return bytes;
}

interface Case {
  name: string;
  status: number;
  code: string;
  /** The issue path a schema refusal must name. */
  issuePath?: string;
  send: () => Promise<Response>;
}

function jsonCases(route: Route): Case[] {
  const { method } = route;
  return [
    {
      name: `${route.route}: a valid body one byte over its ${route.cap}-byte cap, with Content-Length`,
      status: 413,
      code: "body_too_large",
      send: () => {
        const bytes = oversizedBody(route);
        return send(method, route.path(), bytes, { ...JSON_HEADERS, "content-length": String(bytes.length) });
      },
    },
    {
      name: `${route.route}: the same body streamed without Content-Length`,
      status: 413,
      code: "body_too_large",
      send: () => send(method, route.path(), chunked(oversizedBody(route))),
    },
    {
      name: `${route.route}: malformed JSON (a valid body cut short)`,
      status: 400,
      code: "invalid_json",
      send: () => send(method, route.path(), JSON.stringify(route.valid()).slice(0, -1)),
    },
    {
      name: `${route.route}: a key the schema does not have`,
      status: 400,
      code: "invalid_request",
      issuePath: "(body)",
      send: () => send(method, route.path(), JSON.stringify({ ...route.valid(), verdict: "promoted" })),
    },
    {
      name: `${route.route}: a value of the wrong type`,
      status: 400,
      code: "invalid_request",
      issuePath: route.wrongType().path,
      send: () => send(method, route.path(), JSON.stringify(route.wrongType().body)),
    },
  ];
}

const ARTIFACT_PUT = "PUT /v1/loops/:id/artifacts/:sha256";

const artifactCases: Case[] = [
  {
    name: `${ARTIFACT_PUT}: a Content-Length over ${MAX_PUT_BYTES} bytes`,
    status: 413,
    code: "body_too_large",
    send: async () => {
      // A declared length workerd sends as Content-Length; the refusal comes before a byte is read.
      const body = new FixedLengthStream(MAX_PUT_BYTES + 1);
      return send("PUT", `/v1/loops/${world.loopId}/artifacts/${UNSTORED_SHA}`, body.readable, { "content-type": "text/plain" });
    },
  },
  {
    name: `${ARTIFACT_PUT}: the right bytes streamed without Content-Length`,
    status: 411,
    code: "length_required",
    send: () => send("PUT", `/v1/loops/${world.loopId}/artifacts/${UNSTORED_SHA}`, chunked(UNSTORED), { "content-type": "text/plain" }),
  },
  {
    name: `${ARTIFACT_PUT}: bytes that do not hash to the sha256 they are put under`,
    status: 400,
    code: "digest_mismatch",
    send: async () => {
      // The refusal is logged for the operator: captured here, not printed.
      const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
      try {
        const response = await send("PUT", `/v1/loops/${world.loopId}/artifacts/${UNSTORED_SHA}`, STORED, { "content-type": "text/plain" });
        expect(warn).toHaveBeenCalledWith("loopwarden: artifact upload refused", expect.anything());
        return response;
      } finally {
        warn.mockRestore();
      }
    },
  },
  {
    name: `${ARTIFACT_PUT}: a sha256 that is not a digest`,
    status: 400,
    code: "invalid_parameter",
    send: () => send("PUT", `/v1/loops/${world.loopId}/artifacts/${UNSTORED_SHA.slice(0, 63)}Z`, UNSTORED, { "content-type": "text/plain" }),
  },
  {
    name: `${ARTIFACT_PUT}: a body shorter than its Content-Length`,
    status: 400,
    code: "length_mismatch",
    send: () => send("PUT", `/v1/loops/${world.loopId}/artifacts/${UNSTORED_SHA}`, UNSTORED.slice(0, 10), { "content-length": String(UNSTORED.length) }),
  },
];

const PART_PUT = "PUT /v1/loops/:id/artifacts/:sha256/uploads/:uploadId/parts/:n";

const partCases: Case[] = [
  {
    name: `${PART_PUT}: a Content-Length over the ${PART_SIZE}-byte part size`,
    status: 413,
    code: "body_too_large",
    send: () => send("PUT", `${world.uploadPath}/parts/2`, new FixedLengthStream(PART_SIZE + 1).readable, {}),
  },
  {
    name: `${PART_PUT}: a part streamed without Content-Length`,
    status: 411,
    code: "length_required",
    send: () => send("PUT", `${world.uploadPath}/parts/2`, chunked(UNSTORED), {}),
  },
  {
    name: `${PART_PUT}: a body shorter than its Content-Length`,
    status: 400,
    code: "length_mismatch",
    send: () => send("PUT", `${world.uploadPath}/parts/2`, UNSTORED.slice(0, 10), { "content-length": String(UNSTORED.length) }),
  },
  {
    name: `${PART_PUT}: a part number that is not one`,
    status: 400,
    code: "invalid_parameter",
    send: () => send("PUT", `${world.uploadPath}/parts/0`, UNSTORED, {}),
  },
  {
    name: `${PART_PUT}: an upload that is not in progress`,
    status: 404,
    code: "upload_not_found",
    send: () => send("PUT", `${world.uploadPath.replace(/\/uploads\/[^/]+$/, "/uploads/no-such-upload")}/parts/2`, UNSTORED, {}),
  },
];

const tokenIdCases: Case[] = [
  {
    name: "DELETE /v1/tokens/:id: a token id that is not one",
    status: 400,
    code: "invalid_parameter",
    send: () => call(`/v1/tokens/${world.tokenId.slice(0, -1)}Z`, { method: "DELETE" }),
  },
];

const CASES: Case[] = [...ROUTES.flatMap(jsonCases), ...artifactCases, ...partCases, ...tokenIdCases];

describe("hostile bodies on every mutating route: a 4xx envelope, and nothing changes", () => {
  beforeAll(async () => {
    world.loopId = (await createLoop("hostile", [A, B])).loop_id;
    const lease = await proposeAndLease(world.loopId, "hostile");
    Object.assign(world, { leaseId: lease.lease_id, fencingToken: lease.fencing_token, candidateId: lease.job.candidate_id });
    // A second candidate waits in the queue, so a lease request taken would lease it.
    expect((await postJson(`/v1/loops/${world.loopId}/candidates`, candidateBody("hostile-queued"))).status).toBe(201);
    // One artifact in the bucket, so "R2 unchanged" compares a listing that is not empty.
    expect((await send("PUT", `/v1/loops/${world.loopId}/artifacts/${sha256Hex(STORED)}`, STORED, { "content-type": "text/plain" })).status).toBe(201);
    // A multipart upload (of a file larger than one PUT, never sent whole) with a first part.
    const intent = await postJson(`/v1/loops/${world.loopId}/artifacts`, { sha256: sha256Hex("large"), size: MAX_PUT_BYTES + 1, content_type: "text/plain" });
    const upload = ArtifactIntentResponse.parse(await intent.json());
    if (upload.status !== "multipart") throw new Error(`expected a multipart upload, got ${upload.status}`);
    const part = await send("PUT", upload.part_urls[0] ?? "", STORED, {});
    Object.assign(world, { uploadPath: upload.abort_url, partEtag: UploadedPart.parse(await part.json()).etag });
    const team = await postJson("/v1/teams", { name: "hostile-team" });
    expect(team.status).toBe(201);
    const created = (await team.json()) as { team: { team_id: string }; token: { token_id: string } };
    Object.assign(world, { teamId: created.team.team_id, tokenId: created.token.token_id });
  });

  for (const { name, status, code, issuePath, send: sendCase } of CASES) {
    it(`${name} → ${status} ${code}`, async () => {
      const before = await footprint();
      expect(before.log.events).toBeGreaterThan(0);
      expect(before.r2).toHaveLength(1);
      const issues = await expectRefusal(await sendCase(), status, code);
      if (issuePath) expect(issues.map((issue) => issue.path)).toContain(issuePath);
      expect(await footprint()).toEqual(before);
    });
  }

  it("takes each route's valid body at exactly its cap (streamed): the refusals above were for size and form alone, and would have shown", async () => {
    const before = await footprint();
    for (const route of ROUTES) {
      const response = await send(route.method, route.path(), chunked(padded(route.valid(), route.cap)));
      expect(response.status, `${route.route}: ${await response.clone().text()}`).toBe(route.accepted);
      await response.arrayBuffer();
    }
    expect((await send("PUT", `/v1/loops/${world.loopId}/artifacts/${UNSTORED_SHA}`, UNSTORED, { "content-type": "text/plain" })).status).toBe(201);
    // What the same bodies, taken, changed: the footprint the refusals were compared on sees all of it.
    await drainOutbox(NEW_LOOP_ID);
    const after = await footprint();
    expect(after.log.events).toBeGreaterThan(before.log.events);
    expect(after.newLoopTables).toContain("events");
    for (const [table, grew] of Object.entries({ loops: 1, candidates: 1, teams: 1, tokens: 2, artifacts: 1 })) {
      expect(after.d1[table]?.count, table).toBe((before.d1[table]?.count ?? 0) + grew);
    }
    expect(after.d1.receipts?.count).toBeGreaterThan(before.d1.receipts?.count ?? 0);
    const keys = (objects: { key: string }[]) => objects.map((object) => object.key).sort();
    expect(keys(after.r2)).toEqual(keys([...before.r2, { key: `loops/${world.loopId}/sha256/${UNSTORED_SHA}` }]));
  });
});
