import { bytesToHex } from "@noble/hashes/utils.js";
import { and, desc, eq, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { Hono, type Context } from "hono";
import { parseDuration } from "#shared/duration.js";
import { formatLabels, labelsSatisfy } from "#shared/engine/labels.js";
import { Labels } from "#shared/wire/contract.js";
import {
  CreateTeamRequest,
  CreateTokenRequest,
  RevokeTokenRequest,
  TokenId,
  TokenListQuery,
  type Identity,
  type Scope,
  type TeamCreated,
  type TeamList,
  type TokenCreated,
  type TokenList,
  type TokenRevoked,
  type TokenView,
} from "#shared/wire/auth.js";
import { grantedScopes, mintToken, requireScope, type AuthEnv, type Principal } from "../http/auth.js";
import { teams, tokens, type TokenRow } from "../db/schema.js";
import { loopStub } from "../http/loop-access.js";
import { ApiError } from "../http/http-errors.js";
import { readJson, readParam } from "../http/validate.js";

// Teams and tokens (DESIGN §11), mounted at `/v1`. The owner creates teams; each team's admins manage
// its tokens; the owner may manage any team's (naming it), so a team that lost its admin token is not
// locked out for good. A token never makes a token that can do more than itself (`requireDelegable`),
// and a token restricted to a loop sees and revokes only the tokens restricted to that loop.

export const tenancyRoutes = new Hono<AuthEnv>();

function tokenView(row: TokenRow): TokenView {
  return {
    token_id: row.id,
    team_id: row.teamId,
    scopes: row.scopes.split(",") as Scope[],
    loop_id: row.loopId,
    name: row.name,
    created_at: row.createdAt,
    expires_at: row.expiresAt,
    revoked_at: row.revokedAt,
    labels: row.labels === null ? null : Labels.parse(JSON.parse(row.labels)),
  };
}

function requireOwner(c: Context<AuthEnv>): Principal {
  const principal = c.get("principal");
  if (!principal.owner) throw new ApiError(403, "forbidden", "only the instance owner's token (OWNER_TOKEN) manages teams");
  return principal;
}

/**
 * The team an admin call acts on, for a caller holding the admin scope: a team token's own (naming
 * another is 403), or for the owner the one named (404 when no such team exists), or null when the
 * owner names none — the owner's token belongs to no team.
 */
async function teamNamed(c: Context<AuthEnv>, principal: Principal, named: string | undefined): Promise<string | null> {
  if (!principal.owner) {
    // A team admin naming another team learns nothing about it: it is not theirs to name.
    if (named !== undefined && named !== principal.team_id) throw new ApiError(403, "forbidden", "a team's token manages only its own team's tokens");
    return principal.team_id;
  }
  if (named === undefined) return null;
  const team = await drizzle(c.env.DB).select({ id: teams.id }).from(teams).where(eq(teams.id, named)).get();
  if (!team) throw new ApiError(404, "not_found", `no team ${named}`);
  return named;
}

/** What a new token may do: the part of its row a creator delegates. */
interface Grant {
  scopes: readonly Scope[];
  loopId: string | null;
  expiresAt: string | null;
  name: string | null;
  /** The runner labels it may claim; null: any. */
  labels: Labels | null;
}

/** A token request's expiry as a time, from `expires_in` (a duration from now); null: until revoked. */
function expiryOf(expiresIn: string | undefined, now: Date): string | null {
  const lifetime = expiresIn === undefined ? null : parseDuration(expiresIn);
  return lifetime === null ? null : new Date(now.getTime() + lifetime).toISOString();
}

/**
 * Refuses (403) a token its creator may not make. A token creates only tokens that can do no more than
 * itself: scopes it holds; when it is restricted to a loop, restricted to that same loop; when it may
 * claim only some runner labels, limited to those or fewer; when it expires, expiring no later. (Only
 * admin tokens create tokens, and admin holds every scope, so the first rule is one no request can break
 * today; the others are what keep a restriction, a label limit or an expiry from being escaped by
 * minting a token without it.) The owner's token may make any.
 */
function requireDelegable(principal: Principal, grant: Grant): void {
  if (principal.owner) return;
  const beyond = grantedScopes(grant.scopes).filter((scope) => !principal.scopes.includes(scope));
  if (beyond.length > 0) throw new ApiError(403, "forbidden", `a token cannot grant scopes it does not hold (${beyond.join(", ")})`);
  if (principal.loop_id !== null && grant.loopId !== principal.loop_id) {
    throw new ApiError(
      403,
      "forbidden",
      `this token is restricted to loop ${principal.loop_id}: a token it creates must be restricted to that loop too (loop_id; --loop ${principal.loop_id})`,
    );
  }
  if (principal.labels !== null) {
    const allowed = principal.labels;
    if (grant.labels === null || !labelsSatisfy(grant.labels, allowed)) {
      const shown = formatLabels(allowed);
      throw new ApiError(
        403,
        "forbidden",
        `this token may claim only the labels ${shown}: a token it creates must be limited to those or fewer (labels; --labels ${shown})`,
      );
    }
  }
  if (principal.expires_at !== null && (grant.expiresAt === null || Date.parse(grant.expiresAt) > Date.parse(principal.expires_at))) {
    // The longest lifetime still allowed, in whole minutes, as `expires_in` takes it.
    const minutesLeft = Math.floor((Date.parse(principal.expires_at) - Date.now()) / 60_000);
    throw new ApiError(
      403,
      "forbidden",
      `this token expires at ${principal.expires_at}: a token it creates must expire no later` +
        (grant.expiresAt === null ? "" : `, not at ${grant.expiresAt}`) +
        (minutesLeft >= 1 ? ` (expires_in of at most ${minutesLeft}m; --expires ${minutesLeft}m)` : ""),
    );
  }
}

/** A new token row for a team, and its secret (shown once). */
async function newToken(teamId: string, grant: Grant, createdBy: string, now: Date): Promise<{ row: TokenRow; secret: string }> {
  const minted = await mintToken();
  const row: TokenRow = {
    id: minted.id,
    teamId,
    secretHash: minted.secretHash,
    scopes: grant.scopes.join(","),
    loopId: grant.loopId,
    name: grant.name,
    createdAt: now.toISOString(),
    createdBy,
    expiresAt: grant.expiresAt,
    revokedAt: null,
    labels: grant.labels === null ? null : JSON.stringify(grant.labels),
  };
  return { row, secret: minted.secret };
}

tenancyRoutes.post("/teams", async (c) => {
  requireOwner(c);
  const body = await readJson(c, CreateTeamRequest);
  const db = drizzle(c.env.DB);
  const existing = await db.select({ id: teams.id }).from(teams).where(eq(teams.name, body.name)).get();
  if (existing) throw new ApiError(409, "team_exists", `a team named ${body.name} exists (${existing.id})`);
  const now = new Date();
  const team = { id: `tm_${bytesToHex(crypto.getRandomValues(new Uint8Array(8)))}`, name: body.name, createdAt: now.toISOString() };
  const { row, secret } = await newToken(team.id, { scopes: ["admin"], loopId: null, expiresAt: null, name: "first admin token", labels: null }, "owner", now);
  // The team and its first admin token are written together: a team nobody can administer never exists.
  // (Two requests for one name racing: the unique index refuses the second batch whole.)
  try {
    await db.batch([db.insert(teams).values(team), db.insert(tokens).values(row)]);
  } catch (error) {
    if (/UNIQUE/i.test((error as Error).message)) throw new ApiError(409, "team_exists", `a team named ${body.name} exists`);
    throw error;
  }
  const response: TeamCreated = { team: { team_id: team.id, name: team.name, created_at: team.createdAt }, token: { ...tokenView(row), token: secret } };
  return c.json(response, 201);
});

tenancyRoutes.get("/teams", async (c) => {
  requireOwner(c);
  const rows = await drizzle(c.env.DB).select().from(teams).orderBy(teams.name).limit(1_000);
  const response: TeamList = { teams: rows.map((row) => ({ team_id: row.id, name: row.name, created_at: row.createdAt })) };
  return c.json(response);
});

tenancyRoutes.post("/tokens", async (c) => {
  // The scope first: a caller who may not create tokens gets its 403 before its body is even read.
  const principal = requireScope(c, "admin");
  const body = await readJson(c, CreateTokenRequest);
  const teamId = await teamNamed(c, principal, body.team_id);
  if (teamId === null) {
    throw new ApiError(
      400,
      "team_required",
      "the instance owner's token belongs to no team: name the team the new token is for (team_id; loopwarden token create --team ID, and loopwarden team list shows the teams)",
    );
  }
  const now = new Date();
  const grant: Grant = {
    scopes: body.scopes,
    loopId: body.loop_id ?? null,
    expiresAt: expiryOf(body.expires_in, now),
    name: body.name ?? null,
    labels: body.labels ?? null,
  };
  // Checked before the loop is looked up: a restricted token naming another loop learns nothing of it.
  requireDelegable(principal, grant);
  if (grant.loopId !== null) {
    // Only a loop of the token's own team, asked of the loop itself (the D1 projection may lag its creation).
    const answer = await loopStub(c.env, grant.loopId).access({ owner: false, team_id: teamId, token_id: principal.token_id });
    if (!answer.ok) throw new ApiError(404, "not_found", `no loop ${grant.loopId} in this team`);
  }
  const { row, secret } = await newToken(teamId, grant, principal.token_id ?? "owner", now);
  await drizzle(c.env.DB).insert(tokens).values(row);
  const response: TokenCreated = { ...tokenView(row), token: secret };
  return c.json(response, 201);
});

/**
 * The tokens an admin may see, never their secrets: a team token's, of its own team (a token restricted
 * to a loop: only the tokens restricted to that loop); the owner's, of the team named, else of every team.
 */
tenancyRoutes.get("/tokens", async (c) => {
  const principal = requireScope(c, "admin");
  const query = readParam(c.req.query(), TokenListQuery, "query");
  const teamId = await teamNamed(c, principal, query.team_id);
  const rows = await drizzle(c.env.DB)
    .select()
    .from(tokens)
    .where(and(teamId === null ? undefined : eq(tokens.teamId, teamId), principal.loop_id === null ? undefined : eq(tokens.loopId, principal.loop_id)))
    .orderBy(desc(tokens.createdAt))
    .limit(1_000);
  const response: TokenList = { tokens: rows.map(tokenView) };
  return c.json(response);
});

/**
 * Revokes a token the caller may see (as `GET /v1/tokens` lists them: for the owner, any), and with it
 * every token it minted, and they minted, down the line (`created_by` holds the minting token's id, or
 * `owner`): a revoked admin leaves no working tokens behind. One statement, so all of them or none. The
 * answer says how many this request revoked. Revoking twice answers the first revocation (and revokes
 * what the token minted, should anything be left working: tokens revoked before revocations cascaded
 * left what they minted working). Any other token is answered as one that does not exist (404).
 */
tenancyRoutes.delete("/tokens/:id", async (c) => {
  const principal = requireScope(c, "admin");
  const id = readParam(c.req.param("id"), TokenId, "token id");
  // No fields; an empty body is taken as `{}`, and anything else is refused rather than ignored.
  await readJson(c, RevokeTokenRequest, { empty: {} });
  const db = drizzle(c.env.DB);
  const reachable = principal.owner
    ? eq(tokens.id, id)
    : and(eq(tokens.id, id), eq(tokens.teamId, principal.team_id), principal.loop_id === null ? undefined : eq(tokens.loopId, principal.loop_id));
  const row = await db.select().from(tokens).where(reachable).get();
  if (!row) throw new ApiError(404, "not_found", `no token ${id} in this team`);
  const revokedAt = new Date().toISOString();
  // The token and its descendants through created_by (a token's creator is older than it, so the walk
  // ends; UNION keeps each once), walked through revoked ones too; those not revoked yet are revoked.
  const revoked = await db.all<{ id: string }>(sql`
    WITH RECURSIVE minted(id) AS (
      SELECT ${id}
      UNION
      SELECT ${tokens.id} FROM ${tokens} JOIN minted ON ${tokens.createdBy} = minted.id
    )
    UPDATE ${tokens} SET revoked_at = ${revokedAt}
    WHERE id IN (SELECT id FROM minted) AND revoked_at IS NULL
    RETURNING id`);
  const updated = await db.select().from(tokens).where(eq(tokens.id, id)).get();
  const ids = revoked.map((token) => token.id).sort((a, b) => (a === id ? -1 : b === id ? 1 : a.localeCompare(b)));
  const response: TokenRevoked = { ...tokenView(updated ?? row), revoked_count: ids.length, revoked_token_ids: ids };
  return c.json(response);
});

tenancyRoutes.get("/whoami", (c) => {
  const principal = c.get("principal");
  const response: Identity = { ...principal, scopes: [...principal.scopes] };
  return c.json(response);
});
