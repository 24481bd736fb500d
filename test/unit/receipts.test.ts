import { webcrypto } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { canonicalJson } from "#shared/canonical-json.js";
import { confirmBest, foldEvents, type EventDraft, type LoopEvent } from "#shared/engine/index.js";
import {
  IN_TOTO_PAYLOAD_TYPE,
  jwkThumbprint,
  KeySet,
  pae,
  receiptStatement,
  signEnvelope,
  verifyReceipt,
  type Envelope,
  type PublicJwk,
  type Signer,
} from "#shared/receipts/index.js";
import { verifyEd25519 } from "../../runner/src/receipts/receipt-crypto.js";
import { verifyCommand } from "../../runner/src/commands/verify.js";
import type { ExecConfinement } from "#shared/wire/confinement.js";
import { verifyIndependently } from "../support/independent-verifier.js";
import { AGENT_OK, commitOf, LoopHarness, observationOf, sealedLog } from "./engine-harness.js";

// Receipts (DESIGN §9): a DSSE envelope around an in-toto statement, signed with Ed25519, over a
// hash-chained log whose every verdict re-derives with the engine. Every tampering must fail, naming
// what failed; the untampered receipt must pass.

/** A fresh key and its key-set entry, with a status and, when given, a window (`not_before`, `not_after`). */
async function makeKey(
  status: "active" | "retired" | "revoked" = "active",
  lifetime: Pick<PublicJwk, "not_before" | "not_after"> = {},
): Promise<{ signer: Signer; jwk: PublicJwk }> {
  const pair = (await webcrypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
  const { x } = await webcrypto.subtle.exportKey("jwk", pair.publicKey);
  if (!x) throw new Error("no public key");
  const kid = jwkThumbprint({ x });
  return {
    jwk: { kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig", status, ...lifetime },
    signer: { kid, sign: async (message) => new Uint8Array(await webcrypto.subtle.sign({ name: "Ed25519" }, pair.privateKey, message)) },
  };
}

/** A real loop's log (three candidates: a fix, a regression, the last fix, halting success), sealed. */
function loopLog(): LoopEvent[] {
  const harness = new LoopHarness(["suite.a", "suite.b"]);
  harness.evaluate("fix-a", ["suite.b"]);
  harness.evaluate("break-c", ["suite.b", "suite.c"]);
  harness.evaluate("fix-b", []);
  return sealedLog(harness.events);
}

/** When the receipts of these tests say they were signed (their `issued_at`), unless a test says otherwise. */
const ISSUED_AT = "2026-12-01T10:00:00.000Z";

async function receiptOf(events: LoopEvent[], signer: Signer, issued_at = ISSUED_AT): Promise<Envelope> {
  const state = foldEvents(events);
  const last = events.at(-1);
  if (!state || !last) throw new Error("empty log");
  const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at, version: "0.1.0" });
  return signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, signer);
}

const asRecords = (events: readonly LoopEvent[]) => JSON.parse(JSON.stringify(events)) as Record<string, unknown>[];

/** Flips one character of base64 text (keeping it base64). */
const flip = (text: string, at: number) => text.slice(0, at) + (text[at] === "A" ? "B" : "A") + text.slice(at + 1);

