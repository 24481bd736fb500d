import { createHash, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { describe, expect, it } from "vitest";
import { canonicalize, jwkThumbprint, pae, verifyIndependently } from "../support/independent-verifier.js";
import { RFC8785_SERIALISATION, RFC8785_SORTING } from "../fixtures/rfc8785-examples.js";

// The independent verifier checked on its own: the specs' own examples for its building blocks, then
// receipts built here with node:crypto alone (no product code) and tampered with one change at a time.

const PAYLOAD_TYPE = "application/vnd.in-toto+json";
const COMMIT = "0123456789abcdef0123456789abcdef01234567";

interface TestKey {
  privateKey: KeyObject;
  jwk: { kty: string; crv: string; x: string; kid: string; alg: string; use: string; status: string; not_before?: string | null; not_after?: string | null };
}

/**
 * A fresh Ed25519 key and its key-set entry, with its window when given; the kid is computed here by hand
 * from RFC 7638, not by the verifier.
 */
function makeKey(status = "active", lifetime: { not_before?: string | null; not_after?: string | null } = {}): TestKey {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const { x } = publicKey.export({ format: "jwk" });
  if (typeof x !== "string") throw new Error("no x in the exported JWK");
  const kid = createHash("sha256").update(`{"crv":"Ed25519","kty":"OKP","x":"${x}"}`).digest("base64url");
  return { privateKey, jwk: { kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig", status, ...lifetime } };
}

interface TestEvent {
  at: string;
  data: Record<string, unknown>;
  prev: string;
  seq: number;
  type: string;
  hash: string;
}

/**
 * A sealed log of `count` events. Members are written in sorted order with sorted, whitespace-free data, so
 * JSON.stringify already gives the JCS text: the hashes do not depend on the verifier's canonicalize.
 */
function makeLog(count: number): TestEvent[] {
  const events: TestEvent[] = [];
  for (let seq = 1; seq <= count; seq++) {
    const prev = events.length === 0 ? "" : (events[events.length - 1] as TestEvent).hash;
    const unsealed = { at: `2026-01-0${seq}T00:00:00.000Z`, data: { note: `step ${seq} – café`, score: seq / 4 }, prev, seq, type: "step" };
    const hash = createHash("sha256").update(JSON.stringify(unsealed), "utf8").digest("hex");
    events.push({ ...unsealed, hash });
  }
  return events;
}

function jsonl(events: readonly unknown[]): string {
  return events.map((event) => `${JSON.stringify(event)}\n`).join("");
}

/** A statement over the log head; with `issued_at`, it states when it was signed (the predicate's issued_at). */
function statementFor(head: { seq: number; hash: string }, issued_at?: string): Record<string, unknown> {
  return {
    _type: "https://in-toto.io/Statement/v1",
    subject: [{ name: "example/repo", digest: { gitCommit: COMMIT } }],
    predicateType: "https://loopwarden.dev/receipt/v1",
    predicate: issued_at === undefined ? { log: head } : { issued_at, log: head },
  };
}

/** A DSSE envelope over the payload bytes, signed by `signer` and labelled with `keyid`. */
function envelopeOf(payload: Buffer, signer: KeyObject, keyid: string, payloadType = PAYLOAD_TYPE): Record<string, unknown> {
  const sig = sign(null, pae(payloadType, payload), signer);
  return { payloadType, payload: payload.toString("base64"), signatures: [{ keyid, sig: sig.toString("base64") }] };
}

interface Receipt {
  key: TestKey;
  events: TestEvent[];
  envelope: Record<string, unknown>;
  keys: { keys: TestKey["jwk"][] };
}

/** A well-formed receipt over a 3-event log, signed by the only key of its key set. */
function makeReceipt(): Receipt {
  const key = makeKey();
  const events = makeLog(3);
  const last = events[2] as TestEvent;
  const payload = Buffer.from(JSON.stringify(statementFor({ seq: last.seq, hash: last.hash })), "utf8");
  return { key, events, envelope: envelopeOf(payload, key.privateKey, key.jwk.kid), keys: { keys: [key.jwk] } };
}

function verifyReceipt(receipt: Receipt, eventsJsonl = jsonl(receipt.events)): ReturnType<typeof verifyIndependently> {
  return verifyIndependently({ envelope: receipt.envelope, eventsJsonl, keys: receipt.keys });
}

function firstSignature(envelope: Record<string, unknown>): { keyid: string; sig: string } {
  return (envelope["signatures"] as { keyid: string; sig: string }[])[0] as { keyid: string; sig: string };
}

const NO_SIGNATURE = "signature: no signature verifies with a key of the key set";

describe("independent verifier: building blocks from the specs", () => {
  it("encodes the DSSE spec's PAE example", () => {
    expect(pae("http://example.com/HelloWorld", Buffer.from("hello world")).toString("utf8")).toBe("DSSEv1 29 http://example.com/HelloWorld 11 hello world");
  });

  it("counts PAE lengths in bytes, not characters", () => {
    expect(pae("t€", Buffer.from("é", "utf8")).toString("utf8")).toBe("DSSEv1 4 t€ 2 é");
  });

  it("canonicalises RFC 8785 §3.2.2's example byte for byte", () => {
    expect(canonicalize(JSON.parse(RFC8785_SERIALISATION.input) as unknown)).toBe(RFC8785_SERIALISATION.canonical);
  });

  it("sorts members by UTF-16 code units (RFC 8785 §3.2.3's example)", () => {
    // Read the order off the text: parsing it back would put "1" first, as JS orders integer-like keys first.
    const names = [...canonicalize(RFC8785_SORTING.input).matchAll(/"((?:[^"\\]|\\.)*)":/g)].map((match) => JSON.parse(`"${match[1]}"`) as string);
    expect(names).toEqual(RFC8785_SORTING.order);
  });

  it("escapes control characters as ECMAScript does and rejects what is not I-JSON", () => {
    expect(canonicalize("\u0000\u001f\b\t\u007f")).toBe(String.raw`"\u0000\u001f\b\t` + '\u007f"');
    expect(canonicalize(-0)).toBe("0");
    expect(() => canonicalize(Number.NaN)).toThrow(TypeError);
    expect(() => canonicalize(Number.POSITIVE_INFINITY)).toThrow(TypeError);
    expect(() => canonicalize("\ud800")).toThrow(TypeError);
    expect(() => canonicalize({ a: undefined })).toThrow(TypeError);
    expect(() => canonicalize(new Date(0))).toThrow(TypeError);
  });

  it("computes RFC 8037 Appendix A.3's JWK thumbprint (the RFC 8032 test 1 key)", () => {
    const x = Buffer.from("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "hex").toString("base64url");
    expect(x).toBe("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
    expect(jwkThumbprint(x)).toBe("kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
  });
});

describe("independent verifier: receipts", () => {
  it("accepts a well-formed receipt over a 3-event log and reports its keyid and head", () => {
    const receipt = makeReceipt();
    const last = receipt.events[2] as TestEvent;
    expect(verifyReceipt(receipt)).toEqual({ ok: true, failures: [], keyid: receipt.key.jwk.kid, head: { seq: 3, hash: last.hash } });
  });

  it("accepts the log without its final newline", () => {
    const receipt = makeReceipt();
    expect(verifyReceipt(receipt, jsonl(receipt.events).trimEnd()).failures).toEqual([]);
  });

  /** A receipt over a 3-event log that says it was signed at `issuedAt`, by `key`, verified against `keys`. */
  function signedAt(key: TestKey, issuedAt: string, keys: TestKey["jwk"][] = [key.jwk]): Receipt {
    const events = makeLog(3);
    const last = events[2] as TestEvent;
    const payload = Buffer.from(JSON.stringify(statementFor({ seq: last.seq, hash: last.hash }, issuedAt)), "utf8");
    return { key, events, envelope: envelopeOf(payload, key.privateKey, key.jwk.kid), keys: { keys } };
  }

  it("accepts a receipt signed by a retired key before its retirement, and a second signature when the first does not verify", () => {
    const retired = makeKey("retired", { not_before: "2026-01-01T00:00:00Z", not_after: "2026-06-01T00:00:00Z" });
    const active = makeKey("active", { not_before: "2026-06-01T00:00:00Z", not_after: null });
    const receipt = signedAt(retired, "2026-05-01T12:00:00.000Z", [active.jwk, retired.jwk]);
    const byRetired = firstSignature(receipt.envelope);
    receipt.envelope["signatures"] = [{ keyid: active.jwk.kid, sig: byRetired.sig }, byRetired];
    const verdict = verifyReceipt(receipt);
    expect(verdict.failures).toEqual([]);
    expect(verdict.keyid).toBe(retired.jwk.kid);
  });

  it("rejects a receipt that says it was signed after its key's not_after, or before its not_before", () => {
    const retired = makeKey("retired", { not_before: "2026-01-01T00:00:00Z", not_after: "2026-06-01T00:00:00Z" });
    const window = `key "${retired.jwk.kid}" (retired, not_before 2026-01-01T00:00:00Z, not_after 2026-06-01T00:00:00Z)`;
    expect(verifyReceipt(signedAt(retired, "2027-06-01T00:00:00.000Z")).failures).toEqual([
      `${NO_SIGNATURE} (signature 1: signed at 2027-06-01T00:00:00.000Z, after ${window} ended)`,
    ]);
    expect(verifyReceipt(signedAt(retired, "2025-12-31T23:59:59.000Z")).failures).toEqual([
      `${NO_SIGNATURE} (signature 1: signed at 2025-12-31T23:59:59.000Z, before ${window} began)`,
    ]);
    // The bounds are inclusive, and a time with an offset is the instant it names.
    expect(verifyReceipt(signedAt(retired, "2026-06-01T00:00:00Z")).failures).toEqual([]);
    expect(verifyReceipt(signedAt(retired, "2026-06-01T02:00:01+02:00")).ok).toBe(false);
    // A key with a window cannot vouch for a statement that states no signing time.
    const undated = makeReceipt();
    undated.keys = { keys: [{ ...undated.key.jwk, not_before: "2026-01-01T00:00:00Z" }] };
    expect(verifyReceipt(undated).failures).toEqual([
      `${NO_SIGNATURE} (signature 1: key "${undated.key.jwk.kid}" (active, not_before 2026-01-01T00:00:00Z, not_after null) has a window, and the statement states no signing time (predicate.issued_at))`,
    ]);
  });

  it("rejects a receipt signed by a revoked key, whatever its window, and by a retired key that does not say when it retired", () => {
    const revoked = makeKey("revoked", { not_before: "2026-01-01T00:00:00Z", not_after: "2027-01-01T00:00:00Z" });
    expect(verifyReceipt(signedAt(revoked, "2026-05-01T00:00:00.000Z")).failures).toEqual([
      `${NO_SIGNATURE} (signature 1: key "${revoked.jwk.kid}" (revoked, not_before 2026-01-01T00:00:00Z, not_after 2027-01-01T00:00:00Z) is revoked and verifies nothing)`,
    ]);
    const retired = makeKey("retired");
    expect(verifyReceipt(signedAt(retired, "2026-05-01T00:00:00.000Z")).failures).toEqual([
      `${NO_SIGNATURE} (signature 1: key "${retired.jwk.kid}" (retired, not_before null, not_after null) is retired without saying when (no not_after), so it verifies nothing)`,
    ]);
    // A window that is not an RFC 3339 date-time makes the key unusable.
    const sloppy = makeKey("retired", { not_after: "June 2026" });
    expect(verifyReceipt(signedAt(sloppy, "2026-05-01T00:00:00.000Z")).failures).toEqual([
      'key set: key 1: not_after is "June 2026", expected an RFC 3339 date-time or null',
      `${NO_SIGNATURE} (signature 1: keyid "${sloppy.jwk.kid}" names no usable key of the key set)`,
    ]);
  });

  it("accepts an active key without a window (key sets from before lifetimes), signing time or not", () => {
    expect(verifyReceipt(makeReceipt()).failures).toEqual([]);
    const key = makeKey();
    expect(verifyReceipt(signedAt(key, "2031-01-01T00:00:00.000Z")).failures).toEqual([]);
  });

  it("rejects a flipped byte in the payload", () => {
    const receipt = makeReceipt();
    const payload = Buffer.from(receipt.envelope["payload"] as string, "base64");
    // Flip the low bit of the signed head's seq ("3" becomes "2"): still JSON, but not what was signed.
    const at = payload.indexOf('"seq":3') + '"seq":'.length;
    payload[at] = (payload[at] as number) ^ 0x01;
    receipt.envelope["payload"] = payload.toString("base64");
    const verdict = verifyReceipt(receipt);
    expect(verdict.ok).toBe(false);
    expect(verdict.keyid).toBeNull();
    expect(verdict.failures.some((failure) => failure.startsWith(NO_SIGNATURE))).toBe(true);
    expect(verdict.failures).toContain("log ends at seq 3, the receipt signs seq 2");
  });

  it("rejects a flipped byte in the signature", () => {
    const receipt = makeReceipt();
    const signature = firstSignature(receipt.envelope);
    const sig = Buffer.from(signature.sig, "base64");
    sig[0] = (sig[0] as number) ^ 0x01;
    signature.sig = sig.toString("base64");
    const verdict = verifyReceipt(receipt);
    expect(verdict.ok).toBe(false);
    expect(verdict.failures).toEqual([`${NO_SIGNATURE} (signature 1: does not verify with key "${receipt.key.jwk.kid}")`]);
  });

  it("rejects a changed payloadType, even one the signature was made over", () => {
    const receipt = makeReceipt();
    receipt.envelope["payloadType"] = "application/json";
    const changed = verifyReceipt(receipt);
    expect(changed.failures).toContain('payloadType is "application/json", expected "application/vnd.in-toto+json"');
    expect(changed.failures.some((failure) => failure.startsWith(NO_SIGNATURE))).toBe(true);

    const payload = Buffer.from(receipt.envelope["payload"] as string, "base64");
    receipt.envelope = envelopeOf(payload, receipt.key.privateKey, receipt.key.jwk.kid, "application/json");
    expect(verifyReceipt(receipt).failures).toEqual(['payloadType is "application/json", expected "application/vnd.in-toto+json"']);
  });

  it("rejects a changed keyid alone, whether it names another key of the set or none", () => {
    const receipt = makeReceipt();
    const other = makeKey();
    receipt.keys.keys.push(other.jwk);
    const signature = firstSignature(receipt.envelope);
    signature.keyid = other.jwk.kid;
    expect(verifyReceipt(receipt).failures).toEqual([`${NO_SIGNATURE} (signature 1: does not verify with key "${other.jwk.kid}")`]);
    signature.keyid = "not-a-kid";
    expect(verifyReceipt(receipt).failures).toEqual([`${NO_SIGNATURE} (signature 1: keyid "not-a-kid" names no usable key of the key set)`]);
  });

  it("rejects a receipt signed by a key not in the key set", () => {
    const receipt = makeReceipt();
    const stranger = makeKey();
    const payload = Buffer.from(receipt.envelope["payload"] as string, "base64");
    receipt.envelope = envelopeOf(payload, stranger.privateKey, stranger.jwk.kid);
    const verdict = verifyReceipt(receipt);
    expect(verdict.failures).toEqual([`${NO_SIGNATURE} (signature 1: keyid "${stranger.jwk.kid}" names no usable key of the key set)`]);
  });

  it("does not use a key whose kid is not its thumbprint (a stranger's key under the trusted kid)", () => {
    const receipt = makeReceipt();
    const stranger = makeKey();
    const trustedKid = receipt.key.jwk.kid;
    const payload = Buffer.from(receipt.envelope["payload"] as string, "base64");
    receipt.envelope = envelopeOf(payload, stranger.privateKey, trustedKid);
    receipt.keys = { keys: [{ ...stranger.jwk, kid: trustedKid }] };
    const verdict = verifyReceipt(receipt);
    expect(verdict.failures).toEqual([
      `key set: key 1: kid "${trustedKid}" is not its RFC 7638 thumbprint "${stranger.jwk.kid}"`,
      `${NO_SIGNATURE} (signature 1: keyid "${trustedKid}" names no usable key of the key set)`,
    ]);
  });

  it("rejects a log with one event's data changed", () => {
    const receipt = makeReceipt();
    (receipt.events[1] as TestEvent).data["score"] = 99;
    expect(verifyReceipt(receipt).failures).toEqual(["event 2 does not match its hash"]);
  });

  it("rejects a log with an event dropped", () => {
    const receipt = makeReceipt();
    const events = [receipt.events[0], receipt.events[2]];
    expect(verifyReceipt(receipt, jsonl(events)).failures).toEqual([
      "event 2 (seq 3) has seq 3, expected 2 (seqs run 1, 2, 3, … with no gap)",
      "event 2 (seq 3) does not link to the previous event's hash",
    ]);
  });

  it("rejects a log with two events swapped", () => {
    const receipt = makeReceipt();
    const events = [receipt.events[0], receipt.events[2], receipt.events[1]];
    expect(verifyReceipt(receipt, jsonl(events)).failures).toEqual([
      "event 2 (seq 3) has seq 3, expected 2 (seqs run 1, 2, 3, … with no gap)",
      "event 2 (seq 3) does not link to the previous event's hash",
      "event 3 (seq 2) has seq 2, expected 3 (seqs run 1, 2, 3, … with no gap)",
      "event 3 (seq 2) does not link to the previous event's hash",
      "log ends at seq 2, the receipt signs seq 3",
    ]);
  });

  it("rejects a log with an event duplicated", () => {
    const receipt = makeReceipt();
    const events = [receipt.events[0], receipt.events[1], receipt.events[1], receipt.events[2]];
    expect(verifyReceipt(receipt, jsonl(events)).failures).toEqual([
      "event 3 (seq 2) has seq 2, expected 3 (seqs run 1, 2, 3, … with no gap)",
      "event 3 (seq 2) does not link to the previous event's hash",
      "event 4 (seq 3) has seq 3, expected 4 (seqs run 1, 2, 3, … with no gap)",
    ]);
  });

  it("rejects a log that stops before the signed head, or runs past it", () => {
    const receipt = makeReceipt();
    expect(verifyReceipt(receipt, jsonl(receipt.events.slice(0, 2))).failures).toEqual(["log ends at seq 2, the receipt signs seq 3"]);
    const longer = makeLog(4);
    expect(verifyReceipt(receipt, jsonl(longer)).failures).toContain("log ends at seq 4, the receipt signs seq 3");
  });

  it("rejects a statement of the wrong type or without a well-formed head, even when signed", () => {
    const key = makeKey();
    const statement = { ...statementFor({ seq: 0, hash: "X" }), _type: "https://in-toto.io/Statement/v0.1", predicateType: "https://example.com/other" };
    const envelope = envelopeOf(Buffer.from(JSON.stringify(statement)), key.privateKey, key.jwk.kid);
    const verdict = verifyIndependently({ envelope, eventsJsonl: jsonl(makeLog(1)), keys: { keys: [key.jwk] } });
    expect(verdict.keyid).toBe(key.jwk.kid);
    expect(verdict.head).toBeNull();
    expect(verdict.failures).toEqual([
      'statement: _type is "https://in-toto.io/Statement/v0.1", expected "https://in-toto.io/Statement/v1"',
      'statement: predicateType is "https://example.com/other", expected "https://loopwarden.dev/receipt/v1"',
      "statement: predicate.log.seq is not an integer >= 1",
      "statement: predicate.log.hash is not 64 lowercase hex digits",
    ]);
  });
});
