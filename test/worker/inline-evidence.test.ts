import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import { INLINE_EVIDENCE_MAX_BYTES } from "#shared/wire/api.js";
import type { ArtifactRef } from "#shared/wire/observation.js";
import { app } from "../../worker/src/app.js";
import { artifactKey } from "../../worker/src/artifacts/artifact-store.js";
import { TEST_IDS, call, candidateBody, createLoop, logOf, ndjson, observationOf, postJson, proposeAndLease } from "./fixtures.js";

// A report's inline evidence (DESIGN §10): a gate's log sent with the report instead of uploaded before
// it. The coordinator checks the bytes against the digest and size the observation cites and stores and
// records them as an upload would, before it decides; any refusal leaves no event, no row, no object.

const [A, C] = [TEST_IDS[0], TEST_IDS[2]];
const encode = (text: string) => new TextEncoder().encode(text);
const base64 = (bytes: Uint8Array) => btoa(Array.from(bytes, (byte) => String.fromCharCode(byte)).join(""));

function logRef(bytes: Uint8Array, name = "gate-unit.log"): ArtifactRef {
  return { sha256: sha256Hex(bytes), size: bytes.length, name, content_type: "text/plain; charset=utf-8" };
}

async function errorOf(response: Response): Promise<{ code: string; message: string }> {
  return ((await response.json()) as { error: { code: string; message: string } }).error;
}

/** What a refused report must leave as it was: the loop's log, its artifact rows, its objects. */
async function traces(loopId: string) {
  const rows = await env.DB.prepare("SELECT sha256 FROM artifacts WHERE loop_id = ? ORDER BY sha256").bind(loopId).all();
  const objects = (await env.ARTIFACTS.list({ prefix: `loops/${loopId}/` })).objects.map((object) => object.key);
  return { log: await logOf(loopId), rows: rows.results, objects };
}

/** A loop with a candidate leased, failing A and C at t0, so a report that fixes A is promoted. */
async function leased(key: string) {
  const loop = await createLoop(key, [A, C]);
  return { loop, lease: await proposeAndLease(loop.loop_id, key) };
}

function report(leaseId: string, body: unknown): Promise<Response> {
  return postJson(`/v1/leases/${leaseId}/report`, body);
}