describe("receipts", async () => {
  const events = loopLog();
  const key = await makeKey();
  const keys: KeySet = { keys: [key.jwk] };
  const envelope = await receiptOf(events, key.signer);
  const verify = (changed: { envelope?: unknown; events?: Record<string, unknown>[]; keys?: KeySet }) =>
    verifyReceipt({ envelope: changed.envelope ?? envelope, events: changed.events ?? asRecords(events), keys: changed.keys ?? keys, verify: verifyEd25519 });

  it("the DSSE spec's PAE example", () => {
    expect(new TextDecoder().decode(pae("http://example.com/HelloWorld", new TextEncoder().encode("hello world")))).toBe(
      "DSSEv1 29 http://example.com/HelloWorld 11 hello world",
    );
  });

  it("an untampered receipt verifies: signature, chain, every verdict re-derived, every attested figure", async () => {
    const result = await verify({});
    expect(result.first_failure).toBeNull();
    expect(result.ok).toBe(true);
    expect(result.checks.map((check) => [check.check, check.ok])).toEqual([
      ["envelope", true],
      ["signature", true],
      ["statement", true],
      ["chain", true],
      ["verdicts", true],
      ["scope", true],
      ["predicate", true],
    ]);
    expect(result.key?.kid).toBe(key.jwk.kid);
    expect(result.statement?.predicate).toMatchObject({ halt: { halt_reason: "success_condition_met" }, iterations: { total: 3, promoted: 2, rejected: 1 } });
  });

  const payload = (statement: (value: Record<string, unknown>) => void) => {
    const decoded = JSON.parse(Buffer.from(envelope.payload, "base64").toString("utf8")) as Record<string, unknown>;
    statement(decoded);
    return Buffer.from(JSON.stringify(decoded)).toString("base64");
  };
  const eventsWith = (change: (list: Record<string, unknown>[]) => void) => {
    const list = asRecords(events);
    change(list);
    return list;
  };

  it.each([
    ["one byte of the payload", () => ({ envelope: { ...envelope, payload: flip(envelope.payload, 40) } }), "signature"],
    [
      "the signed figures (re-encoded payload)",
      () => ({ envelope: { ...envelope, payload: payload((s) => ((s.predicate as { iterations: { total: number } }).iterations.total = 2)) } }),
      "signature",
    ],
    [
      "one byte of the signature",
      () => ({ envelope: { ...envelope, signatures: [{ keyid: key.jwk.kid, sig: flip(envelope.signatures[0]?.sig ?? "", 10) }] } }),
      "signature",
    ],
    ["the payloadType", () => ({ envelope: { ...envelope, payloadType: "application/json" } }), "envelope"],
    ["the keyid alone", () => ({ envelope: { ...envelope, signatures: [{ keyid: "someone-else", sig: envelope.signatures[0]?.sig ?? "" }] } }), "signature"],
    ["one byte of an event", () => ({ events: eventsWith((list) => ((list[4] as { at: string }).at = "2026-03-01T09:00:05.001Z")) }), "chain"],
    ["an event dropped", () => ({ events: eventsWith((list) => list.splice(3, 1)) }), "chain"],
    ["an event duplicated", () => ({ events: eventsWith((list) => list.splice(3, 0, list[3] as Record<string, unknown>)) }), "chain"],
    [
      "two events reordered",
      () => ({ events: eventsWith((list) => list.splice(2, 2, list[3] as Record<string, unknown>, list[2] as Record<string, unknown>)) }),
      "chain",
    ],
    ["the log cut before the signed head", () => ({ events: eventsWith((list) => list.pop()) }), "chain"],
  ])("fails when %s is changed, naming the %s check", async (_what, change, failing) => {
    const result = await verify(change());
    expect(result.ok).toBe(false);
    expect(result.checks.find((check) => check.ok === false)?.check).toBe(failing);
    expect(result.first_failure).toMatch(new RegExp(`^${failing}: `));
  });

  it("fails for a receipt re-signed with a key that is not published", async () => {
    const other = await makeKey();
    const result = await verify({ envelope: await receiptOf(events, other.signer) });
    expect(result.first_failure).toMatch(/^signature: no signature verifies with a published key/);
  });

  it("refuses a published key whose kid is not its own thumbprint", async () => {
    const result = await verify({ keys: { keys: [{ ...key.jwk, kid: "chosen-name" }] } });
    expect(result.first_failure).toMatch(/^signature: /);
  });

  it("still verifies a receipt signed with a key since retired, when it says it was signed by the key's retirement", async () => {
    const retired = await makeKey("retired", { not_before: "2026-01-01T00:00:00.000Z", not_after: "2026-12-31T00:00:00Z" });
    const current = await makeKey("active", { not_before: "2026-12-31T00:00:00Z", not_after: null });
    const old = await receiptOf(events, retired.signer);
    const result = await verify({ envelope: old, keys: { keys: [current.jwk, retired.jwk] } });
    expect(result.first_failure).toBeNull();
    expect(result.checks.find((check) => check.check === "signature")?.detail).toBe(
      `Ed25519 signature by key ${retired.jwk.kid} (retired, valid from 2026-01-01T00:00:00.000Z to 2026-12-31T00:00:00Z), signed at ${ISSUED_AT} within its window`,
    );
  });

  it("refuses a receipt a retired key says it signed after its retirement, naming the key, its status and window, and the signing time", async () => {
    // Whoever holds the retired key signs a receipt dated a year ahead: the key set says the key was retired before.
    const retired = await makeKey("retired", { not_before: "2026-01-01T00:00:00Z", not_after: "2026-06-01T00:00:00Z" });
    const current = await makeKey("active", { not_before: "2026-06-01T00:00:00Z", not_after: null });
    const keys = { keys: [current.jwk, retired.jwk] };
    const later = await verify({ envelope: await receiptOf(events, retired.signer, "2027-12-01T10:00:00.000Z"), keys });
    expect(later.ok).toBe(false);
    expect(later.key).toBeNull();
    expect(later.first_failure).toBe(
      `signature: key ${retired.jwk.kid} (retired, valid from 2026-01-01T00:00:00Z to 2026-06-01T00:00:00Z) was retired at 2026-06-01T00:00:00Z; this receipt says it was signed at 2027-12-01T10:00:00.000Z, after`,
    );
    // The same key's receipt from before its retirement verifies; one from before the key began does not.
    expect((await verify({ envelope: await receiptOf(events, retired.signer, "2026-05-31T23:59:59.999Z"), keys })).first_failure).toBeNull();
    expect((await verify({ envelope: await receiptOf(events, retired.signer, "2025-12-31T00:00:00.000Z"), keys })).first_failure).toBe(
      `signature: key ${retired.jwk.kid} (retired, valid from 2026-01-01T00:00:00Z to 2026-06-01T00:00:00Z) begins at 2026-01-01T00:00:00Z; this receipt says it was signed at 2025-12-31T00:00:00.000Z, before`,
    );
    // An active key with a not_before refuses what says it was signed earlier, and its window accepts an offset time.
    expect((await verify({ envelope: await receiptOf(events, current.signer, "2026-05-01T00:00:00.000Z"), keys })).first_failure).toMatch(
      new RegExp(`^signature: key ${current.jwk.kid} \\(active, valid from 2026-06-01T00:00:00Z to no end\\) begins at`),
    );
    const offset = { keys: [{ ...retired.jwk, not_after: "2026-06-01T02:00:00+02:00" }] };
    expect((await verify({ envelope: await receiptOf(events, retired.signer, "2026-06-01T00:00:00.001Z"), keys: offset })).first_failure).toMatch(/, after$/);
  });

  it("a revoked key verifies nothing, whatever its window; a retired key without not_after is treated as revoked", async () => {
    const revoked = await makeKey("revoked", { not_before: "2026-01-01T00:00:00Z", not_after: "2027-01-01T00:00:00Z" });
    const result = await verify({ envelope: await receiptOf(events, revoked.signer), keys: { keys: [revoked.jwk] } });
    expect(result.ok).toBe(false);
    expect(result.first_failure).toBe(
      `signature: key ${revoked.jwk.kid} (revoked, valid from 2026-01-01T00:00:00Z to 2027-01-01T00:00:00Z) is revoked: it verifies nothing (this receipt says it was signed at ${ISSUED_AT})`,
    );
    const unbounded = await makeKey("retired");
    expect((await verify({ envelope: await receiptOf(events, unbounded.signer), keys: { keys: [unbounded.jwk] } })).first_failure).toBe(
      `signature: key ${unbounded.jwk.kid} (retired, valid from any time to no end) is retired without a not_after (when it was retired), so it verifies nothing (this receipt says it was signed at ${ISSUED_AT})`,
    );
  });

  it("the verifier written from the specs alone agrees: it refuses the revoked key's receipt and the retired key's after its not_after", async () => {
    const revoked = await makeKey("revoked", { not_before: "2026-01-01T00:00:00Z", not_after: null });
    const retired = await makeKey("retired", { not_before: "2026-01-01T00:00:00Z", not_after: "2026-06-01T00:00:00Z" });
    const keys = { keys: [revoked.jwk, retired.jwk] };
    const eventsJsonl = events.map((event) => `${JSON.stringify(event)}\n`).join("");
    const both = async (envelope: Envelope) => ({
      product: (await verify({ envelope, keys })).ok,
      independent: verifyIndependently({ envelope, eventsJsonl, keys }).ok,
    });
    expect(await both(await receiptOf(events, revoked.signer))).toEqual({ product: false, independent: false });
    expect(await both(await receiptOf(events, retired.signer, "2026-06-01T00:00:00.001Z"))).toEqual({ product: false, independent: false });
    expect(await both(await receiptOf(events, retired.signer, "2026-06-01T00:00:00.000Z"))).toEqual({ product: true, independent: true });
  });

  it("a key set from before lifetimes still verifies its active key's receipts; its retired key, which says not when it retired, verifies nothing", async () => {
    // As coordinators served keys before lifetimes: no window, and the active key with or without a status.
    const old = await makeKey();
    const { status: _status, ...bare } = old.jwk;
    const retired = await makeKey("retired");
    const legacy = KeySet.parse({ keys: [bare, retired.jwk] });
    const result = await verify({ envelope: await receiptOf(events, old.signer), keys: legacy });
    expect(result.first_failure).toBeNull();
    expect(result.checks.find((check) => check.check === "signature")?.detail).toBe(`Ed25519 signature by key ${old.jwk.kid}`);
    expect((await verify({ envelope: await receiptOf(events, old.signer), keys: { keys: [old.jwk] } })).ok).toBe(true);
    expect((await verify({ envelope: await receiptOf(events, retired.signer), keys: legacy })).first_failure).toMatch(
      new RegExp(`^signature: key ${retired.jwk.kid} \\(retired, valid from any time to no end\\) is retired without a not_after`),
    );
  });

  it("names the first event whose recorded verdict the engine does not reproduce, in a log re-chained to look intact", async () => {
    // A forger who also controls the log rewrites a rejection into a promotion and re-hashes the chain.
    const forged = events.map((event) => ({ ...event })) as LoopEvent[];
    const index = forged.findIndex((event) => event.type === "verdict" && event.data.decision === "rejected");
    const original = forged[index];
    if (original?.type !== "verdict") throw new Error("no rejection in the log");
    forged[index] = { ...original, data: { ...original.data, decision: "promoted", reason: "fewer_failures" } };
    const rechained = sealedLog(
      forged.map((event) => {
        const { seq: _seq, prev: _prev, hash: _hash, ...draft } = event;
        return draft as EventDraft;
      }),
    );
    const last = rechained.at(-1);
    if (!last) throw new Error("empty");
    // Signed by the real key over the forged head: only re-deriving the verdicts can catch it.
    const state = foldEvents(rechained);
    if (!state) throw new Error("no state");
    const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" });
    const result = await verify({ envelope: await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, key.signer), events: asRecords(rechained) });
    expect(result.first_failure).toBe(
      `verdicts: event ${original.seq}: recorded verdict promoted (fewer_failures) for ${original.data.candidate_id}, recomputed verdict rejected (regressed) for ${original.data.candidate_id}`,
    );
  });

  it("re-derives a confirm measurement from its readings: a recorded figure the readings do not give is named", async () => {
    const harness = new LoopHarness([], {
      mode: "optimize",
      metric: { run: "node bench.js", name: "parse_ms", direction: "lower", min_effect: "2%", samples: { min: 5, max: 40 } },
    });
    const created = harness.events[0];
    if (created?.type !== "loop_created") throw new Error("no loop_created");
    const readings = (center: number, count: number) => Array.from({ length: count }, (_, index) => center * (1 + 0.01 * Math.sin(index)));
    created.data.t0.observation = { ...created.data.t0.observation, samples: { best: [], candidate: readings(100, 5) } };
    harness.state = foldEvents([created]) ?? harness.state;
    harness.propose("faster");
    const leased = harness.lease();
    if (!leased.ok || !leased.value) throw new Error("no lease");
    harness.report(leased.value, {
      ...created.data.t0.observation,
      samples: { best: readings(100, 8), candidate: readings(70, 8) },
      compared_to: leased.value.compare_to?.commit,
    });
    harness.apply(confirmBest(harness.state, { candidate_id: "c1", samples: { t0: readings(100, 8), best: readings(70, 8) } }, harness.now()));
    const honest = sealedLog(harness.events);
    expect((await verify({ envelope: await receiptOf(honest, key.signer), events: asRecords(honest) })).ok).toBe(true);
    // Inflate the headline and re-chain: the readings do not give it.
    const inflated = harness.events.map((draft) => (draft.type === "confirm_measured" ? { ...draft, data: { ...draft.data, estimate: 9 } } : draft));
    const forged = sealedLog(inflated);
    const result = await verify({ envelope: await receiptOf(forged, key.signer), events: asRecords(forged) });
    const seq = forged.findIndex((event) => event.type === "confirm_measured") + 1;
    expect(result.first_failure).toMatch(
      new RegExp(`^verdicts: event ${seq}: cannot be applied \\(recorded confirm of c1 \\(900\\.0% over 8 pairs\\), recomputed confirm of c1`),
    );
  });

  it("verifies a log in which a stale report was re-queued, and names a re-queue the engine would not have made", async () => {
    // Two candidates evaluated at once: c1 is promoted, so c2's report (compared with t0) is re-queued, then judged against c1.
    const harness = new LoopHarness(["suite.a", "suite.b", "suite.c"]);
    harness.propose("fix-a");
    harness.propose("fix-b");
    const leased = [harness.lease("runner-1"), harness.lease("runner-2")].map((outcome) => {
      if (!outcome.ok || !outcome.value) throw new Error("no lease");
      return outcome.value;
    });
    const [one, two] = leased;
    if (!one || !two) throw new Error("no lease");
    const echo = (failing: string[], commit: string | undefined) => ({ ...observationOf(failing), ...(commit ? { compared_to: commit } : {}) });
    harness.report(one, echo(["suite.b", "suite.c"], one.compare_to?.commit));
    expect(harness.report(two, echo(["suite.a", "suite.c"], two.compare_to?.commit))).toMatchObject({ ok: true, value: { decision: "requeued" } });
    const again = harness.lease("runner-2");
    if (!again.ok || !again.value) throw new Error("no lease");
    harness.report(again.value, echo(["suite.c"], again.value.compare_to?.commit));
    const honest = sealedLog(harness.events);
    const result = await verify({ envelope: await receiptOf(honest, key.signer), events: asRecords(honest) });
    expect(result.first_failure).toBeNull();
    expect(result.statement?.predicate).toMatchObject({ best: { candidate_id: "c2" }, iterations: { total: 2, promoted: 2 } });

    const forged = sealedLog(
      harness.events.map((draft) => (draft.type === "lease_requeued" ? { ...draft, data: { ...draft.data, best: draft.data.compare_to } } : draft)),
    );
    const seq = forged.findIndex((event) => event.type === "lease_requeued") + 1;
    const tampered = await verify({ envelope: await receiptOf(forged, key.signer), events: asRecords(forged) });
    expect(tampered.first_failure).toMatch(
      new RegExp(
        `^verdicts: event ${seq}: cannot be applied \\(recorded re-queue of c2 \\(leased against t0, best t0\\), recomputed re-queue of c2 \\(leased against t0, best c1\\)`,
      ),
    );
  });

  it("verifies a log in which a runner released its lease, and names a release of a lease that was not out", async () => {
    // c1's first runner gives its lease back; another leases it (token 2) and fixes one test; c2 then fixes the other.
    const harness = new LoopHarness(["suite.a", "suite.b"]);
    harness.propose("fix-a");
    const first = harness.lease("runner-1");
    if (!first.ok || !first.value) throw new Error("no lease");
    harness.release(first.value);
    const second = harness.lease("runner-2");
    if (!second.ok || !second.value) throw new Error("no lease");
    harness.report(second.value, observationOf(["suite.b"]));
    harness.evaluate("fix-b", []);
    const honest = sealedLog(harness.events);
    const result = await verify({ envelope: await receiptOf(honest, key.signer), events: asRecords(honest) });
    expect(result.first_failure).toBeNull();
    expect(result.statement?.predicate).toMatchObject({ best: { candidate_id: "c2" }, iterations: { total: 2, promoted: 2 } });

    // The same release recorded again, after runner-2 took the job: the lease was no longer out.
    const released = harness.events.findIndex((draft) => draft.type === "lease_released");
    const regranted = harness.events.findIndex((draft, index) => index > released && draft.type === "lease_granted");
    const releasedDraft = harness.events[released];
    if (!releasedDraft) throw new Error("no release");
    const twice = sealedLog([...harness.events.slice(0, regranted + 1), releasedDraft, ...harness.events.slice(regranted + 1)]);
    const tampered = await verify({ envelope: await receiptOf(twice, key.signer), events: asRecords(twice) });
    expect(tampered.first_failure).toMatch(new RegExp(`^verdicts: event ${regranted + 2}: cannot be applied \\(lease lp_\\w+-L1 was already released\\)`));
    // A release under another token than the lease's.
    const wrongToken = sealedLog(
      harness.events.map((draft) => (draft.type === "lease_released" ? { ...draft, data: { ...draft.data, fencing_token: 7 } } : draft)),
    );
    expect((await verify({ envelope: await receiptOf(wrongToken, key.signer), events: asRecords(wrongToken) })).first_failure).toMatch(
      new RegExp(`^verdicts: event ${released + 1}: cannot be applied \\(the engine refuses this release`),
    );
  });

  it("names the attested figure that the log does not support", async () => {
    const last = events.at(-1);
    const state = foldEvents(events);
    if (!state || !last) throw new Error("empty");
    const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" });
    statement.predicate.best.failing = 0;
    statement.predicate.t0.failing = 7;
    const result = await verify({ envelope: await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, key.signer) });
    expect(result.first_failure).toBe("predicate: statement.predicate.t0.failing differs from what the log says");
  });
});

