import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { MAX_JSON_BODY_BYTES, MAX_TEST_SET_BODY_BYTES } from "../../worker/src/app.js";
import { loopIdFor } from "../../worker/src/http/loop-access.js";
import { OWNER_TEAM } from "../../worker/src/http/auth.js";
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
  projectionRows,
  proposeAndLease,
  readLoopObject,
} from "./fixtures.js";

// DESIGN §4.7: malformed, oversized or unknown requests get a 4xx with a machine-readable error and
// change nothing — no event, no row, no object with a schema.

const [A, B] = TEST_IDS;
const UNKNOWN_ID = `lp_${"0f".repeat(12)}`;

interface ErrorEnvelope {
  error: { code: string; message: string; issues?: { path: string; message: string }[] };
}

async function expectError(response: Response, status: number, code: string): Promise<ErrorEnvelope["error"]> {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toContain("application/json");
  const body = (await response.json()) as ErrorEnvelope;
  expect(body).toEqual({ error: { code, message: expect.any(String), ...(body.error.issues ? { issues: expect.any(Array) } : {}) } });
  expect(body.error.message.length).toBeGreaterThan(0);
  return body.error;
}

function jsonPost(path: string, text: string): Promise<Response> {
  return call(path, { method: "POST", headers: { "content-type": "application/json" }, body: text });
}

/** A JSON body of more than 1 MiB: a candidate whose proposer command is padded past the cap. */
function oversizedBody(): Uint8Array {
  const body = { ...candidateBody("oversized"), proposer: { kind: "command", command: "x".repeat(MAX_JSON_BODY_BYTES) } };
  return new TextEncoder().encode(JSON.stringify(body));
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

/** Everything a request could have changed for a loop id: its object's log and tables, and its D1 rows. */
async function footprintOf(loopId: string) {
  await drainOutbox(loopId);
  const object = await readLoopObject(loopId);
  return { tables: object.tables, log: await logOf(loopId), rows: await projectionRows(loopId) };
}

const EMPTY = { tables: [], log: { events: 0, head: null }, rows: { loops: 0, candidates: 0, events: 0 } };

describe("bad input against an existing loop changes nothing", () => {
  let loopId = "";
  let leaseId = "";

  beforeAll(async () => {
    loopId = (await createLoop("existing", [A, B])).loop_id;
    leaseId = (await proposeAndLease(loopId, "existing")).lease_id;
  });

  const cases: { name: string; status: number; code: string; send: () => Promise<Response>; issuePath?: string }[] = [
    {
      name: "malformed JSON proposing a candidate",
      status: 400,
      code: "invalid_json",
      send: () => jsonPost(`/v1/loops/${loopId}/candidates`, '{"idempotency_key": "abc'),
    },
    { name: "an empty body asking for a lease", status: 400, code: "invalid_json", send: () => jsonPost(`/v1/loops/${loopId}/leases`, "") },
    {
      name: "a candidate whose commit is not a commit id",
      status: 400,
      code: "invalid_request",
      issuePath: "commit",
      send: () => postJson(`/v1/loops/${loopId}/candidates`, { ...candidateBody("bad-commit"), commit: "HEAD" }),
    },
    {
      name: "a candidate with a key the schema does not know",
      status: 400,
      code: "invalid_request",
      issuePath: "(body)",
      send: () => postJson(`/v1/loops/${loopId}/candidates`, { ...candidateBody("extra-key"), verdict: "promoted" }),
    },
    {
      name: "a report whose observation lists a test as both passing and failing",
      status: 400,
      code: "invalid_request",
      issuePath: "observation.tests.failing",
      send: () => postJson(`/v1/leases/${leaseId}/report`, { fencing_token: 1, observation: { ...observationOf([A]), tests: { passing: [A], failing: [A] } } }),
    },
    {
      name: "a report whose gate has a non-integer exit code",
      status: 400,
      code: "invalid_request",
      issuePath: "observation.gates.0.exit_code",
      send: () => {
        const observation = observationOf([]);
        return postJson(`/v1/leases/${leaseId}/report`, {
          fencing_token: 1,
          observation: { ...observation, gates: [{ ...observation.gates[0], exit_code: 0.5 }] },
        });
      },
    },
    {
      name: "an over-1-MiB body with Content-Length",
      status: 413,
      code: "body_too_large",
      send: () => call(`/v1/loops/${loopId}/candidates`, { method: "POST", headers: { "content-type": "application/json" }, body: oversizedBody() }),
    },
    {
      name: "an over-1-MiB body streamed without Content-Length",
      status: 413,
      code: "body_too_large",
      send: () =>
        call(`/v1/loops/${loopId}/candidates`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: chunked(oversizedBody()),
          duplex: "half",
        } as RequestInit),
    },
    {
      name: "an over-4-MiB report (the route's own cap) streamed without Content-Length",
      status: 413,
      code: "body_too_large",
      send: () => {
        const padded = {
          fencing_token: 1,
          observation: { ...observationOf([]), tests: { passing: Array.from({ length: 240_000 }, (_v, i) => `t${i}`.padEnd(20, "x")), failing: [] } },
        };
        return call(`/v1/leases/${leaseId}/report`, {
          method: "POST",
          body: chunked(new TextEncoder().encode(JSON.stringify(padded))),
          duplex: "half",
        } as RequestInit);
      },
    },
    {
      name: "a report whose tests are a difference from another test set than t0's collected set",
      status: 422,
      code: "invalid_observation",
      send: () =>
        postJson(`/v1/leases/${leaseId}/report`, {
          fencing_token: 1,
          observation: { ...observationOf([]), tests: { base: "0".repeat(64), added: [], removed: [], failing: [], skipped: [] } },
        }),
    },
    {
      name: "a lease id of this loop that was never granted",
      status: 404,
      code: "lease_not_found",
      send: () => postJson(`/v1/leases/${loopId}-L99/report`, { fencing_token: 99, observation: observationOf([]) }),
    },
  ];

  it.each(cases)("$name → $status $code", async ({ send, status, code, issuePath }) => {
    const before = await footprintOf(loopId);
    expect(before.log.events).toBeGreaterThan(0);
    const error = await expectError(await send(), status, code);
    if (issuePath) expect(error.issues?.map((issue) => issue.path)).toContain(issuePath);
    expect(await footprintOf(loopId)).toEqual(before);
  });
});

