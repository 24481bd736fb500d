// An independent verifier of loopwarden receipts, for tests only. It is written from the public specs alone
// (DSSE v1, in-toto Statement v1, RFC 8785 JCS, RFC 7638 JWK thumbprint, RFC 8032/8037 Ed25519) and shares no
// code with the product: nothing from shared/, runner/ or worker/, no `canonicalize`, `@noble/*` or
// `@scure/*`. A bug in the product's canonical JSON, PAE or key handling then shows up as a disagreement
// between two implementations instead of being agreed with by a verifier built on the same code.
//
// Only node:crypto is used, and only for SHA-256 and Ed25519 verification; everything else is our own code.
//
// Key lifetimes follow loopwarden's design text (DESIGN §9): "each published key carries not_before,
// not_after and a status (active; retired verifies only what was signed before its retirement; revoked
// verifies nothing). The signing time is inside the signed statement and must fall in the key's window."
// The signing time is the predicate's issued_at, an RFC 3339 §5.6 date-time.

import { createHash, createPublicKey, verify, type KeyObject } from "node:crypto";

/** The only payload type a receipt may carry (in-toto attestation framework, "Envelope" layer). */
const IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json";
/** in-toto Statement v1, "_type" field. */
const STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
/** loopwarden's predicate type for receipts. */
const RECEIPT_PREDICATE_TYPE = "https://loopwarden.dev/receipt/v1";

const LOWER_HEX_64 = /^[0-9a-f]{64}$/;
/** A git commit id: 40 hex digits for SHA-1 repositories, 64 for SHA-256 ones (in-toto DigestSet "gitCommit"). */
const GIT_COMMIT = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
/** RFC 4648 §4 base64 with its padding: whole 4-character groups only. */
const STANDARD_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
/** RFC 4648 §5 base64url without padding (RFC 7515 §2 "Base64url Encoding"): no "=" and no length ≡ 1 mod 4. */
const BASE64URL_NO_PAD = /^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$/;

/** RFC 3339 §5.6 "date-time" (upper-case T and Z, as loopwarden writes them). */
const RFC3339_DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/;

/** Members every event must have (loopwarden event log format). */
const EVENT_MEMBERS = ["seq", "type", "at", "data", "prev", "hash"] as const;

export interface IndependentVerdict {
  ok: boolean;
  failures: string[];
  /** The keyid of the first signature that verified, or null when none did. */
  keyid: string | null;
  /** The log head the statement claims; it is authenticated only when `ok` is true. */
  head: { seq: number; hash: string } | null;
}

type JsonObject = Record<string, unknown>;

// ---------------------------------------------------------------------------------------------------------
// RFC 8785: JSON Canonicalization Scheme
// ---------------------------------------------------------------------------------------------------------

/**
 * The RFC 8785 canonical JSON text of a JSON value (from JSON.parse or built of plain objects, arrays,
 * strings, finite numbers, booleans and null).
 *
 * - §3.2.1: no whitespace between tokens.
 * - §3.2.2.1: the literals null, true and false as themselves.
 * - §3.2.2.2: strings as ECMAScript's JSON.stringify writes them (see `canonicalString`).
 * - §3.2.2.3: numbers as ECMAScript's Number-to-String; NaN and the infinities are not JSON and are rejected.
 * - §3.2.3: object members sorted by name, names compared as arrays of UTF-16 code units, recursively.
 * - §3.2.3 (last paragraph): array elements keep their order.
 *
 * Anything else (undefined, functions, symbols, bigints, class instances) is not I-JSON (RFC 7493), which
 * §3.1 requires of the input, so it throws a TypeError rather than being silently dropped or coerced.
 */
export function canonicalize(value: unknown): string {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "string") return canonicalString(value);
  if (typeof value === "number") return canonicalNumber(value);
  if (Array.isArray(value)) return `[${value.map((element: unknown) => canonicalize(element)).join(",")}]`;
  if (isPlainObject(value)) return canonicalObject(value);
  throw new TypeError(`JCS: ${describeType(value)} is not a JSON value`);
}

/**
 * RFC 8785 §3.2.2.3: a number is written as ECMAScript's Number.prototype.toString does (ECMA-262
 * "Number::toString"), which JSON.stringify uses for finite numbers and which writes -0 as "0", as the RFC
 * requires. NaN and ±Infinity have no JSON form (§3.2.2.3: "MUST cause an error").
 */