// How each zone was confined (DESIGN §6.7, §9): the predicate says it in words and figures recomputed from
// the log, so an unconfined run is said wherever the receipt is read, and cannot be signed away.

const UNCONFINED_EXEC: ExecConfinement = { mechanism: "none", network: "host" };
const CONFINED_EXEC: ExecConfinement = { mechanism: "bwrap", network: "none" };

/** A loop of two fixes whose agent runs and evaluations were confined as `agent` and `exec` (t0 too). */
function zonedLog(agent: "bwrap" | "none", exec: ExecConfinement): LoopEvent[] {
  const harness = new LoopHarness(["suite.a", "suite.b"], {}, { exec_zone: exec });
  const confinement =
    agent === "bwrap"
      ? {
          mechanism: "bwrap" as const,
          network: "allow" as const,
          allow: ["api.anthropic.com:443"],
          hosts: [{ host: "api.anthropic.com", port: 443, allowed: true, requests: 4, bytes_out: 900, bytes_in: 12_000 }],
        }
      : { mechanism: "none" as const, network: "host" as const };
  harness.evaluate("fix-a", ["suite.b"], { agent: { ...AGENT_OK, confinement } }, { exec_zone: exec });
  harness.evaluate("fix-b", [], { agent: { ...AGENT_OK, confinement } }, { exec_zone: exec });
  return sealedLog(harness.events);
}

