import { ApiError } from "./http-errors.js";

// Request rate limits (DESIGN §11), each a Cloudflare rate limiting binding (`[[ratelimits]]` in
// wrangler.toml; Miniflare runs them locally and in the worker tests): requests per window across all of
// a team's tokens (TEAM_RATE_LIMIT), the owner's token and failed authentications per client address
// (OWNER_RATE_LIMIT, AUTH_FAILURE_RATE_LIMIT), and the public receipt routes per client address
// (RECEIPT_RATE_LIMIT). Past one, 429 `rate_limited` with Retry-After, and nothing is done.

/** Every rate limit's period (wrangler.toml, `[[ratelimits]]`: 10 or 60 s): the longest a refused caller waits. */
export const RATE_LIMIT_PERIOD_S = 10;

/**
 * The address a request came from, as the per-address limits count it: `CF-Connecting-IP`, which
 * Cloudflare sets on every request it passes to a deployed worker (a client cannot choose it there).
 * Miniflare (the local coordinator, `wrangler dev`) sets it to the connecting address, 127.0.0.1; a
 * request that reaches the worker without it (the worker tests' own requests) counts as "local".
 */
export function clientAddress(request: Request): string {
  return request.headers.get("CF-Connecting-IP")?.trim() || "local";
}

/** The 429 of a caller past a limit: `who` says whose limit it is. */
export function rateLimited(who: string): ApiError {
  return new ApiError(429, "rate_limited", `${who}; retry after ${RATE_LIMIT_PERIOD_S} s`, undefined, {
    "Retry-After": String(RATE_LIMIT_PERIOD_S),
  });
}

/** Counts one request against `key`'s window of `limiter`; past the limit, throws the 429 `who` describes. */
export async function holdToLimit(limiter: RateLimit, key: string, who: () => string): Promise<void> {
  const { success } = await limiter.limit({ key });
  if (!success) throw rateLimited(who());
}

/**
 * Addresses past their failed-authentication limit, in this isolate, until their window ends: every
 * request from them is refused before its token is looked up (no D1 read, and a right guess is refused
 * like a wrong one). The count itself is the binding's; this only spares the lookup. Bounded: the oldest
 * entry goes first once it is full.
 */
const blockedAddresses = new Map<string, number>();
const BLOCKED_ADDRESSES_KEPT = 10_000;

/** Whether `address` is past its failed-authentication limit (as this isolate last heard from the binding). */
export function authBlocked(address: string, now = Date.now()): boolean {
  const until = blockedAddresses.get(address);
  if (until === undefined) return false;
  if (until > now) return true;
  blockedAddresses.delete(address);
  return false;
}

/**
 * Counts a failed authentication from `address` (AUTH_FAILURE_RATE_LIMIT). Within the limit, the caller
 * answers its 401; past it, the answer is this 429, and the address is refused before any lookup until
 * its window ends.
 */
export async function countAuthFailure(limiter: RateLimit, address: string, now = Date.now()): Promise<void> {
  const { success } = await limiter.limit({ key: address });
  if (success) return;
  if (blockedAddresses.size >= BLOCKED_ADDRESSES_KEPT) blockedAddresses.delete(blockedAddresses.keys().next().value ?? "");
  blockedAddresses.set(address, now + RATE_LIMIT_PERIOD_S * 1_000);
  throw authFailuresLimited(address);
}

/** The 429 of an address past its failed-authentication limit. */
export function authFailuresLimited(address: string): ApiError {
  return rateLimited(`too many failed authentications from ${address === "local" ? "this client" : address}`);
}