function canonicalNumber(value: number): string {
  if (!Number.isFinite(value)) throw new TypeError(`JCS: ${String(value)} is not a JSON number`);
  return JSON.stringify(value);
}

/**
 * RFC 8785 §3.2.2.2: strings are written as ECMAScript's JSON.stringify does (ECMA-262 "QuoteJSONString"):
 * `"` and `\` are backslash-escaped; U+0008, U+0009, U+000A, U+000C and U+000D use \b \t \n \f \r; the other
 * code units below U+0020 use \u00xx with lowercase hex; every other character is written as itself (it is
 * UTF-8 encoded later, §3.2.4). A lone surrogate is not I-JSON (RFC 7493 §2.1), so it is rejected rather than
 * escaped.
 */
function canonicalString(value: string): string {
  let out = '"';
  for (let index = 0; index < value.length; index++) {
    const unit = value.charCodeAt(index);
    if (unit >= 0xd800 && unit <= 0xdfff) {
      // A high surrogate must be followed by a low one; copy the pair as one character.
      const next = value.charCodeAt(index + 1);
      const paired = unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff;
      if (!paired) throw new TypeError(`JCS: lone surrogate U+${unit.toString(16)} at index ${index} is not I-JSON`);
      out += value.slice(index, index + 2);
      index++;
      continue;
    }
    out += escapeUnit(unit);
  }
  return `${out}"`;
}

/** The escape ECMA-262 QuoteJSONString uses for one code unit outside the surrogate range. */
function escapeUnit(unit: number): string {
  switch (unit) {
    case 0x22:
      return '\\"';
    case 0x5c:
      return "\\\\";
    case 0x08:
      return "\\b";
    case 0x09:
      return "\\t";
    case 0x0a:
      return "\\n";
    case 0x0c:
      return "\\f";
    case 0x0d:
      return "\\r";
    default:
      return unit < 0x20 ? `\\u${unit.toString(16).padStart(4, "0")}` : String.fromCharCode(unit);
  }
}

/**
 * RFC 8785 §3.2.3: members sorted by name, the names compared as arrays of UTF-16 code units (not code
 * points, not locale order). JavaScript's `<` on strings compares exactly that way (ECMA-262
 * IsLessThan on strings), so the comparator below is the RFC's rule verbatim.
 */
function canonicalObject(value: JsonObject): string {
  const names = Object.keys(value).sort(byCodeUnits);
  const members = names.map((name) => {
    const member = value[name];
    if (member === undefined) throw new TypeError(`JCS: member "${name}" is undefined, which is not a JSON value`);
    return `${canonicalString(name)}:${canonicalize(member)}`;
  });
  return `{${members.join(",")}}`;
}

function byCodeUnits(left: string, right: string): number {
  if (left < right) return -1;
  return left > right ? 1 : 0;
}

