import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { TEST_IDS, call, candidateBody, createLoopBody, drainOutbox, logOf, observationOf, postJson } from "./fixtures.js";

// The dashboard (DESIGN §11; docs/dashboard.md), as a browser meets it: a token exchanged once for a
// session cookie (the login form, or a one-time link), pages that need that session, a loop of another
// team that is "not found" exactly like a loop that never existed, and a cancel form that is refused
// (403) unless it carries the session's CSRF token and comes from this origin. Every refusal is checked
// for what it must leave behind: nothing — the loop still running with its log head where it was, no
// session row opened, no cookie set.

const [A, B] = TEST_IDS;

/** The origin `call` sends every request to (fixtures.ts): a form posted "from this site" names it. */
const ORIGIN = "http://lw.test";
/** Another site, as a forged form's Origin. */
const EVIL = "https://evil.example";
/** A loop id of the right shape that no one created: what "no such loop" looks like. */
const NO_SUCH_LOOP = "lp_000000000000000000000000";

/** The instance owner's token (the tests' configuration always sets one). */
function owner(): string {
  return env.OWNER_TOKEN ?? "";
}

// ---------------------------------------------------------------------------------------------------
// Requests

async function json<T>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  return JSON.parse(text) as T;
}

/** A browser's request: no bearer token, the session cookie when it has one, redirects not followed. */
function browse(path: string, cookie: string | null, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (cookie !== null) headers.set("cookie", cookie);
  return call(path, { redirect: "manual", ...init, headers }, null);
}

/**
 * A form post as a browser sends it: urlencoded, with an Origin header (this site's unless another is
 * named, none when `origin` is null).
 */
function postForm(
  path: string,
  fields: Record<string, string>,
  cookie: string | null,
  origin: string | null = ORIGIN,
  extra: HeadersInit = {},
): Promise<Response> {
  const headers = new Headers(extra);
  headers.set("content-type", "application/x-www-form-urlencoded");
  if (origin !== null) headers.set("origin", origin);
  return browse(path, cookie, { method: "POST", headers, body: new URLSearchParams(fields).toString() });
}

/** The session cookie a response sets, as a `Cookie` header value (`lw_session=…`), or null. */
function sessionCookieOf(response: Response): string | null {
  const match = /(?:^|,\s*)(lw_session=[A-Za-z0-9_-]+)/.exec(response.headers.get("set-cookie") ?? "");
  return match?.[1] ?? null;
}

/** Logs in with `token` through the form and answers the session cookie (the login must succeed). */
async function loginAs(token: string): Promise<string> {
  const response = await postForm("/login", { token, next: "/loops" }, null);
  expect(response.status, await response.clone().text()).toBe(303);
  const cookie = sessionCookieOf(response);
  if (cookie === null) throw new Error(`login set no session cookie: ${response.headers.get("set-cookie")}`);
  return cookie;
}

/** The CSRF token a page's forms carry (its hidden `csrf` input: the cancel form's, or the logout form's). */
function csrfOf(html: string): string {
  const token = /<input type="hidden" name="csrf" value="([^"]+)">/.exec(html)?.[1];
  if (token === undefined) throw new Error("the page has no csrf input");
  return token;
}

/** A page's HTML, which must answer 200. */
async function pageOf(path: string, cookie: string): Promise<string> {
  const response = await browse(path, cookie);
  const text = await response.text();
  expect(response.status, text).toBe(200);
  expect(response.headers.get("content-type")).toContain("text/html");
  return text;
}

// ---------------------------------------------------------------------------------------------------
// Teams, tokens, loops

/** A new team and its admin token. */
async function createTeam(name: string): Promise<{ teamId: string; admin: string }> {
  const created = await json<{ team: { team_id: string }; token: { token: string } }>(await postJson("/v1/teams", { name }), 201);
  return { teamId: created.team.team_id, admin: created.token.token };
}

