import * as z from "zod";
import { jwkThumbprint, PublicJwkInput, type KeySet, fromBase64, type PublicJwk, type Signer } from "#shared/receipts/index.js";
import { ApiError } from "./http/http-errors.js";

// The coordinator's receipt signing key (DESIGN §9): Ed25519 through WebCrypto, named by its RFC 7638
// thumbprint. Deployed, it is the RECEIPT_SIGNING_KEY secret; locally, the runner generates one in the
// state directory. Public keys, retired and revoked ones included, are published as a JWK set, each with
// its lifetime (DESIGN §9): the active key from RECEIPT_KEY_NOT_BEFORE (or its private JWK's own
// `not_before`, which the local coordinator's key records) to no end; each retired key to the `not_after`
// it must be given; a revoked key verifies nothing.

/** The signing key and its public half. */
export interface ReceiptKey {
  signer: Signer;
  publicJwk: PublicJwk;
}

const ALGORITHM = { name: "Ed25519" } as const;

const Instant = z.iso.datetime({ offset: true });

/** A private JWK or PKCS8 (PEM, or its base64 body) as a CryptoKey, the key's public x and, from a JWK, its `not_before` member. */
async function importPrivate(secret: string): Promise<{ key: CryptoKey; x: string; notBefore: string | null }> {
  const text = secret.trim();
  if (text.startsWith("{")) {
    const jwk = JSON.parse(text) as JsonWebKey & { not_before?: unknown };
    if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || typeof jwk.d !== "string" || typeof jwk.x !== "string") {
      throw new Error("RECEIPT_SIGNING_KEY is a JWK but not a private Ed25519 key (kty OKP, crv Ed25519, d and x)");
    }
    const notBefore = jwk.not_before === undefined || jwk.not_before === null ? null : instantOf(jwk.not_before, "RECEIPT_SIGNING_KEY's not_before");
    const { kty, crv, d, x } = jwk;
    return { key: await crypto.subtle.importKey("jwk", { kty, crv, d, x }, ALGORITHM, false, ["sign"]), x, notBefore };
  }
  const body = text.replace(/-----(BEGIN|END) PRIVATE KEY-----/g, "").replace(/\s+/g, "");
  const key = (await crypto.subtle.importKey("pkcs8", fromBase64(body), ALGORITHM, true, ["sign"])) as CryptoKey;
  const { x } = (await crypto.subtle.exportKey("jwk", key)) as JsonWebKey;
  if (typeof x !== "string") throw new Error("RECEIPT_SIGNING_KEY: the PKCS8 key has no public half");
  return { key, x, notBefore: null };
}

/** An ISO 8601 date-time (with Z or an offset), or an error naming where it came from. */
function instantOf(value: unknown, where: string): string {
  const parsed = Instant.safeParse(typeof value === "string" ? value.trim() : value);
  if (!parsed.success) throw new Error(`${where} is ${JSON.stringify(value)}, not an ISO 8601 date-time such as 2026-01-31T12:00:00Z`);
  return parsed.data;
}

const loaded = new Map<string, Promise<ReceiptKey>>();

/**
 * The receipt key configured in `env`, imported once per isolate; null when none is configured. Its
 * `not_before` is RECEIPT_KEY_NOT_BEFORE when set, else the private JWK's own `not_before` member (the
 * local coordinator's key records when it was generated), else none: a deployment that does not say
 * when its key began publishes `not_before: null`, no lower bound.
 */
