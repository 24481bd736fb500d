import { Hono, type Context, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { csrf } from "hono/csrf";
import { html } from "hono/html";
import * as z from "zod";
import { CancelRequest, type LoginLink } from "#shared/wire/api.js";
import { authenticate, requireScope, type AuthEnv, type AuthVariables, type Principal } from "../http/auth.js";
import { ApiError } from "../http/http-errors.js";
import { readParam } from "../http/validate.js";
import { authBlocked, authFailuresLimited, clientAddress, countAuthFailure, holdToLimit } from "../http/rate-limits.js";
import { loginPage, page, pageHeaders } from "./layout.js";
import { dashboardError } from "./error-page.js";
import { closeSession, mintLoginCode, openSession, redeemLoginCode, sessionOf, SESSION_TTL_MS, type Session } from "./sessions.js";

// Logging in to the dashboard (DESIGN §11; docs/dashboard.md): a token pasted once into a form, or a
// one-time link, becomes a session cookie (HttpOnly: no script reads it; SameSite=Strict: no other site's
// page sends it; Secure over HTTPS). Every page then needs that session, and every form it posts carries
// the session's CSRF token and comes from this origin (hono/csrf checks Origin and Sec-Fetch-Site).

/** The cookie that carries a session's secret. */
export const SESSION_COOKIE = "lw_session";

/** The context of a dashboard route: the caller as the API sees it (`principal`), and its session. */
export type DashboardEnv = { Bindings: Env; Variables: AuthVariables & { session: Session } };

/** Forms are small: a token, a reason, a CSRF token; a longer body is refused (413) unread. */
const FORM_BYTES = 16 * 1024;
export const formLimit = bodyLimit({
  maxSize: FORM_BYTES,
  onError: () => {
    throw new ApiError(413, "body_too_large", `forms are limited to ${FORM_BYTES} bytes`);
  },
});

/** Where a login may send the browser on: a dashboard page of this origin, never another site. */
export function safeNext(next: unknown): string {
  return typeof next === "string" && /^\/loops(?:[/?#][^\s\\]*)?$/.test(next) && !next.startsWith("//") ? next : "/loops";
}

/** Answers a new session's cookie. */
function setSession(c: Context, secret: string): void {
  setCookie(c, SESSION_COOKIE, secret, {
    httpOnly: true,
    sameSite: "Strict",
    path: "/",
    secure: new URL(c.req.url).protocol === "https:",
    maxAge: Math.floor(SESSION_TTL_MS / 1000),
  });
}

/** Holds a signed-in caller to the rate limit its token would be held to (auth.ts `requireToken`). */
async function holdCaller(c: Context<DashboardEnv>, principal: Principal): Promise<void> {
  if (principal.owner) {
    await holdToLimit(c.env.OWNER_RATE_LIMIT, clientAddress(c.req.raw), () => "the owner's session sent too many requests from this address");
  } else {
    const team = principal.team_id;
    await holdToLimit(c.env.TEAM_RATE_LIMIT, team, () => `team ${team} sent too many requests (the limit holds for all of the team's tokens together)`);
  }
}

/**
 * Every dashboard route needs a session, settled before anything else is read (DESIGN §11: authorization
 * before any side effect). Without one, a page answers 401 with the login form (which brings the browser
 * back here after); the event stream, downloads and forms answer 401 in words.
 */
export function requireSession(): MiddlewareHandler<DashboardEnv> {
  return async (c, next) => {
    const address = clientAddress(c.req.raw);
    if (authBlocked(address)) throw authFailuresLimited(address);
    const session = await sessionOf(c.env, getCookie(c, SESSION_COOKIE));
    if (!session) {
      const url = new URL(c.req.url);
      const wantsPage = c.req.method === "GET" && !url.pathname.includes("/files/") && !url.pathname.endsWith("/events");
      if (wantsPage) return c.html(loginPage(`${url.pathname}${url.search}`), 401, { "Cache-Control": "no-store" });
      throw new ApiError(401, "unauthenticated", "log in to the dashboard first (/login)");
    }
    await holdCaller(c, session.principal);
    c.set("principal", session.principal);
    c.set("session", session);
    c.header("Cache-Control", "no-store");
    await next();
  };
}

/** Whether two strings are equal, in time that does not depend on where they differ. */
function sameSecret(a: string, b: string): boolean {
  const encoder = new TextEncoder();
  const left = encoder.encode(a);
  const right = encoder.encode(b);
  return left.length === right.length && crypto.subtle.timingSafeEqual(left, right);
}

const ActionForm = z.object({ reason: CancelRequest.shape.reason });

/**
 * A form posted from a dashboard page: from this origin (hono/csrf: Origin, else Sec-Fetch-Site, checked
 * before this) and carrying the session's CSRF token, else refused (403) before anything is done; then
 * its fields, validated (400).
 */
export async function readActionForm(c: Context<DashboardEnv>): Promise<{ reason?: string | undefined }> {
  const form = await c.req.parseBody();
  const csrfToken = form["csrf"];
  if (typeof csrfToken !== "string" || !sameSecret(csrfToken, c.get("session").csrf)) {
    throw new ApiError(403, "csrf", "this form did not come from the page it belongs to: reload the page and try again");
  }
  return readParam({ reason: typeof form["reason"] === "string" ? form["reason"] : undefined }, ActionForm, "form");
}

/** Login, login links and logout, mounted at the root. */
export const loginRoutes = new Hono<DashboardEnv>();
loginRoutes.onError(dashboardError);
loginRoutes.use("/login", pageHeaders);
loginRoutes.use("/login/*", pageHeaders);
loginRoutes.use("/logout", pageHeaders);

const sameOrigin = csrf();

loginRoutes.get("/login", (c) => c.html(loginPage(safeNext(c.req.query("next"))), 200, { "Cache-Control": "no-store" }));

loginRoutes.post("/login", sameOrigin, formLimit, async (c) => {
  const address = clientAddress(c.req.raw);
  if (authBlocked(address)) throw authFailuresLimited(address);
  const form = await c.req.parseBody();
  const next = safeNext(form["next"]);
  const token = typeof form["token"] === "string" ? form["token"].trim() : "";
  let principal: Principal;
  try {
    principal = await authenticate(c.env, `Bearer ${token}`, new Date());
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 401) throw error;
    await countAuthFailure(c.env.AUTH_FAILURE_RATE_LIMIT, address);
    return c.html(loginPage(next, `That token is not valid here: ${error.message}.`), 401, { "Cache-Control": "no-store" });
  }
  const session = await openSession(c.env, principal);
  setSession(c, session.secret);
  return c.redirect(next, 303);
});

loginRoutes.get("/login/:code", async (c) => {
  const address = clientAddress(c.req.raw);
  if (authBlocked(address)) throw authFailuresLimited(address);
  const code = c.req.param("code");
  const principal = /^[A-Za-z0-9_-]{43}$/.test(code) ? await redeemLoginCode(c.env, code) : null;
  if (!principal) {
    await countAuthFailure(c.env.AUTH_FAILURE_RATE_LIMIT, address);
    return c.html(loginPage("/loops", "That login link was used already, has expired, or was never issued. Paste a token, or ask for a new link."), 401, {
      "Cache-Control": "no-store",
    });
  }
  const session = await openSession(c.env, principal);
  setSession(c, session.secret);
  // A page that moves on by itself rather than a redirect: the next request starts from this origin, so
  // the SameSite=Strict cookie just set goes with it whatever opened the link.
  const next = safeNext(c.req.query("next"));
  return c.html(page("Logged in", html`<meta http-equiv="refresh" content="0; url=${next}"><h1>Logged in</h1><p><a href="${next}">Go on</a>.</p>`), 200, {
    "Cache-Control": "no-store",
  });
});

loginRoutes.post("/logout", sameOrigin, formLimit, requireSession(), async (c) => {
  await readActionForm(c);
  await closeSession(c.env, c.get("session"));
  deleteCookie(c, SESSION_COOKIE, { path: "/" });
  return c.redirect("/login", 303);
});

/** The API's side: a one-time link for the caller's token (`POST /v1/dashboard/links`), what `serve` and `run` print. */
export const loginLinkRoutes = new Hono<AuthEnv>();

loginLinkRoutes.post("/links", async (c) => {
  const principal = requireScope(c, "read");
  const code = await mintLoginCode(c.env, principal);
  const answer: LoginLink = { url: new URL(`/login/${code.secret}`, c.req.url).href, expires_at: code.expiresAt };
  return c.json(answer, 201);
});
