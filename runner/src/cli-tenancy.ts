import { Option, type Command } from "commander";

// The tenancy commands (DESIGN §11) — `team`, `token`, `whoami` — registered on the CLI's program by
// main.ts, which owns the global options and the exit code. Each command's module loads lazily.

/** The CLI's global options (main.ts defines them on the program). */
export interface GlobalOptions {
  server?: string;
  token?: string;
  state?: string;
  contract?: string;
  json: boolean;
  quiet: boolean;
}

/** What a registered command needs of main.ts: the global options as parsed, and where its exit code goes. */
export interface CommandContext {
  globals(): GlobalOptions;
  done(code: number): void;
}

/** Registers `team create|list`, `token create|list|revoke` and `whoami` on `program`. */
export function registerTenancyCommands(program: Command, context: CommandContext): void {
  const team = program.command("team").description("teams of the coordinator (DESIGN §11); needs the owner token (local: used automatically)");
  team
    .command("create")
    .description("create a team; prints the team's first admin token, once")
    .argument("<name>", "the team's name (letters, digits, _.-)")
    .action(async (name: string) => {
      const { teamCreateCommand } = await import("./commands/tenancy.js");
      context.done(await teamCreateCommand(name, context.globals()));
    });
  team
    .command("list")
    .description("list the coordinator's teams")
    .action(async () => {
      const { teamListCommand } = await import("./commands/tenancy.js");
      context.done(await teamListCommand(context.globals()));
    });

  const token = program
    .command("token")
    .description(
      "tokens of the caller's team (admin scope): create prints the secret once, with its id. A token never creates one that can do more than itself: a token restricted to a loop creates tokens of that loop only, one limited to some runner labels, tokens limited to those or fewer, and one that expires, tokens that expire no later",
    );
  token
    .command("create")
    .description("create a token of your team (with the owner token: of the team --team names)")
    .requiredOption("--scopes <list>", "comma-separated: admin, propose, evaluate, read (admin includes all; propose and evaluate include read)")
    .option("--loop <id>", "restrict the token to one loop (required of a token that is itself restricted: its own loop)")
    .option(
      "--expires <duration>",
      "expire after a duration, e.g. 30d, 12h (at most 366d; default: until revoked; a token that itself expires must give one that ends no later)",
    )
    .addOption(new Option("--ttl <duration>", "same as --expires").hideHelp())
    .option("--name <label>", "a label shown by token list, e.g. the machine it is for")
    .option("--team <id>", "with the owner token (required): the team to create it in")
    .option(
      "--labels <k=v,...>",
      "the runner labels a runner using the token may claim, e.g. gpu=h100 (those or fewer; a lease or confirm claiming others is refused); default: any",
    )
    .action(async (options: { scopes: string; loop?: string; expires?: string; ttl?: string; name?: string; team?: string; labels?: string }) => {
      const { tokenCreateCommand } = await import("./commands/tenancy.js");
      context.done(await tokenCreateCommand({ ...context.globals(), ...options, expires: options.expires ?? options.ttl }));
    });
  token
    .command("list")
    .description("list your team's tokens (never their secrets); a token restricted to a loop lists the tokens of that loop")
    .option("--team <id>", "with the owner token: only this team's (default: every team's)")
    .action(async (options: { team?: string }) => {
      const { tokenListCommand } = await import("./commands/tenancy.js");
      context.done(await tokenListCommand({ ...context.globals(), ...options }));
    });
  token
    .command("revoke")
    .description("revoke a token of your team (one that token list shows you); it is refused from then on")
    .argument("<id>", "the token's id (tk_…)")
    .action(async (id: string) => {
      const { tokenRevokeCommand } = await import("./commands/tenancy.js");
      context.done(await tokenRevokeCommand(id, context.globals()));
    });

  program
    .command("whoami")
    .description("the team, scopes and limits of the token in use")
    .action(async () => {
      const { whoamiCommand } = await import("./commands/tenancy.js");
      context.done(await whoamiCommand(context.globals()));
    });
}