/** A token of the admin's team with `scopes`: its secret and id (to revoke it). */
async function createToken(admin: string, scopes: string[]): Promise<{ token: string; tokenId: string }> {
  const created = await json<{ token: string; token_id: string }>(await postJson("/v1/tokens", { scopes }, admin), 201);
  return { token: created.token, tokenId: created.token_id };
}

/**
 * A running loop of the token's team (t0 fails two tests), with `candidates` proposed and left queued,
 * projected into D1 so the loops' list shows it. Answers its id and contract name.
 */
async function runningLoop(token: string, key: string, candidates = 0): Promise<{ loopId: string; name: string }> {
  const body = createLoopBody(`dash-${key}`, [A, B]);
  const created = await json<{ loop: { loop_id: string; status: string } }>(await postJson("/v1/loops", body, token), 201);
  expect(created.loop.status).toBe("running");
  const loopId = created.loop.loop_id;
  for (let index = 1; index <= candidates; index++)
    await json(await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(`dash-${key}-${index}`), token), 201);
  await drainOutbox(loopId);
  return { loopId, name: body.contract.name };
}

interface LoopSummary {
  status: string;
  halt: { halt_reason: string; exit_class: number; detail: string } | null;
  head: { seq: number; hash: string };
}

/** A loop as the API answers it (with the owner's token): its status, halt and log head. */
async function summaryOf(loopId: string): Promise<LoopSummary> {
  return json<LoopSummary>(await call(`/v1/loops/${loopId}`), 200);
}

/** What a refused request must not have changed about a loop: its summary's status and head, and its stored log. */
async function loopState(loopId: string): Promise<unknown> {
  const { status, halt, head } = await summaryOf(loopId);
  return { status, halt, head, log: await logOf(loopId) };
}

/** Asserts a loop is still running, with its log exactly as `before` recorded it. */
async function expectUntouched(loopId: string, before: unknown): Promise<void> {
  const now = await loopState(loopId);
  expect(now).toEqual(before);
  expect((await summaryOf(loopId)).status).toBe("running");
}

/** Every row of D1 `web_sessions` (sessions and login links): what a refused login must leave as it was. */
async function sessionRows(): Promise<Record<string, unknown>[]> {
  return (await env.DB.prepare("SELECT * FROM web_sessions ORDER BY id").all<Record<string, unknown>>()).results;
}

/** Asserts `response` is the login form answered 401: a token field, and no cookie set. */
async function expectLoginForm(response: Response): Promise<string> {
  const text = await response.text();
  expect(response.status, text).toBe(401);
  expect(response.headers.get("content-type")).toContain("text/html");
  expect(text).toContain('name="token"');
  expect(response.headers.get("set-cookie")).toBeNull();
  return text;
}

// ---------------------------------------------------------------------------------------------------

describe("the dashboard without a session", () => {
  // A cookie the browser may hold that opens nothing: none at all, one of the wrong shape, and a
  // well-formed secret that was never issued.
  // [what the browser holds, its Cookie header, a key for the test's own loop]
  const cookies: [string, string | null, string][] = [
    ["no cookie", null, "none"],
    ["a malformed cookie", "lw_session=not-a-session", "malformed"],
    ["an unknown session", `lw_session=${"A".repeat(43)}`, "unknown"],
  ];

  it.each(cookies)("answers pages with the login form (401) and no loop content, with %s", async (_label, cookie, key) => {
    const { loopId, name } = await runningLoop(owner(), `anon-${key}`, 1);
    for (const path of ["/loops", `/loops/${loopId}`, `/loops/${loopId}?part=live`, `/loops/${loopId}/candidates`, `/loops/${loopId}/candidates/c1`]) {
      const text = await expectLoginForm(await browse(path, cookie));
      // The form brings the browser back to the page it asked for; nothing of the loop is on it.
      expect(text).not.toContain(name);
      expect(text).not.toContain("data-live");
      expect(text).not.toContain("data-loops");
      expect(text).not.toContain('name="csrf"');
    }
  });

  it.each(cookies)("refuses the event stream, downloads and cancel (401) with %s, and the loop keeps running", async (_label, cookie, key) => {
    const { loopId } = await runningLoop(owner(), `anon-act-${key}`);
    const before = await loopState(loopId);
    for (const path of [`/loops/${loopId}/events`, `/loops/${loopId}/files/${"a".repeat(64)}`]) {
      const response = await browse(path, cookie);
      const text = await response.text();
      expect(response.status, `${path}: ${text}`).toBe(401);
      expect(response.headers.get("content-type")).not.toContain("text/event-stream");
      expect(text).not.toContain("loop_created");
    }
    // Even a form that looks right (this origin, a csrf field) does nothing without a session.
    const cancel = await postForm(`/loops/${loopId}/cancel`, { csrf: "A".repeat(43), reason: "anonymous" }, cookie);
    expect(cancel.status, await cancel.text()).toBe(401);
    await expectUntouched(loopId, before);
  });
});