describe("bad input that names no existing loop creates nothing", () => {
  const cases: { name: string; status: number; code: string; send: () => Promise<Response>; loopId: string; issuePath?: string }[] = [
    { name: "GET an unknown loop", status: 404, code: "not_found", loopId: UNKNOWN_ID, send: () => call(`/v1/loops/${UNKNOWN_ID}`) },
    { name: "GET the events of an unknown loop", status: 404, code: "not_found", loopId: UNKNOWN_ID, send: () => call(`/v1/loops/${UNKNOWN_ID}/events`) },
    {
      name: "propose to an unknown loop",
      status: 404,
      code: "not_found",
      loopId: UNKNOWN_ID,
      send: () => postJson(`/v1/loops/${UNKNOWN_ID}/candidates`, candidateBody("unknown")),
    },
    {
      name: "lease from an unknown loop",
      status: 404,
      code: "not_found",
      loopId: UNKNOWN_ID,
      send: () => postJson(`/v1/loops/${UNKNOWN_ID}/leases`, { runner_id: "laptop" }),
    },
    {
      name: "an artifact intent for an unknown loop",
      status: 404,
      code: "not_found",
      loopId: UNKNOWN_ID,
      send: () => postJson(`/v1/loops/${UNKNOWN_ID}/artifacts`, { sha256: "a".repeat(64), size: 1, content_type: "text/plain" }),
    },
    {
      name: "report under a lease of an unknown loop",
      status: 404,
      code: "not_found",
      loopId: UNKNOWN_ID,
      send: () => postJson(`/v1/leases/${UNKNOWN_ID}-L1/report`, { fencing_token: 1, observation: observationOf([]) }),
    },
    { name: "GET a malformed loop id", status: 404, code: "not_found", loopId: "lp_NOT-HEX", send: () => call("/v1/loops/lp_NOT-HEX") },
    {
      name: "propose to a malformed loop id",
      status: 404,
      code: "not_found",
      loopId: "loop-1",
      send: () => postJson("/v1/loops/loop-1/candidates", candidateBody("malformed")),
    },
    {
      name: "heartbeat on a malformed lease id",
      status: 404,
      code: "lease_not_found",
      loopId: "lp_x",
      send: () => postJson("/v1/leases/lp_x-L1/heartbeat", { fencing_token: 1 }),
    },
    {
      name: "create with malformed JSON",
      status: 400,
      code: "invalid_json",
      loopId: loopIdFor("loop-key-truncated", OWNER_TEAM),
      send: () => jsonPost("/v1/loops", JSON.stringify(createLoopBody("truncated", [A])).slice(0, -2)),
    },
    {
      name: "create with a bad duration at contract.gates[0].timeout",
      status: 400,
      code: "invalid_request",
      issuePath: "contract.gates.0.timeout",
      loopId: loopIdFor("loop-key-bad-duration", OWNER_TEAM),
      send: () => postJson("/v1/loops", createLoopBody("bad-duration", [A], { gates: [{ name: "unit", run: "npm test", timeout: "2 minutes" }] })),
    },
    {
      name: "create with a contract key the contract does not have",
      status: 400,
      code: "invalid_request",
      issuePath: "contract",
      loopId: loopIdFor("loop-key-unknown-key", OWNER_TEAM),
      send: () =>
        postJson("/v1/loops", { ...createLoopBody("unknown-key", [A]), contract: { ...createLoopBody("unknown-key", [A]).contract, metrics: { name: "ms" } } }),
    },
    {
      name: "create with an over-4-MiB body (the route's own cap) streamed without Content-Length",
      status: 413,
      code: "body_too_large",
      loopId: loopIdFor("loop-key-huge", OWNER_TEAM),
      send: () => {
        const body = createLoopBody("huge", [A], { objective: "y".repeat(MAX_TEST_SET_BODY_BYTES) });
        return call("/v1/loops", { method: "POST", body: chunked(new TextEncoder().encode(JSON.stringify(body))), duplex: "half" } as RequestInit);
      },
    },
  ];

  it.each(cases)("$name → $status $code", async ({ send, status, code, issuePath, loopId }) => {
    const loopsBefore = await env.DB.prepare("SELECT COUNT(*) AS n FROM loops").first<{ n: number }>();
    const error = await expectError(await send(), status, code);
    if (issuePath) expect(error.issues?.map((issue) => issue.path)).toContain(issuePath);
    // The object the id would address has no schema at all, and D1 has nothing for it.
    expect(await footprintOf(loopId)).toEqual(EMPTY);
    expect(await env.DB.prepare("SELECT COUNT(*) AS n FROM loops").first<{ n: number }>()).toEqual(loopsBefore);
  });

  it("names the unknown key in the issue's message", async () => {
    const body = createLoopBody("unknown-key-message", [A]);
    const response = await postJson("/v1/loops", { ...body, contract: { ...body.contract, budget: { wall: "8h" } } });
    const error = await expectError(response, 400, "invalid_request");
    expect(error.issues).toEqual([{ path: "contract", message: expect.stringContaining("budget") }]);
  });

  it("answers an unknown route with the JSON envelope too", async () => {
    await expectError(await call("/v1/nowhere"), 404, "not_found");
  });
});
