import { jwkThumbprint, KeySet, PublicJwkInput, fromBase64, type PublicJwk, type Signer } from "../../shared/receipts/index.js";

// The coordinator's receipt signing key (DESIGN §9): Ed25519 through WebCrypto, named by its RFC 7638
// thumbprint. Deployed, it is the RECEIPT_SIGNING_KEY secret; locally, the runner generates one in the
// state directory. Public keys, retired ones included, are published as a JWK set.

/** The signing key and its public half. */
export interface ReceiptKey {
  signer: Signer;
  publicJwk: PublicJwk;
}

const ALGORITHM = { name: "Ed25519" } as const;

/** A private JWK or PKCS8 (PEM, or its base64 body) as a CryptoKey and the key's public x. */
async function importPrivate(secret: string): Promise<{ key: CryptoKey; x: string }> {
  const text = secret.trim();
  if (text.startsWith("{")) {
    const jwk = JSON.parse(text) as JsonWebKey;
    if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || typeof jwk.d !== "string" || typeof jwk.x !== "string") {
      throw new Error("RECEIPT_SIGNING_KEY is a JWK but not a private Ed25519 key (kty OKP, crv Ed25519, d and x)");
    }
    const { kty, crv, d, x } = jwk;
    return { key: await crypto.subtle.importKey("jwk", { kty, crv, d, x }, ALGORITHM, false, ["sign"]), x };
  }
  const body = text.replace(/-----(BEGIN|END) PRIVATE KEY-----/g, "").replace(/\s+/g, "");
  const key = (await crypto.subtle.importKey("pkcs8", fromBase64(body), ALGORITHM, true, ["sign"])) as CryptoKey;
  const { x } = (await crypto.subtle.exportKey("jwk", key)) as JsonWebKey;
  if (typeof x !== "string") throw new Error("RECEIPT_SIGNING_KEY: the PKCS8 key has no public half");
  return { key, x };
}

const loaded = new Map<string, Promise<ReceiptKey>>();

/** The receipt key configured in `env`, imported once per isolate; null when none is configured. */
export function receiptKeyOf(env: Pick<Env, "RECEIPT_SIGNING_KEY">): Promise<ReceiptKey> | null {
  const secret = env.RECEIPT_SIGNING_KEY;
  if (!secret) return null;
  let key = loaded.get(secret);
  if (!key) {
    key = importPrivate(secret).then(({ key: privateKey, x }) => {
      const kid = jwkThumbprint({ x });
      return {
        publicJwk: { kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig", status: "active" },
        signer: { kid, sign: async (message) => new Uint8Array(await crypto.subtle.sign(ALGORITHM, privateKey, message)) },
      } satisfies ReceiptKey;
    });
    // A key that fails to import is reported on every use, not cached as a rejection forever.
    key.catch(() => loaded.delete(secret));
    loaded.set(secret, key);
  }
  return key;
}

/** Retired public keys from RECEIPT_RETIRED_KEYS, each named by its own thumbprint (whatever kid it came with). */
function retiredKeys(env: Pick<Env, "RECEIPT_RETIRED_KEYS">): PublicJwk[] {
  if (!env.RECEIPT_RETIRED_KEYS) return [];
  const parsed = JSON.parse(env.RECEIPT_RETIRED_KEYS) as unknown;
  const list = Array.isArray(parsed) ? parsed : KeySet.parse(parsed).keys;
  return list.map((entry) => {
    const key = PublicJwkInput.parse(entry);
    return { kty: "OKP", crv: "Ed25519", x: key.x, kid: jwkThumbprint(key), alg: "EdDSA", use: "sig", status: "retired" };
  });
}

/** The published key set: the active key (when configured) and every retired one. */
export async function keySetOf(env: Pick<Env, "RECEIPT_SIGNING_KEY" | "RECEIPT_RETIRED_KEYS">): Promise<KeySet> {
  const active = receiptKeyOf(env);
  const keys = active ? [(await active).publicJwk] : [];
  for (const retired of retiredKeys(env)) if (!keys.some((key) => key.kid === retired.kid)) keys.push(retired);
  return { keys };
}