function isPlainObject(value: unknown): value is JsonObject {
  if (typeof value !== "object" || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function describeType(value: unknown): string {
  if (typeof value === "object") return value === null ? "null" : `an instance of ${value.constructor?.name ?? "?"}`;
  return `a ${typeof value}`;
}

// ---------------------------------------------------------------------------------------------------------
// DSSE v1: Pre-Authentication Encoding
// ---------------------------------------------------------------------------------------------------------

/**
 * DSSE v1 "Signature Definition": the signature is over
 * `PAE(type, body) = "DSSEv1" + SP + LEN(type) + SP + type + SP + LEN(body) + SP + body`, where SP is one
 * space (0x20) and LEN is the ASCII decimal byte length (no leading zeros). The type is UTF-8 encoded, so its
 * LEN counts bytes, not characters. Signing the PAE rather than the payload binds the payload type into the
 * signature, so a payload cannot be replayed under a different type.
 */
export function pae(payloadType: string, payload: Uint8Array): Buffer {
  const type = Buffer.from(payloadType, "utf8");
  return Buffer.concat([Buffer.from(`DSSEv1 ${type.length} `, "ascii"), type, Buffer.from(` ${payload.length} `, "ascii"), payload]);
}

// ---------------------------------------------------------------------------------------------------------
// RFC 7638: JWK thumbprint
// ---------------------------------------------------------------------------------------------------------

/**
 * RFC 7638 §3 thumbprint of an Ed25519 OKP key: base64url without padding (§3 step 3, RFC 7515 §2) of the
 * SHA-256 of the UTF-8 JSON of only the required members (§3.2; for OKP they are crv, kty, x per RFC 8037
 * §2), in lexicographic order with no whitespace (§3.3). That is exactly
 * `{"crv":"Ed25519","kty":"OKP","x":"<x>"}`, which our JCS writes for these three members.
 */
export function jwkThumbprint(x: string): string {
  const required = canonicalize({ crv: "Ed25519", kty: "OKP", x });
  return createHash("sha256").update(required, "utf8").digest("base64url");
}

// ---------------------------------------------------------------------------------------------------------
// The verifier
// ---------------------------------------------------------------------------------------------------------

/**
 * Verifies a receipt end to end: the key set (each kid is its thumbprint), the DSSE envelope (payload type and
 * at least one Ed25519 signature by a key of the set with the signature's keyid), the in-toto Statement, and
 * the event log (contiguous seqs, each event's hash, each link, and its end at the signed head). Every check
 * runs even after an earlier one fails, so `failures` lists all that failed.
 */
export function verifyIndependently(input: { envelope: unknown; eventsJsonl: string; keys: unknown }): IndependentVerdict {
  const failures: string[] = [];
  const keys = readKeySet(input.keys, failures);
  const envelope = readEnvelope(input.envelope, failures);
  const keyid = envelope ? verifySignatures(envelope, keys, failures) : null;
  const head = envelope?.payload ? readStatement(envelope.payload, failures) : null;
  verifyLog(input.eventsJsonl, head, failures);
  return { ok: failures.length === 0, failures, keyid, head };
}

// --- Key set --------------------------------------------------------------------------------------------

interface UsableKey {
  kid: string;
  publicKey: KeyObject;
  status: "active" | "retired" | "revoked";
  /** The key's window as published (RFC 3339 text; null: no bound on that side). */
  notBefore: string | null;
  notAfter: string | null;
}

/**
 * The key set's usable keys. A key is usable only if it is a well-formed Ed25519 JWK (RFC 8037 §2: kty "OKP",
 * crv "Ed25519", x the base64url 32-byte public key) whose kid is its RFC 7638 thumbprint: the kid is then
 * derived from the key, so nobody can put their own key under a trusted kid. Retired and revoked keys are read
 * too: whether one may verify a receipt is decided by its lifetime against the receipt's signing time (see
 * `lifetimeProblem`). A malformed key is reported as a failure.
 */
function readKeySet(keySet: unknown, failures: string[]): UsableKey[] {
  const list = isPlainObject(keySet) ? keySet["keys"] : undefined;
  if (!Array.isArray(list)) {
    failures.push('key set: not an object with a "keys" array');
    return [];
  }
  const usable: UsableKey[] = [];
  list.forEach((jwk: unknown, index) => {
    const key = readKey(jwk, `key set: key ${index + 1}`, failures);
    if (key) usable.push(key);
  });
  return usable;
}

function readKey(jwk: unknown, label: string, failures: string[]): UsableKey | null {
  if (!isPlainObject(jwk)) {
    failures.push(`${label} is not a JSON object`);
    return null;
  }
  const problems = keyProblems(jwk);
  if (problems.length > 0) {
    failures.push(...problems.map((problem) => `${label}: ${problem}`));
    return null;
  }
  const x = jwk["x"] as string;
  const kid = jwk["kid"] as string;
  const thumbprint = jwkThumbprint(x);
  if (kid !== thumbprint) {
    failures.push(`${label}: kid "${kid}" is not its RFC 7638 thumbprint "${thumbprint}"`);
    return null;
  }
  const window = { notBefore: (jwk["not_before"] ?? null) as string | null, notAfter: (jwk["not_after"] ?? null) as string | null };
  return importKey(x, kid, jwk["status"] as UsableKey["status"], window, label, failures);
}

/** The members the key set format fixes (RFC 8037 §2 for kty/crv/x, RFC 7517 §4 for kid/alg/use). */
function keyProblems(jwk: JsonObject): string[] {
  const problems: string[] = [];
  if (jwk["kty"] !== "OKP") problems.push(`kty is ${show(jwk["kty"])}, expected "OKP"`);
  if (jwk["crv"] !== "Ed25519") problems.push(`crv is ${show(jwk["crv"])}, expected "Ed25519"`);
  if (!isEd25519X(jwk["x"])) problems.push("x is not the base64url (no padding) of 32 bytes");
  if (typeof jwk["kid"] !== "string") problems.push("kid is not a string");
  if (jwk["alg"] !== "EdDSA") problems.push(`alg is ${show(jwk["alg"])}, expected "EdDSA"`);
  if (jwk["use"] !== "sig") problems.push(`use is ${show(jwk["use"])}, expected "sig"`);
  if (jwk["status"] !== "active" && jwk["status"] !== "retired" && jwk["status"] !== "revoked") {
    problems.push(`status is ${show(jwk["status"])}, expected "active", "retired" or "revoked"`);
  }
  // The window's bounds: RFC 3339 date-times, or null (or absent, in key sets from before lifetimes) for none.
  for (const bound of ["not_before", "not_after"]) {
    const value = jwk[bound];
    if (value !== undefined && value !== null && !isDateTime(value)) problems.push(`${bound} is ${show(value)}, expected an RFC 3339 date-time or null`);
  }
  return problems;
}

/** RFC 8037 §2: x is the 32-byte public key, base64url encoded without padding; we also demand the canonical encoding. */
function isEd25519X(x: unknown): x is string {
  if (typeof x !== "string" || !BASE64URL_NO_PAD.test(x)) return false;
  const bytes = Buffer.from(x, "base64url");
  return bytes.length === 32 && bytes.toString("base64url") === x;
}

/** An RFC 3339 date-time that names an instant. */
function isDateTime(value: unknown): value is string {
  return typeof value === "string" && RFC3339_DATE_TIME.test(value) && !Number.isNaN(Date.parse(value));
}

function importKey(
  x: string,
  kid: string,
  status: UsableKey["status"],
  window: Pick<UsableKey, "notBefore" | "notAfter">,
  label: string,
  failures: string[],
): UsableKey | null {
  try {
    // Only the members that define the key go to node:crypto; kid/alg/use/status are our concern, not its.
    const publicKey = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x }, format: "jwk" });
    return { kid, publicKey, status, ...window };
  } catch (error) {
    failures.push(`${label}: x is not an Ed25519 public key (${errorMessage(error)})`);
    return null;
  }
}

