import { base64urlnopad } from "@scure/base";
import { utf8ToBytes } from "@noble/hashes/utils.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { z } from "zod";

// Receipt signing keys as JWK (RFC 7517, RFC 8037 for Ed25519), named by their RFC 7638 thumbprint: a
// key's id is derived from the key itself, so a key set cannot name one key with another's id.

/** A public Ed25519 key of the key set, as `GET /.well-known/loopwarden/keys.json` serves it. */
export const PublicJwk = z.object({
  kty: z.literal("OKP"),
  crv: z.literal("Ed25519"),
  x: z.string().regex(/^[A-Za-z0-9_-]{43}$/, "must be a 32-byte key in base64url"),
  kid: z.string(),
  alg: z.literal("EdDSA").optional(),
  use: z.literal("sig").optional(),
  /** `retired` keys sign nothing new and still verify what they signed. */
  status: z.enum(["active", "retired"]).optional(),
});
export type PublicJwk = z.infer<typeof PublicJwk>;

/** A public key as a person or an operator gives one: a public JWK whose kid may be left out (it is the thumbprint). */
export const PublicJwkInput = PublicJwk.omit({ kid: true }).extend({ kid: PublicJwk.shape.kid.optional() });

/** The published key set. */
export const KeySet = z.object({ keys: z.array(PublicJwk) });
export type KeySet = z.infer<typeof KeySet>;

/** RFC 7638 thumbprint of an Ed25519 public key: base64url(sha256 of `{"crv":"Ed25519","kty":"OKP","x":…}`). */
export function jwkThumbprint(key: { x: string }): string {
  return base64urlnopad.encode(sha256(utf8ToBytes(`{"crv":"Ed25519","kty":"OKP","x":"${key.x}"}`)));
}