describe("the pages' headers", () => {
  it("forbid framing (the cancel button cannot be clickjacked) and scripts from elsewhere, on pages, the login form and refusals", async () => {
    const cookie = await loginAs(owner());
    const { loopId } = await runningLoop(owner(), "headers");
    for (const [path, withCookie] of [
      ["/loops", true],
      [`/loops/${loopId}`, true],
      [`/loops/${NO_SUCH_LOOP}`, true],
      ["/login", false],
      [`/loops/${loopId}`, false],
    ] as const) {
      const response = await browse(path, withCookie ? cookie : null);
      await response.arrayBuffer();
      const policy = response.headers.get("content-security-policy") ?? "";
      expect(policy, path).toContain("frame-ancestors 'none'");
      expect(policy, path).toContain("script-src 'self'");
      expect(policy, path).toContain("form-action 'self'");
      expect(response.headers.get("x-frame-options"), path).toBe("DENY");
      expect(response.headers.get("referrer-policy"), path).toBe("no-referrer");
    }
  });
});

describe("logging in with a token", () => {
  it("answers 303 to /loops with an HttpOnly, SameSite=Strict session cookie that opens the team's loops", async () => {
    const team = await createTeam("dash-login");
    const { loopId, name } = await runningLoop(team.admin, "login");
    const response = await postForm("/login", { token: team.admin, next: "/loops" }, null);
    expect(response.status, await response.clone().text()).toBe(303);
    expect(response.headers.get("location")).toBe("/loops");
    const setCookie = response.headers.get("set-cookie") ?? "";
    expect(setCookie).toMatch(/^lw_session=[A-Za-z0-9_-]{43};/);
    // Each attribute is what keeps the cookie from a script (HttpOnly) and from another site's page (Strict).
    expect(setCookie).toMatch(/;\s*HttpOnly(;|$)/);
    expect(setCookie).toMatch(/;\s*SameSite=Strict(;|$)/);
    expect(setCookie).toMatch(/;\s*Path=\/(;|$)/);
    // Plain http (the tests' origin) gets no Secure flag, or the browser would drop the cookie.
    expect(setCookie).not.toMatch(/;\s*Secure/);

    const cookie = sessionCookieOf(response) ?? "";
    const list = await pageOf("/loops", cookie);
    expect(list).toContain(`data-loop="${loopId}"`);
    expect(list).toContain(name);
    // The page carries the session's CSRF token (for logout), and asks not to be cached.
    expect(csrfOf(list)).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect((await browse("/loops", cookie)).headers.get("cache-control")).toBe("no-store");
  });

  // Each refused login must open no session: the table is compared whole before and after.
  const refused: [string, () => string][] = [
    ["an unknown token", () => "lwt_not_a_real_token_at_all"],
    ["an empty token", () => ""],
    ["the owner token with one character changed", () => `${owner().slice(0, -1)}#`],
  ];

  it.each(refused)("refuses %s with the login form (401), no cookie and no session row", async (_label, token) => {
    const before = await sessionRows();
    const response = await postForm("/login", { token: token(), next: "/loops" }, null);
    const text = await expectLoginForm(response);
    expect(text).toContain('role="alert"');
    expect(await sessionRows()).toEqual(before);
  });

  it("refuses a login posted from another site or without an Origin (403): a forged login opens no session", async () => {
    const before = await sessionRows();
    for (const origin of [EVIL, null]) {
      const response = await postForm("/login", { token: owner(), next: "/loops" }, null, origin);
      expect(response.status, `${origin}: ${await response.text()}`).toBe(403);
      expect(response.headers.get("set-cookie")).toBeNull();
    }
    expect(await sessionRows()).toEqual(before);
  });

  // Where a login may send the browser on: a dashboard page of this origin, never another site.
  const nexts: [string, string][] = [
    ["/loops/lp_0123456789abcdef01234567", "/loops/lp_0123456789abcdef01234567"],
    ["/loops?status=running", "/loops?status=running"],
    ["https://evil.example/", "/loops"],
    ["//evil.example", "/loops"],
    ["//evil.example/loops", "/loops"],
    ["/\\evil.example", "/loops"],
    ["/loopsevil", "/loops"],
    ["/login", "/loops"],
    ["javascript:alert(1)", "/loops"],
    ["", "/loops"],
  ];

  it.each(nexts)("sends the browser on from next=%j to %s", async (next, location) => {
    const response = await postForm("/login", { token: owner(), next }, null);
    expect(response.status, await response.text()).toBe(303);
    expect(response.headers.get("location")).toBe(location);
    expect(sessionCookieOf(response)).not.toBeNull();
  });
});

