import { base64urlnopad } from "@scure/base";
import { utf8ToBytes } from "@noble/hashes/utils.js";
import { sha256 } from "@noble/hashes/sha2.js";
import * as z from "zod";

// Receipt signing keys as JWK (RFC 7517, RFC 8037 for Ed25519), named by their RFC 7638 thumbprint: a
// key's id is derived from the key itself, so a key set cannot name one key with another's id. Each key
// has a lifetime (DESIGN §9): it verifies only what says it was signed (the predicate's `issued_at`,
// inside the signed statement) within [not_before, not_after], and a revoked key verifies nothing.

/** A public Ed25519 key of the key set, as `GET /.well-known/loopwarden/keys.json` serves it. */
export const PublicJwk = z.object({
  kty: z.literal("OKP"),
  crv: z.literal("Ed25519"),
  x: z.string().regex(/^[A-Za-z0-9_-]{43}$/, "must be a 32-byte key in base64url"),
  kid: z.string(),
  alg: z.literal("EdDSA").optional(),
  use: z.literal("sig").optional(),
  /**
   * `active` signs; `retired` signs nothing new and verifies only what was signed by its `not_after`
   * (without one it verifies nothing); `revoked` verifies nothing. Absent (key sets from before
   * lifetimes): active.
   */
  status: z.enum(["active", "retired", "revoked"]).optional(),
  /** The earliest signing time the key verifies; null or absent (key sets from before lifetimes): no bound. */
  not_before: z.iso.datetime({ offset: true }).nullable().optional(),
  /** The latest signing time the key verifies (a retired key's retirement); null or absent: no bound, for an active key only. */
  not_after: z.iso.datetime({ offset: true }).nullable().optional(),
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

/** A key's status and window in words: `retired, valid from 2026-01-01T00:00:00Z to 2026-06-01T00:00:00Z`. */
export function describeKeyLifetime(key: Pick<PublicJwk, "status" | "not_before" | "not_after">): string {
  return `${key.status ?? "active"}, valid from ${key.not_before ?? "any time"} to ${key.not_after ?? "no end"}`;
}

/**
 * Why a key may not verify a statement that says it was signed at `signedAt` (its `issued_at`), or null
 * when it may (DESIGN §9): a revoked key verifies nothing; a retired key without `not_after` is treated
 * as revoked; otherwise the signing time must lie within [not_before, not_after], where an absent or null
 * bound is none. A statement without a readable signing time is verified only by a key without bounds.
 */
export function keyLifetimeProblem(key: Pick<PublicJwk, "kid" | "status" | "not_before" | "not_after">, signedAt: string | null): string | null {
  const named = `key ${key.kid} (${describeKeyLifetime(key)})`;
  const says = signedAt === null ? "this receipt names no signing time" : `this receipt says it was signed at ${signedAt}`;
  if (key.status === "revoked") return `${named} is revoked: it verifies nothing (${says})`;
  if (key.status === "retired" && !key.not_after) {
    return `${named} is retired without a not_after (when it was retired), so it verifies nothing (${says})`;
  }
  if (!key.not_before && !key.not_after) return null;
  const at = signedAt === null ? Number.NaN : Date.parse(signedAt);
  if (Number.isNaN(at)) return `${named} verifies only what was signed within its window, and ${says}`;
  if (key.not_before && at < Date.parse(key.not_before)) return `${named} begins at ${key.not_before}; ${says}, before`;
  if (key.not_after && at > Date.parse(key.not_after)) {
    return `${named} ${key.status === "retired" ? "was retired" : "ends"} at ${key.not_after}; ${says}, after`;
  }
  return null;
}
