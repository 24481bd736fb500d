import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import { app } from "../../worker/src/app.js";
import { s3Settings } from "../../worker/src/artifacts/artifact-storage-mode.js";
import { s3Storage } from "../../worker/src/artifacts/artifact-storage-s3.js";
import { TEST_IDS, candidateBody, createLoop, logOf, observationOf, proposeAndLease } from "./fixtures.js";

// Which storage a deployment's artifacts go to (DESIGN §10): the R2 binding unless S3 settings are
// configured; all of them or none, a half-configured S3 mode answered as a 500 that names what is
// missing, never a silent fallback to the binding. S3 mode's own behaviour, against a real S3 server,
// is test/e2e/artifacts-s3.test.ts.

const [A] = TEST_IDS;
const S3 = {
  S3_ENDPOINT: "http://127.0.0.1:9",
  S3_BUCKET: "artifacts",
  S3_ACCESS_KEY_ID: "key-id",
  S3_SECRET_ACCESS_KEY: "secret",
};

/** A request to the worker with `overrides` on its env (a deployment configured otherwise, or a storage stub). */
async function callWith(overrides: Record<string, unknown>, path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${env.OWNER_TOKEN}`);
  const ctx = createExecutionContext();
  const response = await app.fetch(new Request(`http://lw.test${path}`, { ...init, headers }), { ...env, ...overrides }, ctx);
  await waitOnExecutionContext(ctx);
  return response;
}

function intent(sha256: string, size = 10) {
  return { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ sha256, size, content_type: "text/plain" }) };
}

afterEach(() => vi.restoreAllMocks());

/** An R2 binding that is down: every call fails as a storage outage does (not as a refusal of the request). */
function failingBucket(): R2Bucket {
  const down = () => Promise.reject(new Error("R2 is unavailable (simulated outage)"));
  return {
    head: down,
    get: down,
    put: down,
    delete: down,
    list: down,
    createMultipartUpload: down,
    resumeMultipartUpload: () => ({ uploadPart: down, abort: down, complete: down }),
  } as unknown as R2Bucket;
}

async function errorOf(response: Response): Promise<{ code: string; message: string }> {
  return ((await response.json()) as { error: { code: string; message: string } }).error;
}

/** The loop's D1 artifact rows. */
async function rowCount(loopId: string): Promise<number> {
  return (await env.DB.prepare("SELECT COUNT(*) AS n FROM artifacts WHERE loop_id = ?").bind(loopId).first<{ n: number }>())?.n ?? 0;
}

describe("s3Settings", () => {
  it("is off (the binding) with no S3 setting, and on with the four it needs, region auto and URLs valid 15 minutes unless set", () => {
    expect(s3Settings({})).toBeNull();
    expect(s3Settings({ S3_ENDPOINT: " ", S3_BUCKET: "" })).toBeNull();
    expect(s3Settings({ ...S3, S3_ENDPOINT: "https://acct.r2.cloudflarestorage.com/" })).toEqual({
      endpoint: "https://acct.r2.cloudflarestorage.com",
      bucket: "artifacts",
      region: "auto",
      accessKeyId: "key-id",
      secretAccessKey: "secret",
      presignTtlSeconds: 900,
    });
    expect(s3Settings({ ...S3, S3_REGION: "us-east-1", S3_PRESIGN_TTL: "1h" })).toMatchObject({ region: "us-east-1", presignTtlSeconds: 3600 });
  });

  it("refuses a half configuration by naming what is missing, and settings it cannot use by naming them", () => {
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    expect(() => s3Settings({ S3_ENDPOINT: S3.S3_ENDPOINT, S3_BUCKET: "artifacts" })).toThrow(/set S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY as well/);
    expect(() => s3Settings({ S3_REGION: "auto" })).toThrow(/S3_ENDPOINT, S3_BUCKET, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY/);
    expect(() => s3Settings({ ...S3, S3_ENDPOINT: "r2.example.com" })).toThrow(/S3_ENDPOINT = "r2.example.com" is not an http\(s\) origin/);
    expect(() => s3Settings({ ...S3, S3_PRESIGN_TTL: "8d" })).toThrow(/S3_PRESIGN_TTL = "8d" is not a duration from 1s to 7d/);
  });
});