describe("one-time login links", () => {
  it("opens one session once: the link answers a cookie the first time and 401 with none after", async () => {
    const team = await createTeam("dash-link");
    const { loopId } = await runningLoop(team.admin, "link");
    const reader = await createToken(team.admin, ["read"]);
    const link = await json<{ url: string; expires_at: string }>(await postJson("/v1/dashboard/links", {}, reader.token), 201);
    const url = new URL(link.url);
    expect(url.origin).toBe(ORIGIN);
    expect(url.pathname).toMatch(/^\/login\/[A-Za-z0-9_-]{43}$/);
    // It waits five minutes at most to be opened.
    const wait = Date.parse(link.expires_at) - Date.now();
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(5 * 60 * 1000);

    const first = await browse(url.pathname, null);
    expect(first.status, await first.clone().text()).toBe(200);
    const cookie = sessionCookieOf(first);
    expect(cookie).not.toBeNull();
    expect(first.headers.get("set-cookie")).toMatch(/HttpOnly/);
    expect(await pageOf("/loops", cookie ?? "")).toContain(`data-loop="${loopId}"`);

    // Used once: the second opening is refused and opens nothing.
    const before = await sessionRows();
    await expectLoginForm(await browse(url.pathname, null));
    expect(await sessionRows()).toEqual(before);
  });

  it("refuses a code never issued, and a link whose token was revoked before it was opened (401, no session)", async () => {
    const team = await createTeam("dash-link-revoked");
    const member = await createToken(team.admin, ["propose"]);
    const link = await json<{ url: string }>(await postJson("/v1/dashboard/links", {}, member.token), 201);
    await json(await call(`/v1/tokens/${member.tokenId}`, { method: "DELETE" }, team.admin), 200);
    const before = await sessionRows();
    for (const path of [new URL(link.url).pathname, `/login/${"B".repeat(43)}`, "/login/short"]) {
      await expectLoginForm(await browse(path, null));
    }
    // The revoked token's link is spent by the attempt (used_at set) but opened no session.
    const after = await sessionRows();
    expect(after.filter((row) => row["kind"] === "session")).toEqual(before.filter((row) => row["kind"] === "session"));
  });

  it("needs a bearer token to mint a link (401 without one)", async () => {
    const before = await sessionRows();
    expect((await call("/v1/dashboard/links", { method: "POST" }, null)).status).toBe(401);
    expect(await sessionRows()).toEqual(before);
  });
});

