import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js";
import { base64urlnopad } from "@scure/base";
import { eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { Context, MiddlewareHandler } from "hono";
import { OWNER_TEAM, type Scope } from "#shared/wire/auth.js";
import { formatLabels, labelsSatisfy } from "#shared/engine/labels.js";
import { Labels } from "#shared/wire/contract.js";
import { tokens, type TokenRow } from "../db/schema.js";
import { ApiError } from "./http-errors.js";
import { authBlocked, authFailuresLimited, clientAddress, countAuthFailure, holdToLimit, RATE_LIMIT_PERIOD_S } from "./rate-limits.js";

// Tenancy and auth (DESIGN §11). A request names its caller with `Authorization: Bearer <token>`:
// - the instance owner's token, the OWNER_TOKEN secret (locally: the state directory's, or
//   LOOPWARDEN_OWNER_TOKEN), compared in constant time and never stored anywhere else;
// - a team's token, `lwt_<16 hex>_<secret>`: the 16 hex digits name its D1 row, which holds only the
//   SHA-256 of the whole token; the digests are compared in constant time.

export { OWNER_TEAM };

/** The shortest owner token accepted: a deployment with a guessable OWNER_TOKEN has no owner. */
export const MIN_OWNER_TOKEN_LENGTH = 32;

/** Who is calling, as the routes see it. */
export interface Principal {
  owner: boolean;
  team_id: string;
  /** Null for the owner token, which has no row. */
  token_id: string | null;
  scopes: readonly Scope[];
  /** The one loop a restricted token may reach. */
  loop_id: string | null;
  expires_at: string | null;
  /** The runner labels the token may claim (DESIGN §11); null: any. */
  labels: Labels | null;
}

/** What the LoopObject checks a caller against: the owner reaches every loop, a team only its own; a lease, only the token that took it. */
export interface Caller {
  owner: boolean;
  team_id: string;
  /** The caller's token (null for the owner's, which has no row): a lease it takes is bound to it. */
  token_id: string | null;
}

/**
 * The reader of a receipt's signed log: receipts are public by their unguessable id (DESIGN §9, §11),
 * so whoever holds one reads the log it signs, whichever team owns the loop.
 */
export const RECEIPT_READER: Caller = { owner: true, team_id: OWNER_TEAM, token_id: null };

export type AuthVariables = { principal: Principal };
export type AuthEnv = { Bindings: Env; Variables: AuthVariables };

const ALL_SCOPES: readonly Scope[] = ["admin", "propose", "evaluate", "review", "read"];
const TEAM_TOKEN = /^lwt_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

/**
 * The owner token's digest, computed once per isolate for the token it was computed from (issue 30: a
 * digest less for every request the owner's token sends, which is every request of the local runner).
 */
let ownerDigest: { token: string; digest: Promise<Uint8Array> } | null = null;

/** Whether a presented token is the owner's, in time that does not depend on where they differ (their digests are compared). */
async function isOwnerToken(presented: string, owner: string): Promise<boolean> {
  if (ownerDigest?.token !== owner) ownerDigest = { token: owner, digest: sha256(owner) };
  const [a, b] = await Promise.all([sha256(presented), ownerDigest.digest]);
  return crypto.subtle.timingSafeEqual(a, b);
}

/** A new team token: its id, the secret shown once, and the digest stored. */
export async function mintToken(): Promise<{ id: string; secret: string; secretHash: string }> {
  const idHex = bytesToHex(crypto.getRandomValues(new Uint8Array(8)));
  const secret = `lwt_${idHex}_${base64urlnopad.encode(crypto.getRandomValues(new Uint8Array(32)))}`;
  return { id: `tk_${idHex}`, secret, secretHash: bytesToHex(await sha256(secret)) };
}

function unauthorized(code: string, message: string): ApiError {
  return new ApiError(401, code, message, undefined, { "WWW-Authenticate": 'Bearer realm="loopwarden"' });
}

/** The scopes a token row grants, expanded: `admin` includes every other scope, `propose`, `evaluate` and `review` include `read`. */
export function grantedScopes(scopes: readonly Scope[]): Scope[] {
  if (scopes.includes("admin")) return [...ALL_SCOPES];
  const granted = new Set(scopes);
  if (granted.has("propose") || granted.has("evaluate") || granted.has("review")) granted.add("read");
  return ALL_SCOPES.filter((scope) => granted.has(scope));
}

/** The caller a team token's row stands for. */
export function principalOfRow(row: TokenRow): Principal {
  return {
    owner: false,
    team_id: row.teamId,
    token_id: row.id,
    scopes: grantedScopes(row.scopes.split(",") as Scope[]),
    loop_id: row.loopId,
    expires_at: row.expiresAt,
    labels: row.labels === null ? null : Labels.parse(JSON.parse(row.labels)),
  };
}

/**
 * Refuses (403 `labels_not_allowed`) runner labels a token may not claim (DESIGN §11): a token minted
 * with labels offers only those (or fewer), so a runner cannot claim a machine it is not to be handed
 * that machine's jobs. A token without labels claims any.
 */
export function requireClaimable(principal: Principal, claimed: Readonly<Labels>): void {
  if (principal.labels === null) return;
  const allowed = principal.labels;
  if (labelsSatisfy(claimed, allowed)) return;
  const beyond = Object.fromEntries(Object.entries(claimed).filter(([key, value]) => !labelsSatisfy({ [key]: value }, allowed)));
  throw new ApiError(
    403,
    "labels_not_allowed",
    `this token may claim only the labels ${formatLabels(allowed)}; the runner claimed ${formatLabels(beyond)} beyond them`,
  );
}

/** The instance owner, as the routes see it: every scope, every team's loops. */
export function ownerPrincipal(): Principal {
  return { owner: true, team_id: OWNER_TEAM, token_id: null, scopes: ALL_SCOPES, loop_id: null, expires_at: null, labels: null };
}

/** Why a token's row no longer stands (401: revoked, or expired at `now`); null while it does. */
export function tokenRowRefusal(row: TokenRow, now: Date): ApiError | null {
  if (row.revokedAt !== null) return unauthorized("token_revoked", `token ${row.id} was revoked at ${row.revokedAt}`);
  if (row.expiresAt !== null && Date.parse(row.expiresAt) <= now.getTime()) return unauthorized("token_expired", `token ${row.id} expired at ${row.expiresAt}`);
  return null;
}

/** The caller a bearer token names; throws 401 for a missing, unknown, expired or revoked one. */
export async function authenticate(env: Env, authorization: string | undefined, now: Date): Promise<Principal> {
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? "");
  const presented = match?.[1];
  if (!presented) throw unauthorized("unauthenticated", "send a token: Authorization: Bearer <token> (loopwarden: --token or LOOPWARDEN_TOKEN)");
  const team = TEAM_TOKEN.exec(presented);
  if (!team) {
    const owner = env.OWNER_TOKEN;
    if (owner && owner.length >= MIN_OWNER_TOKEN_LENGTH && (await isOwnerToken(presented, owner))) {
      return ownerPrincipal();
    }
    if (owner && owner.length < MIN_OWNER_TOKEN_LENGTH) {
      console.error(`loopwarden: OWNER_TOKEN is shorter than ${MIN_OWNER_TOKEN_LENGTH} characters and is refused`);
    }
    throw unauthorized("unauthenticated", "the token is not valid for this coordinator");
  }
  const row = (
    await drizzle(env.DB)
      .select()
      .from(tokens)
      .where(eq(tokens.id, `tk_${team[1]}`))
      .limit(1)
  )[0];
  // An unknown id is compared against a digest all the same, so a miss takes as long as a mismatch.
  const storedHash = row?.secretHash ?? "0".repeat(64);
  const matches = crypto.subtle.timingSafeEqual(await sha256(presented), hexToBytes(storedHash));
  if (!row || !matches) throw unauthorized("unauthenticated", "the token is not valid for this coordinator");
  const refusal = tokenRowRefusal(row, now);
  if (refusal) throw refusal;
  return principalOfRow(row);
}