describe("receipts say how each zone was confined", async () => {
  const key = await makeKey();
  const keys: KeySet = { keys: [key.jwk] };
  const verifyOf = async (events: LoopEvent[], envelope?: Envelope) =>
    verifyReceipt({ envelope: envelope ?? (await receiptOf(events, key.signer)), events: asRecords(events), keys, verify: verifyEd25519 });

  it.each([
    {
      name: "every run confined by bwrap behind an allowlist",
      events: () => zonedLog("bwrap", CONFINED_EXEC),
      fully: true,
      summary:
        "agent confined by bwrap in 2 of 2 runs (network: allowlist api.anthropic.com:443; 1 host reached, none refused); gates confined by bwrap, network none",
    },
    {
      name: "an agent that ran with isolation: none",
      events: () => zonedLog("none", UNCONFINED_EXEC),
      fully: false,
      summary:
        "the agent ran UNCONFINED in 2 of 2 runs (isolation: none; network: host (unrestricted)); gates ran UNCONFINED in 3 of 3 evaluations (isolation: none, network host)",
    },
    {
      name: "a log of runners older than the zones (no confinement recorded)",
      events: loopLog,
      fully: false,
      summary:
        "3 of 3 agent runs recorded no confinement (a runner older than the agent zone); 4 of 4 evaluations recorded no confinement (a runner older than the exec zone)",
    },
  ])("$name: the predicate says so, and the receipt verifies", async ({ events, fully, summary }) => {
    const log = events();
    const result = await verifyOf(log);
    expect(result.first_failure).toBeNull();
    expect(result.statement?.predicate.confinement).toMatchObject({ fully_confined: fully, summary });
  });

  it("an agent run with mechanism none is counted as unconfined, with its network", async () => {
    const result = await verifyOf(zonedLog("none", CONFINED_EXEC));
    expect(result.statement?.predicate.confinement).toMatchObject({
      fully_confined: false,
      agent: { runs: { bwrap: 0, none: 2, unrecorded: 0, unobserved: 0 }, networks: { none: 0, host: 2, allow: 0 }, hosts: [] },
      exec: { evaluations: { bwrap: 3, none: 0, unrecorded: 0 } },
    });
    expect(result.statement?.predicate.confinement?.summary).toMatch(/^the agent ran UNCONFINED in 2 of 2 runs/);
  });

  it("the hosts contacted are summed over the runs in the predicate", async () => {
    const result = await verifyOf(zonedLog("bwrap", CONFINED_EXEC));
    expect(result.statement?.predicate.confinement?.agent.hosts).toEqual([
      { host: "api.anthropic.com", port: 443, allowed: true, requests: 8, bytes_out: 1_800, bytes_in: 24_000 },
    ]);
  });

  const confinedRun = (list: Record<string, unknown>[]) => {
    const index = list.findIndex((event) => event.type === "candidate_proposed");
    const proposed = list[index] as { data: { agent: { confinement: Record<string, unknown> } } };
    return { index, confinement: proposed.data.agent.confinement };
  };

  it("an agent run's recorded confinement edited in the signed log fails the chain", async () => {
    const log = zonedLog("none", UNCONFINED_EXEC);
    const envelope = await receiptOf(log, key.signer);
    const edited = asRecords(log);
    confinedRun(edited).confinement.mechanism = "bwrap";
    const result = await verifyReceipt({ envelope, events: edited, keys, verify: verifyEd25519 });
    expect(result.first_failure).toMatch(/^chain: /);
  });

  it("an evaluation's recorded exec zone edited, and the log re-chained, fails the chain against the signed head", async () => {
    const log = zonedLog("bwrap", UNCONFINED_EXEC);
    const envelope = await receiptOf(log, key.signer);
    const drafts = log.map(({ seq: _seq, prev: _prev, hash: _hash, ...draft }) => draft as EventDraft);
    const rechained = sealedLog(
      drafts.map((draft) =>
        draft.type === "observation_reported"
          ? { ...draft, data: { ...draft.data, observation: { ...draft.data.observation, exec_zone: CONFINED_EXEC } } }
          : draft,
      ),
    );
    const result = await verifyReceipt({ envelope, events: asRecords(rechained), keys, verify: verifyEd25519 });
    expect(result.first_failure).toMatch(/^chain: the log ends at event \d+ \(\w+\); the receipt signs event/);
  });

  it("a receipt signed over an unconfined log that claims the runs were confined fails the predicate check", async () => {
    // The coordinator's key signs a statement whose confinement is a confined loop's: the log does not bear it out.
    const log = zonedLog("none", CONFINED_EXEC);
    const claimed = foldEvents(zonedLog("bwrap", CONFINED_EXEC));
    const state = foldEvents(log);
    const last = log.at(-1);
    if (!state || !claimed || !last) throw new Error("empty");
    const issuance = { kind: "final" as const, issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" };
    const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, issuance);
    statement.predicate.confinement = receiptStatement(claimed, { seq: last.seq, hash: last.hash }, issuance).predicate.confinement;
    const result = await verifyOf(log, await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, key.signer));
    expect(result.checks.find((check) => check.check === "signature")?.ok).toBe(true);
    expect(result.first_failure).toBe("predicate: statement.predicate.confinement.agent.allow differs from what the log says");
  });

  it("a receipt signed before the zones were recorded still verifies every other figure, and says it attests no confinement", async () => {
    const log = zonedLog("bwrap", CONFINED_EXEC);
    const state = foldEvents(log);
    const last = log.at(-1);
    if (!state || !last) throw new Error("empty");
    const issued = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" });
    const { confinement: _confinement, ...predicate } = issued.predicate;
    const statement = { ...issued, predicate };
    const result = await verifyOf(log, await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, key.signer));
    expect(result.ok).toBe(true);
    expect(result.checks.find((check) => check.check === "predicate")?.detail).toMatch(/attests no confinement/);
    // Any other figure is still checked.
    const forged = structuredClone(statement);
    forged.predicate.iterations.total += 1;
    const refused = await verifyOf(log, await signEnvelope(canonicalJson(forged), IN_TOTO_PAYLOAD_TYPE, key.signer));
    expect(refused.first_failure).toBe("predicate: statement.predicate.iterations.total differs from what the log says");
  });

  describe("loopwarden verify", () => {
    /** Runs `loopwarden verify FILE --events … --key …` on a log's receipt saved as files; answers what it printed. */
    async function verifyFiles(log: LoopEvent[], json: boolean, envelope?: Envelope): Promise<{ code: number; out: string }> {
      const dir = await mkdtemp(path.join(tmpdir(), "loopwarden-verify-"));
      const files = { envelope: path.join(dir, "receipt.json"), events: path.join(dir, "events.jsonl"), key: path.join(dir, "key.json") };
      await writeFile(files.envelope, JSON.stringify(envelope ?? (await receiptOf(log, key.signer))));
      await writeFile(files.events, log.map((event) => `${JSON.stringify(event)}\n`).join(""));
      await writeFile(files.key, JSON.stringify(keys));
      const written: string[] = [];
      const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
        written.push(String(chunk));
        return true;
      });
      try {
        const code = await verifyCommand(files.envelope, { json, quiet: false, events: files.events, key: files.key });
        return { code, out: written.join("") };
      } finally {
        spy.mockRestore();
        await rm(dir, { recursive: true, force: true });
      }
    }

    it("prints the confinement line of an unconfined run beside the verdict, and puts it in --json", async () => {
      const log = zonedLog("none", UNCONFINED_EXEC);
      const human = await verifyFiles(log, false);
      expect(human.code).toBe(0);
      const lines = human.out.trimEnd().split("\n");
      expect(lines.at(-4)).toMatch(/^confinement: the agent ran UNCONFINED in 2 of 2 runs \(isolation: none/);
      // This loop's contract names no scope: the verifier says so, beside the confinement.
      expect(lines.at(-3)).toBe("scope: none — only the default protected set guarded the check");
      // Nor did its creator send a precondition record (DESIGN §6.5): said too.
      expect(lines.at(-2)).toMatch(/^check: precondition not recorded/);
      expect(lines.at(-1)).toMatch(/^valid: final receipt of loop /);
      const json = await verifyFiles(log, true);
      const result = JSON.parse(json.out) as { valid: boolean; confinement: { fully_confined: boolean; summary: string } };
      expect(result.valid).toBe(true);
      expect(result.confinement.fully_confined).toBe(false);
      expect(result.confinement.summary).toMatch(/^the agent ran UNCONFINED/);
    });

    it("says a confinement claim the log does not bear out is not verified", async () => {
      const log = zonedLog("none", CONFINED_EXEC);
      const state = foldEvents(log);
      const last = log.at(-1);
      if (!state || !last) throw new Error("empty");
      const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" });
      statement.predicate.confinement = { ...statement.predicate.confinement, fully_confined: true, summary: "agent confined by bwrap in 2 of 2 runs" };
      const { code, out } = await verifyFiles(log, false, await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, key.signer));
      expect(code).toBe(13);
      expect(out).toContain("confinement (as the receipt claims; not verified): agent confined by bwrap in 2 of 2 runs");
      expect(out).toContain("INVALID: predicate: statement.predicate.confinement.fully_confined differs from what the log says");
    });
  });
});