describe("team isolation", () => {
  it("answers a session of team A 404 for everything of team B's loop, exactly as for a loop that does not exist", async () => {
    const teamA = await createTeam("dash-iso-a");
    const teamB = await createTeam("dash-iso-b");
    const loopA = await runningLoop(teamA.admin, "iso-a");
    const loopB = await runningLoop(teamB.admin, "iso-b", 1);
    const cookieA = await loginAs(teamA.admin);
    const csrfA = csrfOf(await pageOf(`/loops/${loopA.loopId}`, cookieA));
    const before = await loopState(loopB.loopId);

    // Each request against B's loop, and the same against a loop that never existed: the answers must
    // be the same (status and page), or the difference would tell A that B's loop exists.
    const requests: [string, (loopId: string) => Promise<Response>][] = [
      ["the loop page", (id) => browse(`/loops/${id}`, cookieA)],
      ["the live fragment", (id) => browse(`/loops/${id}?part=live`, cookieA)],
      ["the candidates' list", (id) => browse(`/loops/${id}/candidates`, cookieA)],
      ["a candidate page", (id) => browse(`/loops/${id}/candidates/c1`, cookieA)],
      ["the event stream", (id) => browse(`/loops/${id}/events`, cookieA)],
      ["a download", (id) => browse(`/loops/${id}/files/${"a".repeat(64)}`, cookieA)],
      ["cancel, with A's own csrf", (id) => postForm(`/loops/${id}/cancel`, { csrf: csrfA, reason: "not mine" }, cookieA)],
    ];
    for (const [label, send] of requests) {
      const theirs = await send(loopB.loopId);
      const theirsText = await theirs.text();
      expect(theirs.status, `${label}: ${theirsText}`).toBe(404);
      expect(theirs.headers.get("content-type"), label).toContain("text/html");
      expect(theirsText, label).not.toContain(loopB.name);
      const none = await send(NO_SUCH_LOOP);
      expect(none.status, label).toBe(404);
      expect(theirsText.replaceAll(loopB.loopId, "ID"), label).toBe((await none.text()).replaceAll(NO_SUCH_LOOP, "ID"));
    }
    await expectUntouched(loopB.loopId, before);

    // A's list shows A's loop only; the owner's shows both.
    const listA = await pageOf("/loops", cookieA);
    expect(listA).toContain(`data-loop="${loopA.loopId}"`);
    expect(listA).not.toContain(`data-loop="${loopB.loopId}"`);
    expect(listA).not.toContain(loopB.name);
    const ownerCookie = await loginAs(owner());
    const listOwner = await pageOf("/loops", ownerCookie);
    expect(listOwner).toContain(`data-loop="${loopA.loopId}"`);
    expect(listOwner).toContain(`data-loop="${loopB.loopId}"`);
    expect(await pageOf(`/loops/${loopB.loopId}`, ownerCookie)).toContain(loopB.name);
  });
});

describe("a session follows its token", () => {
  it("ends when the token that opened it is revoked: the same cookie then gets the login form (401) and cancels nothing", async () => {
    const team = await createTeam("dash-revoke");
    const { loopId } = await runningLoop(team.admin, "revoke");
    const member = await createToken(team.admin, ["propose"]);
    const cookie = await loginAs(member.token);
    const csrf = csrfOf(await pageOf(`/loops/${loopId}`, cookie));
    // Another session of the same team, opened with another token, is not ended with it.
    const adminCookie = await loginAs(team.admin);

    const revoked = await json<{ revoked_at: string | null }>(await call(`/v1/tokens/${member.tokenId}`, { method: "DELETE" }, team.admin), 200);
    expect(revoked.revoked_at).not.toBeNull();

    const before = await loopState(loopId);
    await expectLoginForm(await browse("/loops", cookie));
    await expectLoginForm(await browse(`/loops/${loopId}`, cookie));
    const cancel = await postForm(`/loops/${loopId}/cancel`, { csrf, reason: "after revoke" }, cookie);
    expect(cancel.status, await cancel.text()).toBe(401);
    await expectUntouched(loopId, before);
    expect(await pageOf(`/loops/${loopId}`, adminCookie)).toContain("data-cancel");
  });
});