// --- Envelope -------------------------------------------------------------------------------------------

interface Envelope {
  payloadType: string;
  /** The decoded payload bytes, or null when the payload is not valid base64. */
  payload: Buffer | null;
  signatures: unknown[];
}

/**
 * DSSE v1 "Envelope": `{ payloadType, payload, signatures: [{ keyid, sig }] }`. The payload type must be the
 * in-toto one exactly (in-toto attestation framework, Envelope layer), since it says how the payload is read.
 * loopwarden writes standard base64 with padding (RFC 4648 §4); we accept only its canonical form, so one
 * envelope has one spelling.
 */
function readEnvelope(envelope: unknown, failures: string[]): Envelope | null {
  if (!isPlainObject(envelope)) {
    failures.push("envelope: not a JSON object");
    return null;
  }
  const { payloadType, payload, signatures } = envelope;
  if (typeof payloadType !== "string") {
    failures.push("envelope: payloadType is not a string");
    return null;
  }
  if (payloadType !== IN_TOTO_PAYLOAD_TYPE) failures.push(`payloadType is ${show(payloadType)}, expected "${IN_TOTO_PAYLOAD_TYPE}"`);
  const bytes = decodeStandardBase64(payload);
  if (!bytes) failures.push("envelope: payload is not standard base64 with padding");
  if (!Array.isArray(signatures) || signatures.length === 0) failures.push("envelope: signatures is not a non-empty array");
  return { payloadType, payload: bytes, signatures: Array.isArray(signatures) ? signatures : [] };
}

function decodeStandardBase64(text: unknown): Buffer | null {
  if (typeof text !== "string" || !STANDARD_BASE64.test(text)) return null;
  const bytes = Buffer.from(text, "base64");
  // Node ignores non-zero padding bits; a re-encode that differs means a non-canonical spelling.
  return bytes.toString("base64") === text ? bytes : null;
}

// --- Signatures -----------------------------------------------------------------------------------------