describe("receipts carry the scope (DESIGN §6.4, §9)", async () => {
  const key = await makeKey();
  const keys: KeySet = { keys: [key.jwk] };
  const t0Commit = commitOf("t0");
  const readingsOf = (paths: string[]) => ({
    protected_files: {},
    coverage_percent: null,
    contract: null,
    changed_paths: { against: t0Commit, paths, total: paths.length },
  });
  /** A scoped loop's drafts: two fixes inside src/, the second halting success. */
  function scopedDrafts(): EventDraft[] {
    const harness = new LoopHarness(["suite.a", "suite.b"], { scope: ["src/**"] });
    harness.evaluate("fix-a", ["suite.b"], {}, { guards: readingsOf(["src/a.js"]) });
    harness.evaluate("fix-b", [], {}, { guards: readingsOf(["src/a.js", "src/b.js"]) });
    return harness.events;
  }
  const verifyOf = async (log: LoopEvent[], envelope?: Envelope) =>
    verifyReceipt({ envelope: envelope ?? (await receiptOf(log, key.signer)), events: asRecords(log), keys, verify: verifyEd25519 });

  it("a scoped loop's receipt attests its scope, and verify re-checks every promoted candidate's changed paths against it", async () => {
    const result = await verifyOf(sealedLog(scopedDrafts()));
    expect(result.first_failure).toBeNull();
    expect(result.statement?.predicate.scope).toEqual(["src/**"]);
    expect(result.checks.find((check) => check.check === "scope")).toEqual({
      check: "scope",
      ok: true,
      detail: "src/**: the changed paths of 2 promoted candidate(s) re-checked, all inside it (the last one changes 2 path(s) since t0)",
    });
  });

  it("a log in which a candidate that changed a path outside the scope was promoted does not verify, even re-sealed and signed", async () => {
    const drafts = scopedDrafts();
    const report = drafts.findLast((draft) => draft.type === "observation_reported");
    if (report?.type !== "observation_reported" || !report.data.observation.guards) throw new Error("no report");
    report.data.observation.guards.changed_paths = { against: t0Commit, paths: [".npmrc", "src/a.js"], total: 2 };
    const result = await verifyOf(sealedLog(drafts));
    expect(result.ok).toBe(false);
    expect(result.first_failure).toMatch(
      /^verdicts: event \d+: recorded verdict promoted \(fewer_failures\) for c2, recomputed verdict rejected \(guard_violated\)/,
    );
  });

  it("a receipt that hides the loop's scope fails the predicate check; one from before scopes says it attests none", async () => {
    const log = sealedLog(scopedDrafts());
    const state = foldEvents(log);
    const last = log.at(-1);
    if (!state || !last) throw new Error("empty");
    const issued = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at: "2026-12-01T10:00:00.000Z", version: "0.1.0" });
    const hidden = { ...issued, predicate: { ...issued.predicate, scope: null } };
    const refused = await verifyOf(log, await signEnvelope(canonicalJson(hidden), IN_TOTO_PAYLOAD_TYPE, key.signer));
    expect(refused.first_failure).toBe("predicate: statement.predicate.scope differs from what the log says");
    const { scope: _scope, ...predicate } = issued.predicate;
    const older = await verifyOf(log, await signEnvelope(canonicalJson({ ...issued, predicate }), IN_TOTO_PAYLOAD_TYPE, key.signer));
    expect(older.ok).toBe(true);
    expect(older.checks.find((check) => check.check === "predicate")?.detail).toMatch(/from before scopes were recorded: it attests no scope\)$/);
  });
});