describe("CSRF on the cancel form", () => {
  it("refuses a cancel without the session's csrf or from another origin (403), changing nothing; the page's own form cancels (303)", async () => {
    const team = await createTeam("dash-csrf");
    const { loopId } = await runningLoop(team.admin, "csrf");
    const member = await createToken(team.admin, ["propose"]);
    const cookie = await loginAs(member.token);
    const loopPage = await pageOf(`/loops/${loopId}`, cookie);
    expect(loopPage).toContain("data-cancel");
    const csrf = csrfOf(loopPage);
    // Another session's token (the same team's admin's) is a valid token, but not this session's.
    const otherCsrf = csrfOf(await pageOf(`/loops/${loopId}`, await loginAs(team.admin)));
    expect(otherCsrf).not.toBe(csrf);

    const forgeries: [string, Record<string, string>, string | null, HeadersInit][] = [
      ["no csrf field", { reason: "forged" }, ORIGIN, {}],
      ["an empty csrf", { csrf: "", reason: "forged" }, ORIGIN, {}],
      ["a wrong csrf", { csrf: "A".repeat(43), reason: "forged" }, ORIGIN, {}],
      ["another session's csrf", { csrf: otherCsrf, reason: "forged" }, ORIGIN, {}],
      ["the right csrf from another site's Origin", { csrf, reason: "forged" }, EVIL, {}],
      ["the right csrf with neither Origin nor Sec-Fetch-Site", { csrf, reason: "forged" }, null, {}],
      ["the right csrf, Sec-Fetch-Site cross-site", { csrf, reason: "forged" }, null, { "sec-fetch-site": "cross-site" }],
    ];
    const before = await loopState(loopId);
    for (const [label, fields, origin, headers] of forgeries) {
      const response = await postForm(`/loops/${loopId}/cancel`, fields, cookie, origin, headers);
      const text = await response.text();
      expect(response.status, `${label}: ${text}`).toBe(403);
      expect(response.headers.get("content-type"), label).toContain("text/html");
      await expectUntouched(loopId, before);
    }

    // The page's own token with a reason longer than the API takes: a 400 saying so, not a CSRF refusal.
    const tooLong = await postForm(`/loops/${loopId}/cancel`, { csrf, reason: "x".repeat(501) }, cookie);
    expect(tooLong.status).toBe(400);
    expect(await tooLong.text()).toContain("form is malformed");
    await expectUntouched(loopId, before);

    const cancelled = await postForm(`/loops/${loopId}/cancel`, { csrf, reason: "wrong branch" }, cookie);
    expect(cancelled.status, await cancelled.text()).toBe(303);
    expect(cancelled.headers.get("location")).toBe(`/loops/${loopId}?done=cancelled`);
    const after = await summaryOf(loopId);
    expect(after.status).toBe("halted");
    expect(after.halt).toMatchObject({ halt_reason: "cancelled", exit_class: 11 });
    expect(after.halt?.detail).toContain("wrong branch");
    // The page it returns to says so, and has no cancel form any more.
    const done = await pageOf(`/loops/${loopId}?done=cancelled`, cookie);
    expect(done).toContain('role="status"');
    expect(done).toContain('data-halt="cancelled"');
    expect(done).not.toContain("data-cancel");
  });

  it("logs out only with the session's csrf: the cookie then opens nothing", async () => {
    const cookie = await loginAs(owner());
    const csrf = csrfOf(await pageOf("/loops", cookie));
    const refused = await postForm("/logout", { csrf: "A".repeat(43) }, cookie);
    expect(refused.status, await refused.text()).toBe(403);
    await pageOf("/loops", cookie);
    const out = await postForm("/logout", { csrf }, cookie);
    expect(out.status, await out.text()).toBe(303);
    expect(out.headers.get("location")).toBe("/login");
    expect(out.headers.get("set-cookie")).toMatch(/^lw_session=;/);
    await expectLoginForm(await browse("/loops", cookie));
  });
});