describe("a half-configured S3 mode", () => {
  it("answers every artifact route 501 storage_misconfigured naming the missing settings, and logs it; nothing goes to the binding", async () => {
    const loop = await createLoop("storage-half-configured", [A]);
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const half = { S3_ENDPOINT: S3.S3_ENDPOINT, S3_BUCKET: S3.S3_BUCKET };
    const sha256 = sha256Hex("half");
    const responses = [
      await callWith(half, `/v1/loops/${loop.loop_id}/artifacts`, intent(sha256)),
      await callWith(half, `/v1/loops/${loop.loop_id}/artifacts/${sha256}`),
      await callWith(half, `/v1/loops/${loop.loop_id}/artifacts/${sha256}?name=x`, { method: "PUT", body: "0123456789" }),
    ];
    for (const response of responses) {
      expect(response.status).toBe(501);
      const { error } = (await response.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe("storage_misconfigured");
      expect(error.message).toMatch(/S3 mode is half configured \(S3_ENDPOINT, S3_BUCKET set\): set S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY/);
    }
    expect(logged).toHaveBeenCalledWith(expect.stringMatching(/artifact storage is misconfigured/));
    expect((await env.ARTIFACTS.list({ prefix: `loops/${loop.loop_id}/` })).objects).toEqual([]);
  });
});

describe("S3 mode in workerd", () => {
  it("takes no upload through the worker: a PUT to the coordinator's path is 409 upload_to_storage", async () => {
    const loop = await createLoop("storage-s3-no-through", [A]);
    const response = await callWith(S3, `/v1/loops/${loop.loop_id}/artifacts/${sha256Hex("x")}`, { method: "PUT", body: "0123456789" });
    expect(response.status).toBe(409);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("upload_to_storage");
  });

  it("presigns a single PUT that binds the key, length, content type and SHA-256, and keeps the name as x-amz-meta-name", async () => {
    const settings = s3Settings({ ...S3, S3_PRESIGN_TTL: "2m" });
    if (!settings) throw new Error("S3 settings expected");
    const sha256 = sha256Hex("presigned");
    const target = await s3Storage(settings).uploadUrl({
      key: `loops/l1/sha256/${sha256}`,
      path: `/v1/loops/l1/artifacts/${sha256}`,
      sha256,
      size: 1234,
      contentType: "text/plain; charset=utf-8",
      recordedContentType: "text/plain; charset=utf-8",
      name: "gate-unit.log",
    });
    const url = new URL(target.url);
    expect(url.origin + url.pathname).toBe(`http://127.0.0.1:9/artifacts/loops/l1/sha256/${sha256}`);
    // The SHA-256 is a signed header (storage refuses other bytes), never a query parameter S3 would ignore.
    expect(url.searchParams.get("X-Amz-SignedHeaders")).toBe("content-length;content-type;host;x-amz-checksum-sha256");
    expect(url.searchParams.get("X-Amz-Expires")).toBe("120");
    expect(url.searchParams.get("X-Amz-Credential")).toMatch(/^key-id\/\d{8}\/auto\/s3\/aws4_request$/);
    expect(url.searchParams.get("x-amz-meta-name")).toBe("gate-unit.log");
    expect([...url.searchParams.keys()].filter((key) => /checksum/i.test(key))).toEqual([]);
    // What the runner sends with it: the digest in base64, as S3's checksum header carries it.
    expect(target.headers).toEqual({ "x-amz-checksum-sha256": btoa(String.fromCharCode(...(sha256.match(/../g) ?? []).map((hex) => parseInt(hex, 16)))) });
  });
});

describe("storage that fails", () => {
  const log = { sha256: sha256Hex("a log storage never got"), size: 42, name: "gate-unit.log", content_type: "text/plain; charset=utf-8" };

  it("answers a report citing an artifact it must look up in storage with 502 storage_error, not 500; nothing recorded, nothing appended", async () => {
    const loop = await createLoop("storage-down-report", [A]);
    const lease = await proposeAndLease(loop.loop_id, "storage-down-report");
    const before = await logOf(loop.loop_id);
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const response = await callWith({ ARTIFACTS: failingBucket() }, `/v1/leases/${lease.lease_id}/report`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ fencing_token: lease.fencing_token, observation: observationOf([], log) }),
    });
    expect(response.status).toBe(502);
    expect(await errorOf(response)).toMatchObject({ code: "storage_error", message: expect.stringContaining("simulated outage") });
    expect(await logOf(loop.loop_id)).toEqual(before);
    expect(await rowCount(loop.loop_id)).toBe(0);
  });

  it("answers a proposal citing a bundle it must look up in storage with 502 storage_error; nothing proposed", async () => {
    const loop = await createLoop("storage-down-propose", [A]);
    const before = await logOf(loop.loop_id);
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const response = await callWith({ ARTIFACTS: failingBucket() }, `/v1/loops/${loop.loop_id}/candidates`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...candidateBody("storage-down-propose"), bundle: { sha256: log.sha256, size: log.size } }),
    });
    expect(response.status).toBe(502);
    expect(await errorOf(response)).toMatchObject({ code: "storage_error" });
    expect(await logOf(loop.loop_id)).toEqual(before);
    expect(await rowCount(loop.loop_id)).toBe(0);
  });

  it("answers an intent and a download with 502 storage_error as well", async () => {
    const loop = await createLoop("storage-down-routes", [A]);
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const responses = [
      await callWith({ ARTIFACTS: failingBucket() }, `/v1/loops/${loop.loop_id}/artifacts`, intent(log.sha256, log.size)),
      await callWith({ ARTIFACTS: failingBucket() }, `/v1/loops/${loop.loop_id}/artifacts/${log.sha256}`),
    ];
    for (const response of responses) expect([response.status, (await errorOf(response)).code]).toEqual([502, "storage_error"]);
    expect(await rowCount(loop.loop_id)).toBe(0);
  });
});