/** A report to a worker whose deployment sets `vars` otherwise (a lower quota, S3 mode). */
async function reportWith(vars: Record<string, string>, leaseId: string, body: unknown): Promise<Response> {
  const ctx = createExecutionContext();
  const request = new Request(`http://lw.test/v1/leases/${leaseId}/report`, {
    method: "POST",
    headers: { authorization: `Bearer ${env.OWNER_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const response = await app.fetch(request, { ...env, ...vars }, ctx);
  await waitOnExecutionContext(ctx);
  return response;
}

describe("a report carrying its gate log inline", () => {
  it("is decided once the log is stored and recorded, as an upload would have; the log downloads byte for byte", async () => {
    const { loop, lease } = await leased("inline-ok");
    const bytes = encode("$ npm test\nok 1 parse.empty\n[loopwarden] exit code 1 in 250 ms\n");
    const log = logRef(bytes);
    const answer = await report(lease.lease_id, {
      fencing_token: lease.fencing_token,
      observation: observationOf([C], log),
      evidence: [{ sha256: log.sha256, base64: base64(bytes) }],
    });
    expect(answer.status, await answer.clone().text()).toBe(200);
    expect(await answer.json()).toMatchObject({ verdict: { decision: "promoted" } });

    const row = await env.DB.prepare("SELECT size, name, content_type, etag FROM artifacts WHERE loop_id = ? AND sha256 = ?")
      .bind(loop.loop_id, log.sha256)
      .first<{ size: number; name: string; content_type: string; etag: string }>();
    expect(row).toMatchObject({ size: bytes.length, name: "gate-unit.log", content_type: "text/plain; charset=utf-8" });
    expect(row?.etag).toBe((await env.ARTIFACTS.head(artifactKey(loop.loop_id, log.sha256)))?.etag);
    const download = await call(`/v1/loops/${loop.loop_id}/artifacts/${log.sha256}`);
    expect(new Uint8Array(await download.arrayBuffer())).toEqual(bytes);
    const usage = await env.DB.prepare("SELECT bytes FROM loop_artifact_usage WHERE loop_id = ?").bind(loop.loop_id).first<{ bytes: number }>();
    expect(usage?.bytes).toBe(bytes.length);
  });

  it("replays a retried report: the same answer, the log recorded once", async () => {
    const { loop, lease } = await leased("inline-retry");
    const bytes = encode("a log sent twice\n");
    const body = {
      fencing_token: lease.fencing_token,
      observation: observationOf([C], logRef(bytes)),
      evidence: [{ sha256: sha256Hex(bytes), base64: base64(bytes) }],
    };
    const first = await report(lease.lease_id, body);
    const events = await logOf(loop.loop_id);
    const again = await report(lease.lease_id, body);
    expect([first.status, again.status]).toEqual([200, 200]);
    expect(await again.json()).toEqual(await first.json());
    expect(await logOf(loop.loop_id)).toEqual(events);
    const rows = await env.DB.prepare("SELECT count(*) AS n FROM artifacts WHERE loop_id = ?").bind(loop.loop_id).first<{ n: number }>();
    expect(rows?.n).toBe(1);
  });

  it("writes nothing again for a retried report whose log storage holds; a damaged one is stored again from the bytes sent", async () => {
    const { loop, lease } = await leased("inline-rewrite");
    const bytes = encode("a log, sent again\n");
    const log = logRef(bytes);
    const body = { fencing_token: lease.fencing_token, observation: observationOf([C], log), evidence: [{ sha256: log.sha256, base64: base64(bytes) }] };
    const key = artifactKey(loop.loop_id, log.sha256);
    expect((await report(lease.lease_id, body)).status).toBe(200);
    const stored = await env.ARTIFACTS.head(key);
    expect((await report(lease.lease_id, body)).status).toBe(200);
    expect((await env.ARTIFACTS.head(key))?.version).toBe(stored?.version);

    // Written over in storage (the same key, other bytes): the next request carrying the log repairs it.
    await env.ARTIFACTS.put(key, encode("damaged bytes, not the log"));
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      expect((await report(lease.lease_id, body)).status).toBe(200);
    } finally {
      warn.mockRestore();
    }
    const download = await call(`/v1/loops/${loop.loop_id}/artifacts/${log.sha256}`);
    expect(new Uint8Array(await download.arrayBuffer())).toEqual(bytes);
  });

  it("takes some logs inline and others uploaded first; one neither sent nor stored is still 422 artifact_missing", async () => {
    const { loop, lease } = await leased("inline-mixed");
    const small = encode("small log\n");
    const uploaded = encode("uploaded before the report\n");
    const observation = observationOf([C], logRef(small));
    observation.gates.push({ name: "lint", exit_code: 0, signal: null, timed_out: false, duration_ms: 10, log: logRef(uploaded, "gate-lint.log") });
    const body = { fencing_token: lease.fencing_token, observation, evidence: [{ sha256: sha256Hex(small), base64: base64(small) }] };
    const before = await traces(loop.loop_id);
    const missing = await report(lease.lease_id, body);
    expect([missing.status, (await errorOf(missing)).code]).toEqual([422, "artifact_missing"]);
    expect((await traces(loop.loop_id)).log).toEqual(before.log);

    expect((await call(`/v1/loops/${loop.loop_id}/artifacts/${sha256Hex(uploaded)}`, { method: "PUT", body: uploaded })).status).toBe(201);
    const accepted = await report(lease.lease_id, body);
    expect(accepted.status, await accepted.clone().text()).toBe(200);
  });
});

describe("a report whose inline evidence is refused stores nothing and decides nothing", () => {
  const refusals: { name: string; status: number; code: string; build(bytes: Uint8Array, log: ArtifactRef): { log: ArtifactRef; evidence: unknown[] } }[] = [
    {
      name: "bytes that do not hash to the digest",
      status: 400,
      code: "digest_mismatch",
      build: (bytes, log) => ({ log: { ...log, sha256: sha256Hex("other bytes") }, evidence: [{ sha256: sha256Hex("other bytes"), base64: base64(bytes) }] }),
    },
    {
      name: "bytes of another size than the observation says",
      status: 400,
      code: "size_mismatch",
      build: (bytes, log) => ({ log: { ...log, size: bytes.length + 1 }, evidence: [{ sha256: log.sha256, base64: base64(bytes) }] }),
    },
    {
      name: "a file the observation does not cite",
      status: 422,
      code: "invalid_evidence",
      build: (_bytes, log) => {
        const other = encode("not cited");
        return { log, evidence: [{ sha256: sha256Hex(other), base64: base64(other) }] };
      },
    },
    {
      name: "the same file twice",
      status: 422,
      code: "invalid_evidence",
      build: (bytes, log) => ({ log, evidence: [1, 2].map(() => ({ sha256: log.sha256, base64: base64(bytes) })) }),
    },
    {
      name: "text that is not base64",
      status: 400,
      code: "invalid_request",
      build: (_bytes, log) => ({ log, evidence: [{ sha256: log.sha256, base64: "not base64!" }] }),
    },
    {
      name: "base64 that does not decode",
      status: 400,
      code: "invalid_evidence",
      build: (_bytes, log) => ({ log, evidence: [{ sha256: log.sha256, base64: "abcde" }] }),
    },
  ];

  for (const refusal of refusals) {
    it(`${refusal.name}: ${refusal.status} ${refusal.code}`, async () => {
      const { loop, lease } = await leased(`inline-${refusal.code}-${refusal.name.length}`);
      const bytes = encode("FAIL parse.nested\n");
      const { log, evidence } = refusal.build(bytes, logRef(bytes));
      const before = await traces(loop.loop_id);
      const refused = await report(lease.lease_id, { fencing_token: lease.fencing_token, observation: observationOf([C], log), evidence });
      expect([refused.status, (await errorOf(refused)).code]).toEqual([refusal.status, refusal.code]);
      expect(await traces(loop.loop_id)).toEqual(before);
    });
  }

  it("a file over the inline limit: 413 artifact_too_large (a larger log is uploaded first)", async () => {
    const { loop, lease } = await leased("inline-large");
    const bytes = new Uint8Array(INLINE_EVIDENCE_MAX_BYTES + 3).fill(65);
    const log = logRef(bytes);
    const before = await traces(loop.loop_id);
    const body = { fencing_token: lease.fencing_token, observation: observationOf([C], log), evidence: [{ sha256: log.sha256, base64: base64(bytes) }] };
    const refused = await report(lease.lease_id, body);
    // The schema bounds the base64 text to the limit, rounded up to whole base64 groups.
    expect(refused.status).toBe(400);
    expect(await traces(loop.loop_id)).toEqual(before);
    const atGroup = new Uint8Array(INLINE_EVIDENCE_MAX_BYTES + 1).fill(66);
    const refusedAtGroup = await report(lease.lease_id, {
      ...body,
      observation: observationOf([C], logRef(atGroup)),
      evidence: [{ sha256: sha256Hex(atGroup), base64: base64(atGroup) }],
    });
    expect([refusedAtGroup.status, (await errorOf(refusedAtGroup)).code]).toEqual([413, "artifact_too_large"]);
    expect(await traces(loop.loop_id)).toEqual(before);
  });

  it("past the loop's quota: 507 quota_exceeded, before a byte is stored", async () => {
    const { loop, lease } = await leased("inline-quota");
    const bytes = encode("x".repeat(200));
    const log = logRef(bytes);
    const before = await traces(loop.loop_id);
    const refused = await reportWith({ LOOP_ARTIFACT_QUOTA_BYTES: "100" }, lease.lease_id, {
      fencing_token: lease.fencing_token,
      observation: observationOf([C], log),
      evidence: [{ sha256: log.sha256, base64: base64(bytes) }],
    });
    expect([refused.status, (await errorOf(refused)).code]).toEqual([507, "quota_exceeded"]);
    expect(await traces(loop.loop_id)).toEqual(before);
  });

  it("in S3 mode: 409 upload_to_storage (runners upload to storage first there)", async () => {
    const { loop, lease } = await leased("inline-s3");
    const bytes = encode("a log\n");
    const log = logRef(bytes);
    const before = await traces(loop.loop_id);
    const s3 = { S3_ENDPOINT: "http://127.0.0.1:9", S3_BUCKET: "b", S3_ACCESS_KEY_ID: "k", S3_SECRET_ACCESS_KEY: "s" };
    const refused = await reportWith(s3, lease.lease_id, {
      fencing_token: lease.fencing_token,
      observation: observationOf([C], log),
      evidence: [{ sha256: log.sha256, base64: base64(bytes) }],
    });
    expect([refused.status, (await errorOf(refused)).code]).toEqual([409, "upload_to_storage"]);
    expect(await traces(loop.loop_id)).toEqual(before);
  });
});

describe("a proposal carrying its bundle inline", () => {
  const bundleBytes = encode("# v2 git bundle\nnot a real bundle, but bytes all the same\n");
  const bundle = { sha256: sha256Hex(bundleBytes), size: bundleBytes.length };
  const evidence = [{ sha256: bundle.sha256, base64: base64(bundleBytes) }];

  it("stores and records the bundle before the proposal is registered; the proposal recorded is the same as one uploaded first", async () => {
    const loop = await createLoop("inline-bundle", [A, C]);
    const body = { ...candidateBody("inline-bundle"), bundle };
    const proposed = await postJson(`/v1/loops/${loop.loop_id}/candidates`, { ...body, evidence });
    expect(proposed.status, await proposed.clone().text()).toBe(201);
    const row = await env.DB.prepare("SELECT size, name, content_type FROM artifacts WHERE loop_id = ? AND sha256 = ?")
      .bind(loop.loop_id, bundle.sha256)
      .first<{ size: number; name: string; content_type: string }>();
    expect(row).toEqual({ size: bundleBytes.length, name: `candidate-${body.commit.slice(0, 10)}.bundle`, content_type: "application/x-git-bundle" });
    const download = await call(`/v1/loops/${loop.loop_id}/artifacts/${bundle.sha256}`);
    expect(new Uint8Array(await download.arrayBuffer())).toEqual(bundleBytes);
    // The bytes are not part of the proposal: not in its event, and a retry without them is the same proposal.
    const events = await ndjson(await call(`/v1/loops/${loop.loop_id}/events?after=0`));
    expect(events).not.toContain(evidence[0]?.base64);
    const retried = await postJson(`/v1/loops/${loop.loop_id}/candidates`, body);
    expect(retried.status).toBe(200);
    expect(await retried.json()).toMatchObject({ replayed: true });
  });

  it("is refused, storing and registering nothing, when the bytes are not the bundle's or there is no bundle", async () => {
    const loop = await createLoop("inline-bundle-bad", [A, C]);
    const before = await traces(loop.loop_id);
    const other = encode("other bytes");
    const mismatch = await postJson(`/v1/loops/${loop.loop_id}/candidates`, {
      ...candidateBody("inline-bundle-bad"),
      bundle,
      evidence: [{ sha256: bundle.sha256, base64: base64(other) }],
    });
    expect([mismatch.status, (await errorOf(mismatch)).code]).toEqual([400, "size_mismatch"]);
    const unnamed = await postJson(`/v1/loops/${loop.loop_id}/candidates`, { ...candidateBody("inline-bundle-bad"), evidence });
    expect([unnamed.status, (await errorOf(unnamed)).code]).toEqual([422, "invalid_evidence"]);
    expect(await traces(loop.loop_id)).toEqual(before);
  });
});
