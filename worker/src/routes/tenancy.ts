import { bytesToHex } from "@noble/hashes/utils.js";
import { and, desc, eq, isNull } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { Hono, type Context } from "hono";
import { parseDuration } from "../../../shared/duration.js";
import {
  CreateTeamRequest,
  CreateTokenRequest,
  RevokeTokenRequest,
  TokenId,
  type Identity,
  type Scope,
  type TeamCreated,
  type TeamList,
  type TokenCreated,
  type TokenList,
  type TokenView,
} from "../../../shared/wire/auth.js";
import { mintToken, requireScope, type AuthEnv, type Principal } from "../auth.js";
import { teams, tokens, type TokenRow } from "../db/schema.js";
import { loopStub } from "../loops.js";
import { ApiError } from "../http-errors.js";
import { readJson, readParam } from "../validate.js";

// Teams and tokens (DESIGN §11), mounted at `/v1`. The owner creates teams; each team's admins manage
// its tokens; the owner may manage any team's (naming it), so a team that lost its admin token is not
// locked out for good.

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
  };
}

function requireOwner(c: Context<AuthEnv>): Principal {
  const principal = c.get("principal");
  if (!principal.owner) throw new ApiError(403, "forbidden", "only the instance owner's token (OWNER_TOKEN) manages teams");
  return principal;
}

/** The team an admin call acts on: the caller's own, or for the owner the one named (its own team without one). */
async function teamActedOn(c: Context<AuthEnv>, named: string | undefined): Promise<string> {
  const principal = requireScope(c, "admin");
  if (named === undefined || named === principal.team_id) return principal.team_id;
  // A team admin naming another team learns nothing about it: it is not theirs to name.
  if (!principal.owner) throw new ApiError(403, "forbidden", "a team's token manages only its own team's tokens");
  const team = await drizzle(c.env.DB).select({ id: teams.id }).from(teams).where(eq(teams.id, named)).get();
  if (!team) throw new ApiError(404, "not_found", `no team ${named}`);
  return named;
}

/** A new token row for a team, and its secret (shown once). */
async function newToken(
  teamId: string,
  request: Pick<CreateTokenRequest, "scopes" | "loop_id" | "expires_in" | "name">,
  createdBy: string,
  now: Date,
): Promise<{ row: TokenRow; secret: string }> {
  const minted = await mintToken();
  const lifetime = request.expires_in === undefined ? null : parseDuration(request.expires_in);
  const row: TokenRow = {
    id: minted.id,
    teamId,
    secretHash: minted.secretHash,
    scopes: request.scopes.join(","),
    loopId: request.loop_id ?? null,
    name: request.name ?? null,
    createdAt: now.toISOString(),
    createdBy,
    expiresAt: lifetime === null ? null : new Date(now.getTime() + lifetime).toISOString(),
    revokedAt: null,
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
  const { row, secret } = await newToken(team.id, { scopes: ["admin"], name: "first admin token" }, "owner", now);
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
  const body = await readJson(c, CreateTokenRequest);
  const teamId = await teamActedOn(c, body.team_id);
  const principal = c.get("principal");
  const db = drizzle(c.env.DB);
  if (body.loop_id !== undefined) {
    // Only a loop of the token's own team, asked of the loop itself (the D1 projection may lag its creation).
    const answer = await loopStub(c.env, body.loop_id).get({ owner: false, team_id: teamId });
    if (!answer.ok) throw new ApiError(404, "not_found", `no loop ${body.loop_id} in this team`);
  }
  const { row, secret } = await newToken(teamId, body, principal.token_id ?? "owner", new Date());
  await db.insert(tokens).values(row);
  const response: TokenCreated = { ...tokenView(row), token: secret };
  return c.json(response, 201);
});

tenancyRoutes.get("/tokens", async (c) => {
  const teamId = await teamActedOn(c, c.req.query("team_id"));
  const rows = await drizzle(c.env.DB).select().from(tokens).where(eq(tokens.teamId, teamId)).orderBy(desc(tokens.createdAt)).limit(1_000);
  const response: TokenList = { tokens: rows.map(tokenView) };
  return c.json(response);
});

/** Revokes a token of the caller's team (for the owner, of any team). Revoking twice answers the first revocation. */
tenancyRoutes.delete("/tokens/:id", async (c) => {
  const principal = requireScope(c, "admin");
  const id = readParam(c.req.param("id"), TokenId, "token id");
  // No fields; an empty body is taken as `{}`, and anything else is refused rather than ignored.
  await readJson(c, RevokeTokenRequest, { empty: {} });
  const db = drizzle(c.env.DB);
  const reachable = principal.owner ? eq(tokens.id, id) : and(eq(tokens.id, id), eq(tokens.teamId, principal.team_id));
  const row = await db.select().from(tokens).where(reachable).get();
  if (!row) throw new ApiError(404, "not_found", `no token ${id} in this team`);
  if (row.revokedAt === null) {
    const revokedAt = new Date().toISOString();
    await db
      .update(tokens)
      .set({ revokedAt })
      .where(and(eq(tokens.id, id), isNull(tokens.revokedAt)));
  }
  const updated = await db.select().from(tokens).where(eq(tokens.id, id)).get();
  return c.json(tokenView(updated ?? row));
});

tenancyRoutes.get("/whoami", (c) => {
  const principal = c.get("principal");
  const response: Identity = { ...principal, scopes: [...principal.scopes] };
  return c.json(response);
});
