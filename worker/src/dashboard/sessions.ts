import { base64urlnopad } from "@scure/base";
import { and, eq, gt, isNull, lt } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { sha256Hex } from "#shared/hash.js";
import { tokens, webSessions, type WebSessionRow } from "../db/schema.js";
import { OWNER_TEAM, ownerPrincipal, principalOfRow, tokenRowRefusal, type Principal } from "../http/auth.js";

// The dashboard's sessions (DESIGN §11; docs/dashboard.md). A browser never holds a token: a token is
// exchanged once — pasted into the login form, or through a one-time link `serve` and `run` print — for a
// session, whose secret lives only in an HttpOnly, SameSite=Strict cookie and whose digest only in D1.
// A session is the token that opened it seen through a cookie: it has that token's team, scopes and loop
// restriction, ends when the token is revoked or expires (checked on every request), and an owner's
// session ends when the owner token changes.

/** How long a session lasts from its login. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
/** How long a one-time login link may wait to be opened. */
export const LOGIN_LINK_TTL_MS = 5 * 60 * 1000;

/** A session as a request presents it: who it is and the CSRF token its forms carry. */
export interface Session {
  principal: Principal;
  csrf: string;
  /** The digest its row is stored under. */
  id: string;
}

/** A fresh 256-bit secret, base64url: a session's cookie, a login link's code, a CSRF token. */
function secret(): string {
  return base64urlnopad.encode(crypto.getRandomValues(new Uint8Array(32)));
}

/** What a secret is stored under: its SHA-256, so a leaked table opens no session. */
function idOf(value: string): string {
  return sha256Hex(`loopwarden/web-session\n${value}`);
}

/** The digest an owner's session keeps of the owner token: when the token changes, its sessions end. */
function ownerDigestOf(env: Env): string | null {
  return env.OWNER_TOKEN ? sha256Hex(`loopwarden/owner-session\n${env.OWNER_TOKEN}`) : null;
}

/** Stores a session or a login link for `principal`, answering its secret. */
async function store(env: Env, principal: Principal, kind: "session" | "link", ttlMs: number, now: Date): Promise<{ secret: string; expiresAt: string }> {
  const value = secret();
  const expiresAt = new Date(now.getTime() + ttlMs).toISOString();
  const db = drizzle(env.DB);
  // Each new row takes the expired ones with it: the table holds what is live, whatever nobody logged out of.
  await db.batch([
    db.delete(webSessions).where(lt(webSessions.expiresAt, now.toISOString())),
    db.insert(webSessions).values({
      id: idOf(value),
      kind,
      teamId: principal.team_id,
      tokenId: principal.token_id,
      ownerDigest: principal.owner ? ownerDigestOf(env) : null,
      csrf: secret(),
      createdAt: now.toISOString(),
      expiresAt,
      usedAt: null,
    }),
  ]);
  return { secret: value, expiresAt };
}

/** Opens a session for a caller who proved a token: answers the cookie's value and when it ends. */
export function openSession(env: Env, principal: Principal, now = new Date()): Promise<{ secret: string; expiresAt: string }> {
  return store(env, principal, "session", SESSION_TTL_MS, now);
}

/** Mints a one-time login link's code for the caller's token: it opens one session, once, within LOGIN_LINK_TTL_MS. */
export function mintLoginCode(env: Env, principal: Principal, now = new Date()): Promise<{ secret: string; expiresAt: string }> {
  return store(env, principal, "link", LOGIN_LINK_TTL_MS, now);
}

/**
 * The caller a stored row stands for, if its token still stands: a team token's row must still be valid
 * (not revoked, not expired), the owner's token must be the one the row was opened with.
 */
async function principalOf(env: Env, row: WebSessionRow, now: Date): Promise<Principal | null> {
  if (row.tokenId === null) {
    const digest = ownerDigestOf(env);
    return row.teamId === OWNER_TEAM && digest !== null && row.ownerDigest === digest ? ownerPrincipal() : null;
  }
  const token = (await drizzle(env.DB).select().from(tokens).where(eq(tokens.id, row.tokenId)).limit(1))[0];
  if (!token || token.teamId !== row.teamId || tokenRowRefusal(token, now) !== null) return null;
  return principalOfRow(token);
}

/**
 * Uses a login link: marks it used in the same statement that finds it (so two requests racing with one
 * code open one session between them), then answers its caller; null for a code unknown, used or expired,
 * or whose token no longer stands.
 */
export async function redeemLoginCode(env: Env, code: string, now = new Date()): Promise<Principal | null> {
  const at = now.toISOString();
  const used = await drizzle(env.DB)
    .update(webSessions)
    .set({ usedAt: at })
    .where(and(eq(webSessions.id, idOf(code)), eq(webSessions.kind, "link"), isNull(webSessions.usedAt), gt(webSessions.expiresAt, at)))
    .returning();
  const row = used[0];
  return row ? principalOf(env, row, now) : null;
}

/** The session a cookie's value names, while it and its token stand; null otherwise. */
export async function sessionOf(env: Env, cookie: string | undefined, now = new Date()): Promise<Session | null> {
  if (!cookie || !/^[A-Za-z0-9_-]{43}$/.test(cookie)) return null;
  const id = idOf(cookie);
  const row = (
    await drizzle(env.DB)
      .select()
      .from(webSessions)
      .where(and(eq(webSessions.id, id), eq(webSessions.kind, "session"), gt(webSessions.expiresAt, now.toISOString())))
      .limit(1)
  )[0];
  if (!row) return null;
  const principal = await principalOf(env, row, now);
  return principal ? { principal, csrf: row.csrf, id } : null;
}

/** Ends a session (logout). */
export async function closeSession(env: Env, session: Session): Promise<void> {
  await drizzle(env.DB).delete(webSessions).where(eq(webSessions.id, session.id));
}