// Whom a signature is trusted on (DESIGN §9): a receipt URL's own server serves the keys that verify it,
// so without --key the verifier says so and prints the key's fingerprint; --key-fingerprint pins it.
describe("loopwarden verify names the key it trusted, and --key-fingerprint pins it", async () => {
  const key = await makeKey("active", { not_before: "2026-01-01T00:00:00Z", not_after: null });
  const other = await makeKey();
  const log = loopLog();
  const envelope = await receiptOf(log, key.signer);
  const eventsJsonl = log.map((event) => `${JSON.stringify(event)}\n`).join("");
  const id = `rc_${"ab".repeat(16)}`;
  let server: Server;
  let origin: string;
  let dir: string;

  beforeAll(async () => {
    // The receipt's coordinator: its envelope, its log and the key set it serves.
    server = createServer((request, response) => {
      const body =
        request.url === `/r/${id}.json`
          ? JSON.stringify(envelope)
          : request.url === `/r/${id}/events.jsonl`
            ? eventsJsonl
            : request.url === "/.well-known/loopwarden/keys.json"
              ? JSON.stringify({ keys: [other.jwk, key.jwk] })
              : null;
      response.writeHead(body === null ? 404 : 200).end(body ?? "");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    dir = await mkdtemp(path.join(tmpdir(), "loopwarden-verify-key-"));
  });
  afterAll(async () => {
    await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())));
    await rm(dir, { recursive: true, force: true });
  });

  /** Runs `loopwarden verify` with these options; answers its exit code and what it printed. */
  async function run(
    receipt: string,
    options: { json?: boolean; key?: string; events?: string; keyFingerprint?: string },
  ): Promise<{ code: number; out: string }> {
    const written: string[] = [];
    const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
      written.push(String(chunk));
      return true;
    });
    try {
      const code = await verifyCommand(receipt, { json: options.json ?? false, quiet: false, ...options });
      return { code, out: written.join("") };
    } finally {
      spy.mockRestore();
    }
  }

  it("without --key, says the key came from the server the URL names and prints its fingerprint; --json gives its source and fingerprint", async () => {
    const url = `${origin}/r/${id}`;
    const human = await run(url, {});
    expect(human.code).toBe(0);
    expect(human.out).toContain(
      `key: ${key.jwk.kid} as served by ${origin}/.well-known/loopwarden/keys.json (not pinned: pin it with --key-fingerprint ${key.jwk.kid} or --key FILE)\n`,
    );
    const json = JSON.parse((await run(url, { json: true })).out) as Record<string, unknown>;
    expect(json).toMatchObject({
      valid: true,
      key: key.jwk.kid,
      key_fingerprint: key.jwk.kid,
      key_source: { from: "server", location: `${origin}/.well-known/loopwarden/keys.json`, pinned: null },
      key_lifetime: { status: "active", not_before: "2026-01-01T00:00:00Z", not_after: null },
    });
  });

  it("--key-fingerprint with the signing key's kid passes; with another key's kid it fails (exit 13), naming both", async () => {
    const url = `${origin}/r/${id}`;
    const pinned = await run(url, { keyFingerprint: key.jwk.kid });
    expect(pinned.code).toBe(0);
    expect(pinned.out).toContain(
      `key: ${key.jwk.kid} as served by ${origin}/.well-known/loopwarden/keys.json, pinned by its fingerprint (--key-fingerprint ${key.jwk.kid})\n`,
    );
    // The server serves the other key too: pinned to it, this receipt is not one it signed.
    const another = await run(url, { keyFingerprint: other.jwk.kid });
    expect(another.code).toBe(13);
    expect(another.out).toContain(`INVALID: signature: the receipt is signed by keyid ${key.jwk.kid}, not the pinned key ${other.jwk.kid}\n`);
    const json = JSON.parse((await run(url, { json: true, keyFingerprint: other.jwk.kid })).out) as Record<string, unknown>;
    expect(json).toMatchObject({ valid: false, key_fingerprint: null, key_source: { from: "server", pinned: "fingerprint" } });
    // Pinned to a key the key set given does not have.
    const files = { envelope: path.join(dir, "receipt.json"), events: path.join(dir, "events.jsonl"), key: path.join(dir, "keys.json") };
    await writeFile(files.envelope, JSON.stringify(envelope));
    await writeFile(files.events, eventsJsonl);
    await writeFile(files.key, JSON.stringify({ keys: [other.jwk] }));
    const absent = await run(files.envelope, { events: files.events, key: files.key, keyFingerprint: key.jwk.kid });
    expect(absent.code).toBe(13);
    expect(absent.out).toContain(`INVALID: signature: the pinned key ${key.jwk.kid} is not in the key set\n`);
    // A key file pins too, and says so.
    await writeFile(files.key, JSON.stringify(key.jwk));
    const byFile = await run(files.envelope, { events: files.events, key: files.key });
    expect(byFile.code).toBe(0);
    expect(byFile.out).toContain(`key: ${key.jwk.kid} from ${files.key} (pinned with --key)\n`);
    await expect(run(url, { keyFingerprint: "not-a-thumbprint" })).rejects.toThrow(/is not a key's RFC 7638 thumbprint/);
  });
});