/**
 * Authenticates every request under it, then holds it to its rate limit (DESIGN §11, invariant 7): a
 * team token to its team's window, which all of the team's tokens share (minting more tokens buys no
 * more requests); the owner's token to its client address's (OWNER_RATE_LIMIT, far above what the local
 * runner, which uses it for everything, sends). A failed authentication is counted against its client
 * address (AUTH_FAILURE_RATE_LIMIT) before it is answered: past that limit the answer is 429, not 401,
 * and until the window ends every request from that address is refused before its token is looked up.
 * Past any limit: 429 `rate_limited` with Retry-After, before any body is read, and nothing is done.
 */
export function requireToken(): MiddlewareHandler<AuthEnv> {
  return async (c, next) => {
    const address = clientAddress(c.req.raw);
    if (authBlocked(address)) throw authFailuresLimited(address);
    let principal: Principal;
    try {
      principal = await authenticate(c.env, c.req.header("Authorization"), new Date());
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) await countAuthFailure(c.env.AUTH_FAILURE_RATE_LIMIT, address);
      throw error;
    }
    if (principal.owner) {
      await holdToLimit(c.env.OWNER_RATE_LIMIT, address, () => "the owner's token sent too many requests from this address");
    } else {
      const team = principal.team_id;
      await holdToLimit(c.env.TEAM_RATE_LIMIT, team, () => `team ${team} sent too many requests (the limit holds for all of the team's tokens together)`);
    }
    c.set("principal", principal);
    await next();
  };
}

export { RATE_LIMIT_PERIOD_S };

/** The caller, once it holds `scope`; 403 otherwise. */
export function requireScope(c: Context<AuthEnv>, scope: Scope): Principal {
  const principal = c.get("principal");
  if (!principal.scopes.includes(scope)) {
    throw new ApiError(403, "forbidden", `this token's scopes (${principal.scopes.join(", ")}) do not include ${scope}`);
  }
  return principal;
}

/**
 * The caller as the LoopObject checks it, for a loop the token may reach at all: a token restricted to
 * another loop is answered as for a loop that does not exist (404, no existence oracle).
 */
export function callerFor(principal: Principal, loopId: string): Caller {
  if (principal.loop_id !== null && principal.loop_id !== loopId) throw new ApiError(404, "not_found", "no such loop");
  return { owner: principal.owner, team_id: principal.team_id, token_id: principal.token_id };
}