/**
 * DSSE v1 "Protocol": verify Ed25519 (RFC 8032 §5.1.7) over PAE(payloadType, payload) with the key the
 * signature's keyid names; the envelope is accepted if at least one signature verifies. The keyid selects the
 * key and is trusted only because every usable key's kid is its thumbprint. Returns the keyid that verified.
 */
function verifySignatures(envelope: Envelope, keys: readonly UsableKey[], failures: string[]): string | null {
  if (!envelope.payload || envelope.signatures.length === 0) return null;
  const message = pae(envelope.payloadType, envelope.payload);
  const signedAt = signingTime(envelope.payload);
  const reasons: string[] = [];
  for (const [index, signature] of envelope.signatures.entries()) {
    const reason = signatureProblem(signature, message, keys, signedAt);
    if (reason === null) return (signature as JsonObject)["keyid"] as string;
    reasons.push(`signature ${index + 1}: ${reason}`);
  }
  failures.push(`signature: no signature verifies with a key of the key set (${reasons.join("; ")})`);
  return null;
}

/** Why one signature does not verify, or null when it does: by a key of the set, inside that key's lifetime. */
function signatureProblem(signature: unknown, message: Buffer, keys: readonly UsableKey[], signedAt: string | null): string | null {
  if (!isPlainObject(signature)) return "not a JSON object";
  const { keyid, sig } = signature;
  if (typeof keyid !== "string") return "keyid is not a string";
  const bytes = decodeStandardBase64(sig);
  // RFC 8032 §5.1.6: an Ed25519 signature is exactly 64 bytes.
  if (!bytes || bytes.length !== 64) return "sig is not standard base64 of 64 bytes";
  const candidates = keys.filter((key) => key.kid === keyid);
  if (candidates.length === 0) return `keyid "${keyid}" names no usable key of the key set`;
  const signer = candidates.find((key) => ed25519Verifies(message, key.publicKey, bytes));
  if (!signer) return `does not verify with key "${keyid}"`;
  return lifetimeProblem(signer, signedAt);
}

/**
 * The design's key lifetime rule: a revoked key verifies nothing; a retired key verifies only what was signed
 * before its retirement, so one that does not say when (no not_after) verifies nothing; and the signing time
 * the statement states must fall within [not_before, not_after] (a null bound is none). A key with a bound
 * cannot vouch for a statement that states no signing time. Null when the key may verify the statement.
 */
function lifetimeProblem(key: UsableKey, signedAt: string | null): string | null {
  const named = `key "${key.kid}" (${key.status}, not_before ${key.notBefore ?? "null"}, not_after ${key.notAfter ?? "null"})`;
  if (key.status === "revoked") return `${named} is revoked and verifies nothing`;
  if (key.status === "retired" && key.notAfter === null) return `${named} is retired without saying when (no not_after), so it verifies nothing`;
  if (key.notBefore === null && key.notAfter === null) return null;
  if (signedAt === null) return `${named} has a window, and the statement states no signing time (predicate.issued_at)`;
  const at = Date.parse(signedAt);
  if (key.notBefore !== null && at < Date.parse(key.notBefore)) return `signed at ${signedAt}, before ${named} began`;
  if (key.notAfter !== null && at > Date.parse(key.notAfter)) return `signed at ${signedAt}, after ${named} ended`;
  return null;
}

/** The signing time the signed statement states: its predicate's issued_at, when that is an RFC 3339 date-time. */
function signingTime(payload: Buffer): string | null {
  let statement: unknown;
  try {
    statement = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload)) as unknown;
  } catch {
    return null;
  }
  const predicate = isPlainObject(statement) ? statement["predicate"] : undefined;
  const issuedAt = isPlainObject(predicate) ? predicate["issued_at"] : undefined;
  return isDateTime(issuedAt) ? issuedAt : null;
}

function ed25519Verifies(message: Buffer, publicKey: KeyObject, signature: Buffer): boolean {
  try {
    // For Ed25519 node:crypto takes no digest (null): the algorithm hashes the message itself.
    return verify(null, message, publicKey, signature);
  } catch {
    return false;
  }
}

// --- Statement ------------------------------------------------------------------------------------------