export function receiptKeyOf(env: Pick<Env, "RECEIPT_SIGNING_KEY" | "RECEIPT_KEY_NOT_BEFORE">): Promise<ReceiptKey> | null {
  const secret = env.RECEIPT_SIGNING_KEY;
  if (!secret) return null;
  const configured = env.RECEIPT_KEY_NOT_BEFORE?.trim() || undefined;
  const cacheKey = `${configured ?? ""}\n${secret}`;
  let key = loaded.get(cacheKey);
  if (!key) {
    key = importPrivate(secret).then(({ key: privateKey, x, notBefore }) => {
      const kid = jwkThumbprint({ x });
      const not_before = configured === undefined ? notBefore : instantOf(configured, "RECEIPT_KEY_NOT_BEFORE");
      return {
        publicJwk: { kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig", status: "active", not_before, not_after: null },
        signer: { kid, sign: async (message) => new Uint8Array(await crypto.subtle.sign(ALGORITHM, privateKey, message)) },
      } satisfies ReceiptKey;
    });
    // A key that fails to import is reported on every use, not cached as a rejection forever.
    key.catch(() => loaded.delete(cacheKey));
    loaded.set(cacheKey, key);
  }
  return key;
}

/** The public JWKs of a key-set variable: a key set `{ "keys": [...] }` or an array of public JWKs (a kid, if given, is replaced by the thumbprint). */
function publicKeysOf(name: string, text: string | undefined): { key: z.infer<typeof PublicJwkInput>; kid: string }[] {
  if (!text) return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error(`${name} is not JSON (a key set { "keys": [...] } or an array of public JWKs)`);
  }
  const set = z.object({ keys: z.array(z.unknown()) }).safeParse(parsed);
  const list = Array.isArray(parsed) ? (parsed as unknown[]) : set.success ? set.data.keys : null;
  if (!list) throw new Error(`${name} is neither a key set { "keys": [...] } nor an array of public JWKs`);
  return list.map((entry, index) => {
    const key = PublicJwkInput.safeParse(entry);
    if (!key.success) {
      const issue = key.error.issues[0];
      throw new Error(`${name}: key ${index + 1} is not a public Ed25519 JWK (${issue ? `${issue.path.join(".") || "(key)"}: ${issue.message}` : "invalid"})`);
    }
    return { key: key.data, kid: jwkThumbprint(key.data) };
  });
}

/** A published public key of `x`, with its status and window. */
function published(
  x: string,
  kid: string,
  status: "retired" | "revoked",
  window: { not_before?: string | null | undefined; not_after?: string | null | undefined },
): PublicJwk {
  return { kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig", status, not_before: window.not_before ?? null, not_after: window.not_after ?? null };
}

/**
 * Retired and revoked public keys, each named by its own thumbprint (whatever kid it came with). Every
 * key of RECEIPT_RETIRED_KEYS is retired (whatever status it was served with, as when the served key set
 * is put back at a rotation) and must carry `not_after`, the time it was retired; one marked `"status":
 * "revoked"` there, and every key of RECEIPT_REVOKED_KEYS, is revoked and verifies nothing. A retired key
 * without `not_after` is refused, naming it: published as it is, it would verify nothing, silently.
 */
function retiredKeys(env: Pick<Env, "RECEIPT_RETIRED_KEYS" | "RECEIPT_REVOKED_KEYS">): PublicJwk[] {
  const revoked = publicKeysOf("RECEIPT_REVOKED_KEYS", env.RECEIPT_REVOKED_KEYS);
  const keys: PublicJwk[] = [];
  for (const { key, kid } of publicKeysOf("RECEIPT_RETIRED_KEYS", env.RECEIPT_RETIRED_KEYS)) {
    if (keys.some((other) => other.kid === kid)) continue;
    if (key.status === "revoked" || revoked.some((other) => other.kid === kid)) {
      keys.push(published(key.x, kid, "revoked", key));
      continue;
    }
    if (!key.not_after) {
      throw new Error(
        `RECEIPT_RETIRED_KEYS: key ${kid} has no not_after: give each retired key the time it was retired ("not_after": "2026-01-31T12:00:00Z"; it then verifies what it signed until then), or mark it "status": "revoked" to have it verify nothing`,
      );
    }
    keys.push(published(key.x, kid, "retired", key));
  }
  for (const { key, kid } of revoked) if (!keys.some((other) => other.kid === kid)) keys.push(published(key.x, kid, "revoked", key));
  return keys;
}

/**
 * The published key set: the active key (when configured) and every retired and revoked one. A revoked
 * key is published revoked even when it is the signing key. A key variable that cannot be read answers
 * 500 receipt_keys_invalid, saying what is wrong with it, rather than a key set that misstates a key.
 */
export async function keySetOf(
  env: Pick<Env, "RECEIPT_SIGNING_KEY" | "RECEIPT_KEY_NOT_BEFORE" | "RECEIPT_RETIRED_KEYS" | "RECEIPT_REVOKED_KEYS">,
): Promise<KeySet> {
  let others: PublicJwk[];
  try {
    if (env.RECEIPT_KEY_NOT_BEFORE?.trim()) instantOf(env.RECEIPT_KEY_NOT_BEFORE, "RECEIPT_KEY_NOT_BEFORE");
    others = retiredKeys(env);
  } catch (error) {
    throw new ApiError(500, "receipt_keys_invalid", (error as Error).message);
  }
  const active = receiptKeyOf(env);
  const keys: PublicJwk[] = [];
  if (active) {
    const key = (await active).publicJwk;
    keys.push(others.find((other) => other.kid === key.kid && other.status === "revoked") ?? key);
  }
  for (const other of others) if (!keys.some((key) => key.kid === other.kid)) keys.push(other);
  return { keys };
}
