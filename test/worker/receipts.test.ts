import { env } from "cloudflare:workers";
import { createExecutionContext, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { canonicalJson } from "#shared/canonical-json.js";
import { sha256Hex } from "#shared/hash.js";
import { foldEvents, LoopEvent } from "#shared/engine/index.js";
import {
  fromBase64,
  IN_TOTO_PAYLOAD_TYPE,
  jwkThumbprint,
  KeySet,
  receiptStatement,
  ReceiptStatement,
  signEnvelope,
  verifyReceipt,
  type Ed25519Verify,
  type Envelope,
} from "#shared/receipts/index.js";
import { ReceiptIssued, LoopSummary } from "#shared/wire/api.js";
import { artifactKey } from "../../worker/src/artifacts/artifact-store.js";
import { app } from "../../worker/src/app.js";
import { receiptKeyOf } from "../../worker/src/receipt-keys.js";
import type { LoopObject } from "../../worker/src/loop/loop-object.js";
import { OWNER_CALLER, call, createLoop, createLoopBody, loopObject, observationOf, postJson, proposeAndLease } from "./fixtures.js";

// Receipts from the coordinator (DESIGN §8, §9): issued at the halt and on demand, served by an
// unguessable id with the log they sign and the keys that verify them, and valid under the verifier
// that re-derives every verdict.

const verifyEd25519: Ed25519Verify = async (key, message, signature) => {
  const imported = await crypto.subtle.importKey("jwk", { kty: key.kty, crv: key.crv, x: key.x }, { name: "Ed25519" }, false, ["verify"]);
  return crypto.subtle.verify({ name: "Ed25519" }, imported, signature, message);
};

async function fetchReceipt(id: string): Promise<{ envelope: Envelope; events: Record<string, unknown>[]; keys: KeySet; headers: Headers }> {
  const envelopeResponse = await call(`/r/${id}.json`);
  expect(envelopeResponse.status).toBe(200);
  const log = await call(`/r/${id}/events.jsonl`);
  expect(log.status).toBe(200);
  const lines = new TextDecoder()
    .decode(await log.arrayBuffer())
    .trim()
    .split("\n");
  return {
    envelope: (await envelopeResponse.json()) as Envelope,
    events: lines.map((line) => JSON.parse(line) as Record<string, unknown>),
    keys: KeySet.parse(await (await call("/.well-known/loopwarden/keys.json")).json()),
    headers: envelopeResponse.headers,
  };
}

/** A loop of the fixture suite driven to success: one candidate fixes the one failing test. */
async function haltedLoop(key: string) {
  const loop = await createLoop(key, ["parse.empty"]);
  const lease = await proposeAndLease(loop.loop_id, key);
  const report = await postJson(`/v1/leases/${lease.lease_id}/report`, { fencing_token: lease.fencing_token, observation: observationOf([]) });
  expect(report.status).toBe(200);
  return LoopSummary.parse(((await report.json()) as { loop: unknown }).loop);
}

describe("receipts", () => {
  it("a loop that halts gets its final receipt, which verifies against the published keys and re-derives every verdict", async () => {
    const loop = await haltedLoop("final");
    expect(loop).toMatchObject({ status: "halted", halt: { halt_reason: "success_condition_met" }, receipt_id: expect.stringMatching(/^rc_[0-9a-f]{32}$/) });
    const receipt = await fetchReceipt(loop.receipt_id ?? "");
    expect(receipt.headers.get("Cache-Control")).toBe("public, max-age=31536000, immutable");
    const result = await verifyReceipt({ ...receipt, verify: verifyEd25519 });
    expect(result.first_failure).toBeNull();
    const signed = result.statement?.predicate.log;
    expect(result.statement?.predicate).toMatchObject({ kind: "final", loop_id: loop.loop_id, best: { candidate_id: "c1", failing: 0 } });
    // The receipt signs the log up to the halt; its own receipt_issued event comes after, as the loop's head.
    expect(receipt.events.at(-1)).toMatchObject({ ...signed, type: "halted" });
    const full = new TextDecoder()
      .decode(await (await call(`/v1/loops/${loop.loop_id}/events`)).arrayBuffer())
      .trim()
      .split("\n");
    const issued = LoopEvent.parse(JSON.parse(full.at(-1) ?? "{}"));
    expect(issued).toMatchObject({ seq: loop.head.seq, type: "receipt_issued", data: { receipt_id: loop.receipt_id, kind: "final", head: signed } });
  });

  it("issues an interim receipt on demand while the loop runs, over the log as it is", async () => {
    const loop = await createLoop("interim", ["parse.empty", "parse.nested"]);
    const answer = await postJson(`/v1/loops/${loop.loop_id}/receipts`, {});
    expect(answer.status).toBe(201);
    const issued = ReceiptIssued.parse(await answer.json());
    expect(issued.url).toBe(`http://lw.test/r/${issued.receipt_id}`);
    expect(issued.head).toEqual(loop.head);
    const receipt = await fetchReceipt(issued.receipt_id);
    const result = await verifyReceipt({ ...receipt, verify: verifyEd25519 });
    expect(result.ok).toBe(true);
    expect(result.statement?.predicate).toMatchObject({ kind: "interim", halt: null, confirm: null, iterations: { total: 0 } });
    // The loop goes on: an interim receipt decides nothing.
    expect((await proposeAndLease(loop.loop_id, "interim-next")).job.candidate_id).toBe("c1");
  });

  it("publishes every key with its lifetime, and each verifies only what its lifetime covers: the retired key what it signed up to its not_after, the revoked key nothing", async () => {
    const served = (await (await call("/.well-known/loopwarden/keys.json")).json()) as { keys: Record<string, unknown>[] };
    // The members are there in the served JSON, null where there is no bound.
    for (const key of served.keys) expect(Object.keys(key)).toEqual(expect.arrayContaining(["status", "not_before", "not_after"]));
    const keys = KeySet.parse(served);
    expect(keys.keys.map((key) => key.status)).toEqual(["active", "retired", "revoked"]);
    for (const key of keys.keys) expect(key.kid).toBe(jwkThumbprint(key));
    const active = await receiptKeyOf(env);
    const retired = await receiptKeyOf({ RECEIPT_SIGNING_KEY: env.TEST_RETIRED_SIGNING_KEY });
    const revoked = await receiptKeyOf({ RECEIPT_SIGNING_KEY: env.TEST_REVOKED_SIGNING_KEY });
    if (!active || !retired || !revoked || !env.RECEIPT_KEY_NOT_BEFORE) throw new Error("a test key is missing");
    expect(keys.keys).toMatchObject([
      { kid: active.publicJwk.kid, status: "active", not_before: env.RECEIPT_KEY_NOT_BEFORE, not_after: null },
      { kid: retired.publicJwk.kid, status: "retired", not_before: "2025-01-01T00:00:00.000Z", not_after: env.RECEIPT_KEY_NOT_BEFORE },
      { kid: revoked.publicJwk.kid, status: "revoked", not_before: null, not_after: null },
    ]);

    // Receipts over a real loop's log, signed by the retired and revoked keys at a time each one states.
    const loop = await haltedLoop("rotation");
    const lines = new TextDecoder()
      .decode(await (await call(`/v1/loops/${loop.loop_id}/events`)).arrayBuffer())
      .trim()
      .split("\n");
    const events = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((event) => event.type !== "receipt_issued");
    const state = foldEvents(events.map((event) => LoopEvent.parse(event)));
    const last = events.at(-1) as { seq: number; hash: string } | undefined;
    if (!state || !last) throw new Error("no state or events");
    const signedAt = async (key: typeof retired, issued_at: string) => {
      const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at, version: "0.0.9" });
      return verifyReceipt({ envelope: await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, key.signer), events, keys, verify: verifyEd25519 });
    };
    const retiredAt = Date.parse(env.RECEIPT_KEY_NOT_BEFORE);
    // Signed before the rotation, as the coordinator did then: it still verifies.
    const before = await signedAt(retired, new Date(retiredAt - 60_000).toISOString());
    expect(before.first_failure).toBeNull();
    expect(before.key).toMatchObject({ kid: retired.publicJwk.kid, status: "retired" });
    // Signed (it says) after the rotation, as by whoever holds the old key now: refused.
    const after = new Date(retiredAt + 60_000).toISOString();
    expect((await signedAt(retired, after)).first_failure).toBe(
      `signature: key ${retired.publicJwk.kid} (retired, valid from 2025-01-01T00:00:00.000Z to ${env.RECEIPT_KEY_NOT_BEFORE}) was retired at ${env.RECEIPT_KEY_NOT_BEFORE}; this receipt says it was signed at ${after}, after`,
    );
    expect((await signedAt(revoked, new Date(retiredAt).toISOString())).first_failure).toMatch(
      new RegExp(`^signature: key ${revoked.publicJwk.kid} \\(revoked, valid from any time to no end\\) is revoked: it verifies nothing`),
    );
    // The active key's receipts, issued now, lie inside its window.
    const issued = await postJson(`/v1/loops/${loop.loop_id}/receipts`, {});
    const result = await verifyReceipt({ ...(await fetchReceipt(ReceiptIssued.parse(await issued.json()).receipt_id)), verify: verifyEd25519 });
    expect(result.checks.find((check) => check.check === "signature")).toMatchObject({
      ok: true,
      detail: expect.stringMatching(new RegExp(`^Ed25519 signature by key ${active.publicJwk.kid}, signed at \\S+ within its window$`)),
    });
  });

  /** The key set as a deployment configured with `overrides` serves it. */
  async function keysWith(overrides: Record<string, unknown>): Promise<Response> {
    const ctx = createExecutionContext();
    const response = await app.fetch(new Request("http://lw.test/.well-known/loopwarden/keys.json"), { ...env, ...overrides }, ctx);
    await waitOnExecutionContext(ctx);
    return response;
  }

  it("refuses a retired key given without not_after: the key set answers 500 receipt_keys_invalid naming it, rather than publishing a key that verifies nothing", async () => {
    const retired = await receiptKeyOf({ RECEIPT_SIGNING_KEY: env.TEST_RETIRED_SIGNING_KEY });
    if (!retired) throw new Error("no retired key");
    const { x } = retired.publicJwk;
    // As the rotation of earlier versions put it: the served key set, the old key still marked active and unbounded.
    const response = await keysWith({ RECEIPT_RETIRED_KEYS: JSON.stringify({ keys: [{ ...retired.publicJwk, status: "active", not_after: null }] }) });
    expect(response.status).toBe(500);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("receipt_keys_invalid");
    expect(body.error.message).toMatch(new RegExp(`^RECEIPT_RETIRED_KEYS: key ${retired.publicJwk.kid} has no not_after`));
    // Marked revoked instead, it is published so, without a window; and RECEIPT_REVOKED_KEYS revokes a retired key too.
    const marked = KeySet.parse(
      await (await keysWith({ RECEIPT_RETIRED_KEYS: JSON.stringify([{ kty: "OKP", crv: "Ed25519", x, status: "revoked" }]) })).json(),
    );
    expect(marked.keys.filter((key) => key.kid === retired.publicJwk.kid)).toMatchObject([{ status: "revoked", not_before: null, not_after: null }]);
    const both = KeySet.parse(
      await (
        await keysWith({
          RECEIPT_RETIRED_KEYS: JSON.stringify([{ kty: "OKP", crv: "Ed25519", x, not_after: "2026-01-01T00:00:00Z" }]),
          RECEIPT_REVOKED_KEYS: JSON.stringify([{ kty: "OKP", crv: "Ed25519", x }]),
        })
      ).json(),
    );
    expect(both.keys.filter((key) => key.kid === retired.publicJwk.kid)).toMatchObject([{ status: "revoked" }]);
    // A RECEIPT_KEY_NOT_BEFORE that is not a date-time is named too.
    const badStart = await keysWith({ RECEIPT_KEY_NOT_BEFORE: "last tuesday" });
    expect(badStart.status).toBe(500);
    expect(((await badStart.json()) as { error: { message: string } }).error.message).toMatch(
      /^RECEIPT_KEY_NOT_BEFORE is "last tuesday", not an ISO 8601 date-time/,
    );
  });

  it("the signing key's not_before is RECEIPT_KEY_NOT_BEFORE, else its private JWK's own not_before (the local coordinator's key), else null", async () => {
    const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
    const jwk = (await crypto.subtle.exportKey("jwk", pair.privateKey)) as JsonWebKey;
    const plain = await receiptKeyOf({ RECEIPT_SIGNING_KEY: JSON.stringify(jwk) });
    expect(plain?.publicJwk).toMatchObject({ status: "active", not_before: null, not_after: null });
    const recorded = await receiptKeyOf({ RECEIPT_SIGNING_KEY: JSON.stringify({ ...jwk, not_before: "2026-02-01T00:00:00.000Z" }) });
    expect(recorded?.publicJwk.not_before).toBe("2026-02-01T00:00:00.000Z");
    const configured = await receiptKeyOf({
      RECEIPT_SIGNING_KEY: JSON.stringify({ ...jwk, not_before: "2026-02-01T00:00:00.000Z" }),
      RECEIPT_KEY_NOT_BEFORE: "2026-03-01T00:00:00Z\n",
    });
    expect(configured?.publicJwk.not_before).toBe("2026-03-01T00:00:00Z");
  });

  it("takes the signing key as PKCS8 PEM too (what `openssl genpkey -algorithm ed25519` prints), named by the same thumbprint", async () => {
    const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
    const pkcs8 = new Uint8Array((await crypto.subtle.exportKey("pkcs8", pair.privateKey)) as ArrayBuffer);
    const body = btoa(String.fromCharCode(...pkcs8));
    const pem = `-----BEGIN PRIVATE KEY-----\n${body.match(/.{1,64}/g)?.join("\n")}\n-----END PRIVATE KEY-----\n`;
    const key = await receiptKeyOf({ RECEIPT_SIGNING_KEY: pem });
    const { x } = (await crypto.subtle.exportKey("jwk", pair.publicKey)) as JsonWebKey;
    if (!key || !x) throw new Error("the PEM key did not load");
    expect(key.publicJwk.kid).toBe(jwkThumbprint({ x }));
    const message = new TextEncoder().encode("signed");
    expect(await verifyEd25519(key.publicJwk, message, await key.signer.sign(message))).toBe(true);
  });

  it("a confirm measurement of t0 against the best is computed here from the readings, and the final receipt is re-issued to carry it", async () => {
    const readings = (center: number, count: number) => Array.from({ length: count }, (_, index) => center * (1 + 0.01 * Math.sin(index)));
    const metric = { run: "node bench.js", name: "parse_ms", direction: "lower" as const, min_effect: "2%", samples: { min: 5, max: 40 } };
    const body = createLoopBody("confirm", [], { mode: "optimize", metric, stop: { max_iterations: 1 } });
    const created = await postJson("/v1/loops", {
      ...body,
      t0: { ...body.t0, observation: { ...body.t0.observation, samples: { best: [], candidate: readings(100, 5) } } },
    });
    expect(created.status).toBe(201);
    const loop = LoopSummary.parse(((await created.json()) as { loop: unknown }).loop);
    const lease = await proposeAndLease(loop.loop_id, "confirm");
    const report = await postJson(`/v1/leases/${lease.lease_id}/report`, {
      fencing_token: lease.fencing_token,
      // Readings of t0, the best its lease names: echoed, as an optimize report must.
      observation: { ...observationOf([]), samples: { best: readings(100, 8), candidate: readings(70, 8) }, compared_to: body.t0.commit },
    });
    const halted = LoopSummary.parse(((await report.json()) as { loop: unknown }).loop);
    expect(halted).toMatchObject({ status: "halted", best: { candidate_id: "c1" }, receipt_id: expect.any(String) });

    const confirm = (candidate: string, count: number) =>
      postJson(`/v1/loops/${loop.loop_id}/confirm`, { candidate_id: candidate, samples: { t0: readings(100, count), best: readings(70, count) } });
    expect(await (await confirm("c1", 3)).json()).toEqual({ status: "need_samples", more: 2, pairs: 3, ttl_ms: expect.any(Number) });
    expect((await confirm("t0", 8)).status).toBe(409);
    const recorded = (await (await confirm("c1", 8)).json()) as { status: string; confirm: { estimate: number; pairs: number }; loop: LoopSummary };
    expect(recorded).toMatchObject({ status: "recorded", confirm: { pairs: 8 } });
    expect(recorded.confirm.estimate).toBeGreaterThan(0.3);
    // A new final receipt, with the figure as its headline; the one issued at the halt stays valid.
    expect(recorded.loop.receipt_id).not.toBe(halted.receipt_id);
    const receipt = await fetchReceipt(recorded.loop.receipt_id ?? "");
    const result = await verifyReceipt({ ...receipt, verify: verifyEd25519 });
    expect(result.first_failure).toBeNull();
    expect(result.statement?.predicate.confirm).toMatchObject({ candidate_id: "c1", estimate: recorded.confirm.estimate, pairs: 8 });
    expect((await verifyReceipt({ ...(await fetchReceipt(halted.receipt_id ?? "")), verify: verifyEd25519 })).ok).toBe(true);

    const other = await createLoop("confirm-fixpoint", ["parse.empty"]);
    const refused = await postJson(`/v1/loops/${other.loop_id}/confirm`, { candidate_id: "c1", samples: { t0: [1], best: [1] } });
    expect(refused.status).toBe(422);
  });

  it("serves without a token the files its signed log names as evidence, t0's included, and nothing else of the loop's", async () => {
    const file = (name: string, text: string) => {
      const bytes = new TextEncoder().encode(text);
      return { bytes, ref: { sha256: sha256Hex(bytes), size: bytes.byteLength, name, content_type: "text/plain; charset=utf-8" } };
    };
    const t0Log = file("gate-unit.log", "t0: 1 failing\n");
    const t0Profile = file("profile.cpuprofile", '{"nodes":[]}');
    const neverStored = file("gone.txt", "never uploaded\n");
    const c1Log = file("gate-unit.log", "c1: all pass\n");
    const unnamed = file("notes.txt", "stored with the loop, named by no observation\n");
    const body = createLoopBody("receipt-files", ["parse.empty"]);
    const created = await postJson("/v1/loops", {
      ...body,
      t0: {
        ...body.t0,
        observation: { ...observationOf(["parse.empty"], t0Log.ref), artifacts: [{ ...t0Profile.ref, content_type: "application/json" }, neverStored.ref] },
      },
    });
    expect(created.status).toBe(201);
    const loopId = LoopSummary.parse(((await created.json()) as { loop: unknown }).loop).loop_id;
    for (const { bytes, ref } of [t0Log, t0Profile, c1Log, unnamed]) {
      const put = await call(`/v1/loops/${loopId}/artifacts/${ref.sha256}?name=${ref.name}`, {
        method: "PUT",
        headers: { "content-type": ref.name.endsWith(".cpuprofile") ? "application/json" : ref.content_type, "content-length": String(bytes.byteLength) },
        body: bytes,
      });
      expect(put.status, await put.text()).toBeLessThan(300);
    }
    const lease = await proposeAndLease(loopId, "receipt-files");
    const report = await postJson(`/v1/leases/${lease.lease_id}/report`, { fencing_token: lease.fencing_token, observation: observationOf([], c1Log.ref) });
    const halted = LoopSummary.parse(((await report.json()) as { loop: unknown }).loop);
    const files = (sha256: string) => call(`/r/${halted.receipt_id}/files/${sha256}`, {}, null);

    const served = await files(t0Log.ref.sha256);
    expect(served.status).toBe(200);
    expect(served.headers.get("content-type")).toBe("text/plain; charset=utf-8");
    expect(served.headers.get("x-content-type-options")).toBe("nosniff");
    expect(await served.text()).toBe("t0: 1 failing\n");
    expect(await (await files(c1Log.ref.sha256)).text()).toBe("c1: all pass\n");
    const profile = await files(t0Profile.ref.sha256);
    expect(profile.headers.get("content-type")).toBe("application/octet-stream");
    expect(profile.headers.get("content-disposition")).toBe('attachment; filename="profile.cpuprofile"');
    await profile.body?.cancel();
    // Stored but named by no observation: not the receipt's to publish. Named but never stored: not served either.
    expect((await files(unnamed.ref.sha256)).status).toBe(404);
    expect((await files(neverStored.ref.sha256)).status).toBe(404);
    expect((await call(`/r/${halted.receipt_id}/files/not-a-digest`, {}, null)).status).toBe(404);
    // The page links them; a query it does not understand is the first page.
    const page = await call(`/r/${halted.receipt_id}?page=x&files=../c1`, {}, null);
    expect(page.status).toBe(200);
    const text = await page.text();
    expect(text).toContain(`<a href="/r/${halted.receipt_id}/files/${c1Log.ref.sha256}">gate-unit.log</a>`);
    expect(text).toContain(`<a href="/r/${halted.receipt_id}/files/${t0Profile.ref.sha256}">profile.cpuprofile</a>`);
    expect(text).toContain(`loopwarden verify http://lw.test/r/${halted.receipt_id}</code>`);

    // Bytes written over a file after it was verified (same length) are never published as its evidence.
    await env.ARTIFACTS.put(
      artifactKey(loopId, c1Log.ref.sha256),
      c1Log.bytes.map((byte, index) => (index === 0 ? byte ^ 0x20 : byte)),
    );
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const damaged = await files(c1Log.ref.sha256);
      expect(damaged.status).toBe(404);
      expect(((await damaged.json()) as { error: { code: string } }).error.code).toBe("artifact_damaged");
    } finally {
      warn.mockRestore();
    }
  });

  it("answers 404 for an unknown or malformed receipt id, and stores nothing", async () => {
    for (const path of [`/r/rc_${"0".repeat(32)}.json`, `/r/rc_${"0".repeat(32)}/events.jsonl`, "/r/rc_nothex.json", "/r/../v1/loops.json"]) {
      const response = await call(path);
      expect(response.status, path).toBe(404);
    }
  });

  it("signs the statement's canonical JSON, whose subjects are the best and t0 commits", async () => {
    const loop = await haltedLoop("subjects");
    const { envelope } = await fetchReceipt(loop.receipt_id ?? "");
    const payload = new TextDecoder().decode(fromBase64(envelope.payload));
    const statement = ReceiptStatement.parse(JSON.parse(payload));
    expect(payload).toBe(canonicalJson(statement));
    expect(statement.subject.map((subject) => subject.name)).toEqual([`loop-subjects@best`, `loop-subjects@t0`]);
    expect(statement.predicate.repository).toBeNull();
  });

  it("names the repository its runner gave as the subjects' name", async () => {
    const body = { ...createLoopBody("named-repo", []), repository: "https://github.com/acme/parser.git" };
    const created = await postJson("/v1/loops", body);
    const loop = LoopSummary.parse(((await created.json()) as { loop: unknown }).loop);
    const { envelope } = await fetchReceipt(loop.receipt_id ?? "");
    const statement = ReceiptStatement.parse(JSON.parse(new TextDecoder().decode(fromBase64(envelope.payload))));
    expect(statement.subject.map((subject) => subject.name)).toEqual(["https://github.com/acme/parser.git@best", "https://github.com/acme/parser.git@t0"]);
    expect(statement.predicate.repository).toBe("https://github.com/acme/parser.git");
    const state = await runInDurableObject(
      loopObject(loop.loop_id),
      (_instance, storage) => storage.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM events WHERE type = 'receipt_issued'").one().n,
    );
    expect(state).toBe(1);
  });
});

