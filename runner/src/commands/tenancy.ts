import { parseDuration } from "#shared/duration.js";
import { MAX_TOKEN_LIFETIME_MS, OWNER_TEAM, Scope, type TokenView } from "#shared/wire/auth.js";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { CoordinatorError, UserError } from "../errors.js";
import { emitResult, type OutputMode } from "../output.js";
import { parseLabels } from "../contract/labels.js";
import { formatLabels } from "#shared/engine/labels.js";

// `loopwarden team …` and `loopwarden token …` (DESIGN §11, §13): thin wrappers over the tenancy routes.
// Without --server they act on the local coordinator as its owner, like every other local command.

type Options = ServerOptions & OutputMode;

/** `team create NAME`: the team and its first admin token, printed once. Needs the owner token. */
export async function teamCreateCommand(name: string, options: Options): Promise<number> {
  return withConnection(options, options, async (connection) => {
    const created = await connection.client.createTeam({ name });
    emitResult(options, { status: "ok", team: created.team, token: created.token }, [
      `team ${created.team.name} (${created.team.team_id}) created`,
      `  its first admin token (${created.token.token_id}), shown this once — keep it somewhere safe:`,
      `  ${created.token.token}`,
      `  hand out narrower tokens with: loopwarden token create --scopes propose,evaluate --token <this token>`,
    ]);
    return 0;
  });
}

/** `team list`: the coordinator's teams. Needs the owner token. */
export async function teamListCommand(options: Options): Promise<number> {
  return withConnection(options, options, async (connection) => {
    const { teams } = await connection.client.listTeams();
    emitResult(
      options,
      { status: "ok", teams },
      teams.length === 0 ? ["no teams yet: loopwarden team create NAME"] : teams.map((team) => `${team.team_id}  ${team.name}  (created ${team.created_at})`),
    );
    return 0;
  });
}

/** The scopes of `--scopes a,b`, refused by name when one is not a scope. */
export function parseScopes(text: string): Scope[] {
  const scopes = text
    .split(",")
    .map((scope) => scope.trim())
    .filter(Boolean);
  const unknown = scopes.filter((scope) => !Scope.safeParse(scope).success);
  if (scopes.length === 0 || unknown.length > 0) {
    throw new UserError(`--scopes takes a comma-separated list of ${Scope.options.join(", ")}${unknown.length > 0 ? `; not ${unknown.join(", ")}` : ""}`, 2);
  }
  return [...new Set(scopes)] as Scope[];
}

function describeToken(token: TokenView): string {
  const limits = [
    token.team_id === OWNER_TEAM ? "the owner's own loops (no team)" : `team ${token.team_id}`,
    token.loop_id ? `loop ${token.loop_id}` : "every loop of the team",
    token.revoked_at ? `revoked ${token.revoked_at}` : token.expires_at ? `expires ${token.expires_at}` : "no expiry",
    ...(token.labels ? [`claims only ${formatLabels(token.labels)}`] : []),
  ];
  return `${token.token_id}  ${token.scopes.join(",")}  ${limits.join(", ")}${token.name ? `  "${token.name}"` : ""}`;
}

/** `token create --scopes S [--loop ID] [--expires D] [--name N] [--team ID] [--labels k=v,…]`: prints the secret once. */
export async function tokenCreateCommand(
  options: Options & {
    scopes: string;
    loop?: string | undefined;
    expires?: string | undefined;
    name?: string | undefined;
    team?: string | undefined;
    labels?: string | undefined;
  },
): Promise<number> {
  const scopes = parseScopes(options.scopes);
  const labels = options.labels === undefined ? undefined : parseLabels(options.labels);
  if (options.expires !== undefined) {
    const ms = parseDuration(options.expires);
    if (ms === null || ms > MAX_TOKEN_LIFETIME_MS)
      throw new UserError(`--expires takes a duration like 30d or 12h, of at most 366d; got ${options.expires}`, 2);
  }
  return withConnection(options, options, async (connection) => {
    const created = await connection.client
      .createToken({
        scopes,
        ...(options.loop === undefined ? {} : { loop_id: options.loop }),
        ...(options.expires === undefined ? {} : { expires_in: options.expires }),
        ...(options.name === undefined ? {} : { name: options.name }),
        ...(options.team === undefined ? {} : { team_id: options.team }),
        ...(labels === undefined ? {} : { labels }),
      })
      .catch((error: unknown) => {
        // The owner's token belongs to no team, so the owner names one: a flag missing, a usage error (exit 2).
        if (error instanceof CoordinatorError && error.code === "team_required") {
          throw new UserError(
            "the instance owner's token belongs to no team: name the team the token is for with --team ID (`loopwarden team list` shows them; `loopwarden team create NAME` makes one); nothing was created",
            2,
          );
        }
        throw error;
      });
    emitResult(options, { status: "ok", token: created }, [
      `token ${describeToken(created)}`,
      `  secret, shown this once: ${created.token}`,
      `  use it with --token <secret> or LOOPWARDEN_TOKEN=<secret>`,
    ]);
    return 0;
  });
}

/** `token list [--team ID]`: the team's tokens, never their secrets (for the owner without --team, every team's). */
export async function tokenListCommand(options: Options & { team?: string | undefined }): Promise<number> {
  return withConnection(options, options, async (connection) => {
    const { tokens } = await connection.client.listTokens(options.team);
    emitResult(options, { status: "ok", tokens }, tokens.length === 0 ? ["no tokens"] : tokens.map(describeToken));
    return 0;
  });
}

/** `token revoke ID`: the token stops working at once (401 `token_revoked`). */
export async function tokenRevokeCommand(tokenId: string, options: Options): Promise<number> {
  return withConnection(options, options, async (connection) => {
    const revoked = await connection.client.revokeToken(tokenId);
    // Revoking a token revokes every token it minted, down the line (DESIGN §11): say how many went with it.
    const others = (revoked.revoked_token_ids ?? []).filter((id) => id !== revoked.token_id);
    const lines = [`revoked ${describeToken(revoked)}`];
    if (others.length > 0) lines.push(`  and ${others.length} token${others.length === 1 ? "" : "s"} it minted: ${others.join(", ")}`);
    emitResult(options, { status: "ok", token: revoked }, lines);
    return 0;
  });
}

/** `whoami`: the team, scopes and limits of the token in use. */
export async function whoamiCommand(options: Options): Promise<number> {
  return withConnection(options, options, async (connection) => {
    const identity = await connection.client.whoami();
    emitResult(options, { status: "ok", identity }, [
      identity.owner ? `the instance owner (${connection.url})` : `team ${identity.team_id}, token ${identity.token_id} (${connection.url})`,
      `  scopes: ${identity.scopes.join(", ")}`,
      ...(identity.loop_id ? [`  restricted to loop ${identity.loop_id}`] : []),
      ...(identity.expires_at ? [`  expires ${identity.expires_at}`] : []),
      ...(identity.labels ? [`  a runner using it may claim only the labels ${formatLabels(identity.labels)}`] : []),
    ]);
    return 0;
  });
}