describe("a read-only session", () => {
  it("sees the loop page without a cancel form, and its cancel is refused (403) even with the right csrf", async () => {
    const team = await createTeam("dash-read");
    const { loopId, name } = await runningLoop(team.admin, "read");
    const reader = await createToken(team.admin, ["read"]);
    const cookie = await loginAs(reader.token);
    const loopPage = await pageOf(`/loops/${loopId}`, cookie);
    expect(loopPage).toContain(name);
    expect(loopPage).not.toContain("data-cancel");
    // The csrf of its logout form: the session's own, so only the scope is left to refuse the cancel.
    const csrf = csrfOf(loopPage);
    const before = await loopState(loopId);
    const response = await postForm(`/loops/${loopId}/cancel`, { csrf, reason: "read-only" }, cookie);
    const text = await response.text();
    expect(response.status, text).toBe(403);
    // Refused for its scope (the form itself passed the CSRF check), in words on a page.
    expect(text).toContain("do not include propose");
    await expectUntouched(loopId, before);
  });
});

describe("the loop's pages", () => {
  /**
   * A loop whose t0 fails A and B: c1 fixes B (promoted), c2 fixes A but breaks B again (rejected,
   * regressed), c3 is proposed and not evaluated. Answers the verdicts the reports got back.
   */
  async function evaluatedLoop(key: string): Promise<{ loopId: string; verdicts: { candidate_id: string; decision: string }[] }> {
    const token = owner();
    const { loopId } = await runningLoop(token, key);
    const verdicts: { candidate_id: string; decision: string }[] = [];
    for (const [index, failing] of [[A], [B]].entries()) {
      await json(await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(`${key}-${index}`), token), 201);
      const lease = await json<{ lease_id: string; fencing_token: number }>(
        await postJson(`/v1/loops/${loopId}/leases`, { runner_id: `runner-${key}`, labels: { os: "linux" } }, token),
        200,
      );
      const reported = await json<{ verdict: { candidate_id: string; decision: string } }>(
        await postJson(`/v1/leases/${lease.lease_id}/report`, { fencing_token: lease.fencing_token, observation: observationOf(failing) }, token),
        200,
      );
      verdicts.push(reported.verdict);
    }
    await json(await postJson(`/v1/loops/${loopId}/candidates`, candidateBody(`${key}-queued`), token), 201);
    expect(verdicts.map((verdict) => verdict.decision)).toEqual(["promoted", "rejected"]);
    return { loopId, verdicts };
  }

  it("draws the chart over the decided candidates, and answers ?part=live as the fragment alone", async () => {
    const { loopId, verdicts } = await evaluatedLoop("chart");
    const cookie = await loginAs(owner());
    const loopPage = await pageOf(`/loops/${loopId}`, cookie);
    const chart = /<svg class="chart"[^>]*>/.exec(loopPage)?.[0] ?? "";
    expect(chart).not.toBe("");
    // Every decided candidate is a point (a check_fixpoint verdict always has a failing count); the
    // queued c3 is not.
    expect(chart).toContain(`data-points="${verdicts.length}"`);
    expect(chart).toContain(`data-promotions="${verdicts.filter((verdict) => verdict.decision === "promoted").length}"`);
    expect(loopPage).toContain('id="live"');

    const head = (await summaryOf(loopId)).head;
    const live = await pageOf(`/loops/${loopId}?part=live`, cookie);
    expect(live).not.toContain("<html");
    expect(live).not.toContain("<!doctype");
    expect(live).not.toContain("data-cancel");
    expect(live).toContain('<svg class="chart"');
    expect(live).toContain(`data-head="${head.seq}"`);
  });

  it("shows a candidate's request to change protected files, where it waits and then who answered, and the context the runner gave its agent", async () => {
    const token = owner();
    const { loopId } = await runningLoop(token, "review");
    const context = {
      context_sha256: "c".repeat(64),
      files: [{ path: "src/a/b/c/deep.js", sha256: "d".repeat(64), tier: "stack_trace" }],
      tokens: 812,
      budget: 32_000,
      left_out: ["dependents"],
    };
    const request = { files: ["test/parse.test.js"], why: "the test expects the wrong error message" };
    await json(await postJson(`/v1/loops/${loopId}/candidates`, { ...candidateBody("review-1"), review_request: request, context }, token), 201);
    const cookie = await loginAs(token);

    const waiting = await pageOf(`/loops/${loopId}/candidates/c1`, cookie);
    expect(waiting).toContain("awaiting a person&#39;s review");
    expect(waiting).toContain("<code>test/parse.test.js</code>");
    expect(waiting).toContain("the test expects the wrong error message");
    expect(/<p data-review="awaiting">(.*?)<\/p>/s.exec(waiting)?.[1]).toMatch(
      /until \S+Z, then the loop halts <code>human_required<\/code>.*loopwarden ack c1/s,
    );
    expect(/<p data-context="1">(.*?)<\/p>/s.exec(waiting)?.[1]).toMatch(/1 file\(s\), about 812 of 32000 tokens.*left out for the budget: dependents/s);
    expect(waiting).toContain("<code>src/a/b/c/deep.js</code></td><td>stack_trace</td>");
    // The loop's page names its status too, not "queued".
    expect(await pageOf(`/loops/${loopId}/candidates`, cookie)).toContain("awaiting a person&#39;s review");

    await json(await postJson(`/v1/loops/${loopId}/candidates/c1/review`, { decision: "ack", note: "the message changed in v2" }, token), 201);
    const answered = await pageOf(`/loops/${loopId}/candidates/c1`, cookie);
    expect(/<p data-review="ack">(.*?)<\/p>/s.exec(answered)?.[1]).toMatch(/^Approved by <code>owner<\/code> at \S+: the message changed in v2$/);
    expect(answered).not.toContain('data-review="awaiting"');
  });

  it("shows a rejected candidate's failing tests, and answers an unknown candidate 404", async () => {
    const { loopId } = await evaluatedLoop("candidate");
    const cookie = await loginAs(owner());
    const rejected = await pageOf(`/loops/${loopId}/candidates/c2`, cookie);
    expect(rejected).toContain('data-verdict="rejected"');
    // Which machine measured it: the runner and the labels it claimed, as its lease recorded them.
    expect(/<p data-runner="[^"]+">.*?<\/p>/s.exec(rejected)?.[0]).toMatch(/runner <code>runner-[^<]+<\/code> \(labels: os=linux\)/);
    const failing = /<ul data-tests="failing tests">(.*?)<\/ul>/s.exec(rejected)?.[1] ?? "";
    expect(failing).toContain(`<code>${B}</code>`);
    expect(failing).not.toContain(`<code>${A}</code>`);
    // B passed in c1, the best-so-far: it is named as regressed too.
    expect(/<ul data-tests="regressed tests">(.*?)<\/ul>/s.exec(rejected)?.[1] ?? "").toContain(`<code>${B}</code>`);

    const list = await pageOf(`/loops/${loopId}/candidates`, cookie);
    for (const id of ["c1", "c2", "c3"]) expect(list).toContain(`/loops/${loopId}/candidates/${id}"`);

    for (const candidate of ["c99", "c0", "t0", "x"]) {
      const response = await browse(`/loops/${loopId}/candidates/${candidate}`, cookie);
      const text = await response.text();
      expect(response.status, `${candidate}: ${text}`).toBe(404);
      expect(response.headers.get("content-type")).toContain("text/html");
      expect(text).toContain("Not found");
    }
  });
});