describe("a revoked signing key signs nothing (DESIGN §9)", () => {
  it("a loop's receipt is refused 501 signing_unconfigured, naming the key, while the key set calls its signing key revoked; nothing is appended", async () => {
    const loop = await createLoop("revoked-signer", ["parse.empty"]);
    const active = await receiptKeyOf(env);
    if (!active) throw new Error("no signing key");
    const revoked = { ...env, RECEIPT_REVOKED_KEYS: JSON.stringify([{ kty: "OKP", crv: "Ed25519", x: active.publicJwk.x }]) };
    const answer = await runInDurableObject(loopObject(loop.loop_id), async (instance: LoopObject) => {
      // The object's receipts as a deployment that revoked its own signing key would sign them.
      (instance as unknown as { receipts: { env: Env } }).receipts.env = revoked;
      const before = (await instance.events({ caller: OWNER_CALLER, after: 0, limit: 1_000 })) as { ok: true; events: string[] };
      const issued = await instance.issueReceipt({ caller: OWNER_CALLER, kind: "interim" });
      const after = (await instance.events({ caller: OWNER_CALLER, after: 0, limit: 1_000 })) as { ok: true; events: string[] };
      return { issued, appended: after.events.length - before.events.length };
    });
    expect(answer.issued).toMatchObject({ ok: false, code: "signing_unconfigured", message: expect.stringContaining(`${active.publicJwk.kid} is revoked`) });
    expect(answer.appended).toBe(0);
  });
});