/**
 * in-toto Statement v1 ("Statement" layer): `_type`, a non-empty `subject` list of ResourceDescriptors with a
 * name and a DigestSet, `predicateType` and `predicate`. For a receipt the subject is the commit (DigestSet
 * algorithm "gitCommit") and the predicate carries `log: { seq, hash }`, the event-log head it signs.
 * Returns that head, or null when the statement is unreadable or the head malformed.
 */
function readStatement(payload: Buffer, failures: string[]): { seq: number; hash: string } | null {
  const statement = parseStatement(payload, failures);
  if (!statement) return null;
  if (statement["_type"] !== STATEMENT_TYPE) failures.push(`statement: _type is ${show(statement["_type"])}, expected "${STATEMENT_TYPE}"`);
  checkSubjects(statement["subject"], failures);
  const predicateType = statement["predicateType"];
  if (predicateType !== RECEIPT_PREDICATE_TYPE) failures.push(`statement: predicateType is ${show(predicateType)}, expected "${RECEIPT_PREDICATE_TYPE}"`);
  return readSignedHead(statement["predicate"], failures);
}

/** The payload is UTF-8 JSON (in-toto Statement v1 is a JSON object); invalid UTF-8 is rejected, not replaced. */
function parseStatement(payload: Buffer, failures: string[]): JsonObject | null {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(payload);
  } catch {
    failures.push("statement: payload is not valid UTF-8");
    return null;
  }
  const parsed = parseJson(text);
  if (!parsed.ok) failures.push(`statement: payload is not JSON (${parsed.error})`);
  else if (!isPlainObject(parsed.value)) failures.push("statement: payload is not a JSON object");
  else return parsed.value;
  return null;
}

function checkSubjects(subject: unknown, failures: string[]): void {
  if (!Array.isArray(subject) || subject.length === 0) {
    failures.push("statement: subject is not a non-empty array");
    return;
  }
  subject.forEach((entry: unknown, index) => {
    const problem = subjectProblem(entry);
    if (problem) failures.push(`statement: subject ${index + 1} ${problem}`);
  });
}

function subjectProblem(entry: unknown): string | null {
  if (!isPlainObject(entry)) return "is not a JSON object";
  if (typeof entry["name"] !== "string") return "has no string name";
  const digest = entry["digest"];
  if (!isPlainObject(digest)) return "has no digest object";
  const commit = digest["gitCommit"];
  return typeof commit === "string" && GIT_COMMIT.test(commit) ? null : "digest.gitCommit is not 40 or 64 lowercase hex digits";
}

function readSignedHead(predicate: unknown, failures: string[]): { seq: number; hash: string } | null {
  const log = isPlainObject(predicate) ? predicate["log"] : undefined;
  if (!isPlainObject(log)) {
    failures.push("statement: predicate.log is not a JSON object");
    return null;
  }
  const { seq, hash } = log;
  const seqOk = typeof seq === "number" && Number.isSafeInteger(seq) && seq >= 1;
  const hashOk = typeof hash === "string" && LOWER_HEX_64.test(hash);
  if (!seqOk) failures.push("statement: predicate.log.seq is not an integer >= 1");
  if (!hashOk) failures.push("statement: predicate.log.hash is not 64 lowercase hex digits");
  return seqOk && hashOk ? { seq, hash } : null;
}

// --- Event log ------------------------------------------------------------------------------------------

/**
 * The hash-chained event log (loopwarden format): JSONL, one event object per line, a final newline optional.
 * Events are numbered here by their line (event 1 is line 1), which is also the seq each must have. Each
 * event must carry seq, type, at, data, prev and hash; seqs run 1, 2, 3, … with no gap or repeat; `prev` is ""
 * for the first event and the previous event's `hash` for every other; `hash` is the lowercase hex SHA-256 of
 * the UTF-8 JCS (RFC 8785) of the event without its `hash` member. The log must end exactly at the signed
 * head, so nothing was cut off after the receipt and nothing appended before it.
 */
function verifyLog(text: string, head: { seq: number; hash: string } | null, failures: string[]): void {
  const events = readEvents(text, failures);
  if (events === null) return;
  if (events.length === 0) {
    failures.push("log: no events");
    return;
  }
  events.forEach((event, index) => checkEvent(event, index, events, failures));
  if (head) checkEnd(events[events.length - 1] as LogEvent, head, failures);
}

interface LogEvent {
  line: number;
  value: JsonObject;
  seq: unknown;
  prev: unknown;
  hash: unknown;
}

