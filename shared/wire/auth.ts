import * as z from "zod";
import { parseDuration } from "../duration.js";
import { LoopId } from "./api.js";
import { Labels } from "./contract.js";

// Messages of the tenancy routes (DESIGN §11): teams, and the tokens of a team.

/**
 * What a token may do. `admin` includes the others; `propose`, `evaluate` and `review` include `read`.
 * `review` answers candidates' requests to change protected files (`loopwarden ack` / `reject`): give it
 * to the people who decide, never to a runner, whose token an agent could come to hold.
 */
export const Scope = z.enum(["admin", "propose", "evaluate", "review", "read"]);
export type Scope = z.infer<typeof Scope>;

/** Team ids: `tm_` and 16 hex digits. */
export const TeamId = z.string().regex(/^tm_[0-9a-f]{16}$/, "is not a team id");

/**
 * The team of the instance owner's own loops (and of every loop created before teams existed). Not a
 * `tm_` id, so no team can be named so, and no request may name it.
 */
export const OWNER_TEAM = "owner";

/**
 * The team a token row belongs to: a team's, or the owner's own — which no token is created in any
 * more (the owner names a team), but which coordinators before that check wrote when the owner named
 * none, and which `token list` must still show so they can be revoked.
 */
export const TokenTeamId = z.union([TeamId, z.literal(OWNER_TEAM)]);

/** Token ids: `tk_` and 16 hex digits; the id is also the secret's second field, so it is never secret itself. */
export const TokenId = z.string().regex(/^tk_[0-9a-f]{16}$/, "is not a token id");

/** Team names: unique per coordinator, like a loop name. */
export const TeamName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, "use 1-63 letters, digits or _.- (starting with a letter or digit)");

/** The longest a token may live (`expires_in`): a year. */
export const MAX_TOKEN_LIFETIME_MS = 366 * 86_400_000;

/** `POST /v1/teams` (owner token only). */
export const CreateTeamRequest = z.strictObject({ name: TeamName });
export type CreateTeamRequest = z.infer<typeof CreateTeamRequest>;

/** A team as the API shows it. */
export const TeamView = z.object({ team_id: TeamId, name: TeamName, created_at: z.string() });
export type TeamView = z.infer<typeof TeamView>;

/** `GET /v1/teams` answer. */
export const TeamList = z.object({ teams: z.array(TeamView) });
export type TeamList = z.infer<typeof TeamList>;

/** `POST /v1/tokens` (admin scope; the owner names the team). */
export const CreateTokenRequest = z.strictObject({
  scopes: z
    .array(Scope)
    .min(1)
    .max(5)
    .refine((scopes) => new Set(scopes).size === scopes.length, "lists a scope twice"),
  /** Restricts the token to one loop of the team. */
  loop_id: LoopId.optional(),
  /** A duration (`30d`, `12h`); without one the token lives until revoked. */
  expires_in: z
    .string()
    .refine((text) => {
      const ms = parseDuration(text);
      return ms !== null && ms <= MAX_TOKEN_LIFETIME_MS;
    }, "is not a duration like 30d or 12h of at most 366d")
    .optional(),
  /** A label for `token list` (e.g. the machine it is for). */
  name: z
    .string()
    .regex(/^[A-Za-z0-9 _.:@-]{1,64}$/, "use 1-64 letters, digits, spaces or _.:@-")
    .optional(),
  /** The team the token is for: required of the instance owner, whose own token belongs to no team; a team's token may name only its own. */
  team_id: TeamId.optional(),
  /** The runner labels the token may claim (`{ gpu: h100 }`): a runner using it offers those or fewer. Without: any. */
  labels: Labels.optional(),
});
export type CreateTokenRequest = z.infer<typeof CreateTokenRequest>;

/** `DELETE /v1/tokens/:id`: no fields (an empty body is taken as `{}`). */
export const RevokeTokenRequest = z.strictObject({});

/** A token as `token list` shows it: never its secret. */
export const TokenView = z.object({
  token_id: TokenId,
  team_id: TokenTeamId,
  scopes: z.array(Scope),
  loop_id: LoopId.nullable(),
  name: z.string().nullable(),
  created_at: z.string(),
  expires_at: z.string().nullable(),
  revoked_at: z.string().nullable(),
  /** The runner labels it may claim; null: any. Absent from coordinators before token labels. */
  labels: Labels.nullable().optional(),
});
export type TokenView = z.infer<typeof TokenView>;

/**
 * `DELETE /v1/tokens/:id` answer: the token as it now is, and what this revocation revoked — the token
 * and every token it minted, and they minted, down the line (DESIGN §11), that was not revoked already.
 * Revoking again revokes nothing new: `revoked_count` 0.
 */
export const TokenRevoked = TokenView.extend({
  revoked_count: z.number().int().min(0),
  revoked_token_ids: z.array(TokenId),
});
export type TokenRevoked = z.infer<typeof TokenRevoked>;

/** `POST /v1/tokens` answer: the token with its secret, shown this once. */
export const TokenCreated = TokenView.extend({ token: z.string() });
export type TokenCreated = z.infer<typeof TokenCreated>;

/** `POST /v1/teams` answer: the team and its first admin token. */
export const TeamCreated = z.object({ team: TeamView, token: TokenCreated });
export type TeamCreated = z.infer<typeof TeamCreated>;

/** `GET /v1/tokens` query: the owner may name one team (without one, every team's tokens are listed); a team's token may name only its own. */
export const TokenListQuery = z.object({ team_id: TeamId.optional() });
export type TokenListQuery = z.infer<typeof TokenListQuery>;

/** `GET /v1/tokens` answer. */
export const TokenList = z.object({ tokens: z.array(TokenView) });
export type TokenList = z.infer<typeof TokenList>;

/** `GET /v1/whoami` answer: who the presented token is. */
export const Identity = z.object({
  owner: z.boolean(),
  team_id: z.string(),
  token_id: TokenId.nullable(),
  scopes: z.array(Scope),
  loop_id: LoopId.nullable(),
  expires_at: z.string().nullable(),
  /** The runner labels the token may claim; null: any. Absent from coordinators before token labels. */
  labels: Labels.nullable().optional(),
});
export type Identity = z.infer<typeof Identity>;