/** Parses each line; reports unreadable lines and returns null if any, since the chain cannot be followed then. */
function readEvents(text: string, failures: string[]): LogEvent[] | null {
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  let readable = true;
  const events: LogEvent[] = [];
  lines.forEach((line, index) => {
    const event = readEvent(line, index + 1, failures);
    if (event) events.push(event);
    else readable = false;
  });
  return readable ? events : null;
}

function readEvent(line: string, number: number, failures: string[]): LogEvent | null {
  const parsed = parseJson(line);
  if (!parsed.ok) {
    failures.push(`log: line ${number} is not JSON (${parsed.error})`);
    return null;
  }
  if (!isPlainObject(parsed.value)) {
    failures.push(`log: line ${number} is not a JSON object`);
    return null;
  }
  const value = parsed.value;
  return { line: number, value, seq: value["seq"], prev: value["prev"], hash: value["hash"] };
}

function checkEvent(event: LogEvent, index: number, events: readonly LogEvent[], failures: string[]): void {
  const label = eventLabel(event);
  const missing = EVENT_MEMBERS.filter((name) => !Object.hasOwn(event.value, name));
  if (missing.length > 0) failures.push(`${label} lacks ${missing.map((name) => `"${name}"`).join(", ")}`);
  if (event.seq !== event.line) failures.push(`${label} has seq ${show(event.seq)}, expected ${event.line} (seqs run 1, 2, 3, … with no gap)`);
  checkLink(event, index === 0 ? null : (events[index - 1] as LogEvent), label, failures);
  checkHash(event, label, failures);
}

/** "event 3", or "event 3 (seq 5)" when the seq is not the line number, so a reader sees both. */
function eventLabel(event: LogEvent): string {
  return event.seq === event.line ? `event ${event.line}` : `event ${event.line} (seq ${show(event.seq)})`;
}

function checkLink(event: LogEvent, previous: LogEvent | null, label: string, failures: string[]): void {
  if (previous === null) {
    if (event.prev !== "") failures.push(`${label} has prev ${show(event.prev)}, expected "" (the first event links to nothing)`);
    return;
  }
  // Link to the hash the previous event states; if that hash is itself wrong, checkHash reports it there.
  if (event.prev !== previous.hash) failures.push(`${label} does not link to the previous event's hash`);
}

function checkHash(event: LogEvent, label: string, failures: string[]): void {
  if (typeof event.hash !== "string" || !LOWER_HEX_64.test(event.hash)) {
    failures.push(`${label} has a hash that is not 64 lowercase hex digits`);
    return;
  }
  let computed: string;
  try {
    computed = eventHash(event.value);
  } catch (error) {
    failures.push(`${label} cannot be canonicalised (${errorMessage(error)})`);
    return;
  }
  if (computed !== event.hash) failures.push(`${label} does not match its hash`);
}

/** SHA-256 over the UTF-8 bytes (RFC 8785 §3.2.4) of the JCS of the event without its own `hash` member. */
function eventHash(event: JsonObject): string {
  // Object.fromEntries defines own data properties, so even a member named "__proto__" is kept as data.
  const unsealed = Object.fromEntries(Object.entries(event).filter(([name]) => name !== "hash"));
  return createHash("sha256").update(canonicalize(unsealed), "utf8").digest("hex");
}

function checkEnd(last: LogEvent, head: { seq: number; hash: string }, failures: string[]): void {
  if (last.seq !== head.seq) failures.push(`log ends at seq ${show(last.seq)}, the receipt signs seq ${head.seq}`);
  else if (last.hash !== head.hash) failures.push(`log ends at hash ${show(last.hash)}, the receipt signs hash ${head.hash}`);
}

// --- Helpers --------------------------------------------------------------------------------------------

type Parsed = { ok: true; value: unknown } | { ok: false; error: string };

/** JSON.parse (RFC 8259); note it keeps the last of duplicate member names, which I-JSON forbids anyway. */
function parseJson(text: string): Parsed {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (error) {
    return { ok: false, error: errorMessage(error) };
  }
}

/** A value as it appears in a failure message: JSON for JSON values, a type name otherwise. */
function show(value: unknown): string {
  if (value === undefined) return "missing";
  try {
    return JSON.stringify(value) ?? describeType(value);
  } catch {
    return describeType(value);
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
