import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { TokenList } from "#shared/wire/auth.js";
import { freePort } from "../../runner/src/coordinator/free-port.js";
import { api, exitOf, runCli, sharedCoordinator, startCli, tempDir, waitFor, type CliResult } from "../support/cli.js";

// `loopwarden team …` and `loopwarden token …` (DESIGN §11, §13) against a local coordinator, as its
// owner: the commands of a local state send the owner token without being given one.

interface JsonOut {
  status: string;
  errors: string[];
}

function jsonOf<T>(result: CliResult): T & JsonOut {
  expect(result.stdout.trim().split("\n"), result.stderr).toHaveLength(1);
  return JSON.parse(result.stdout) as T & JsonOut;
}

describe("team and token commands", () => {
  const { tmp, coordinator } = sharedCoordinator("tenancy");

  /** The CLI on the shared coordinator's state, without --server or a token: the local owner's way. */
  const local = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    runCli(["--state", path.join(tmp.dir, "state"), ...args], { cwd: tmp.dir, env: { LOOPWARDEN_TOKEN: "", ...env } });

  /** Every token row the coordinator holds, as its owner lists them. */
  const allTokens = async () => TokenList.parse(await (await api(`${coordinator.url}/v1/tokens`)).json()).tokens;

  it("the local owner makes a team and its tokens (naming the team), lists and revokes them; without --team, a usage error and nothing stored", async () => {
    const team = jsonOf<{ team: { team_id: string; name: string }; token: { token_id: string; token: string; scopes: string[] } }>(
      await local(["--json", "team", "create", "cli-team"]),
    );
    expect(team.team.name).toBe("cli-team");
    expect(team.token.scopes).toEqual(["admin"]);

    // The owner's token belongs to no team: `token create` without --team is a usage error (exit 2) that says
    // what to add, and the coordinator stores nothing.
    const before = await allTokens();
    const refused = await local(["token", "create", "--scopes", "read"]);
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr).toMatch(/--team ID/);
    expect(refused.stderr).not.toMatch(/does not match the protocol/);
    const refusedJson = await local(["--json", "token", "create", "--scopes", "read"]);
    expect(refusedJson.code).toBe(2);
    expect(jsonOf(refusedJson)).toMatchObject({ status: "error", errors: [expect.stringMatching(/--team ID/)] });
    expect(await allTokens()).toEqual(before);

    const created = await local(["--json", "token", "create", "--team", team.team.team_id, "--scopes", "read", "--name", "viewer"]);
    expect(created.code, created.stderr).toBe(0);
    const reader = jsonOf<{ token: { token_id: string; token: string; team_id: string; scopes: string[] } }>(created).token;
    expect(reader).toMatchObject({ team_id: team.team.team_id, scopes: ["read"] });
    // The secret works, as what it is: a read token of the team.
    const whoami = await local(["--json", "--token", reader.token, "whoami"]);
    expect(whoami.code, whoami.stderr).toBe(0);
    expect(jsonOf<{ identity: { owner: boolean; team_id: string; scopes: string[] } }>(whoami).identity).toMatchObject({
      owner: false,
      team_id: team.team.team_id,
      scopes: ["read"],
    });

    // The owner's list spans every team; --team narrows it. Never a secret.
    const listed = await local(["--json", "token", "list"]);
    expect(listed.code, listed.stderr).toBe(0);
    const ids = jsonOf<{ tokens: { token_id: string }[] }>(listed).tokens.map((token) => token.token_id);
    expect(ids).toEqual(expect.arrayContaining([team.token.token_id, reader.token_id]));
    expect(listed.stdout).not.toContain(reader.token);
    const narrowed = await local(["--json", "token", "list", "--team", team.team.team_id]);
    expect(narrowed.code, narrowed.stderr).toBe(0);
    expect(new Set(jsonOf<{ tokens: { team_id: string }[] }>(narrowed).tokens.map((token) => token.team_id))).toEqual(new Set([team.team.team_id]));
    const human = await local(["token", "list"]);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(`${reader.token_id}  read  team ${team.team.team_id}`);

    // A token for one machine: it may claim only that machine's labels, and says so.
    const gpu = await local(["token", "create", "--team", team.team.team_id, "--scopes", "evaluate", "--labels", "gpu=h100"]);
    expect(gpu.code, gpu.stderr).toBe(0);
    expect(gpu.stdout).toMatch(/evaluate {2}team tm_[0-9a-f]{16}, every loop of the team, no expiry, claims only gpu=h100/);
    const gpuSecret = /secret, shown this once: (\S+)/.exec(gpu.stdout)?.[1] ?? "";
    const gpuWhoami = await local(["--token", gpuSecret, "whoami"]);
    expect(gpuWhoami.stdout).toContain("a runner using it may claim only the labels gpu=h100");
    expect((await local(["token", "create", "--team", team.team.team_id, "--scopes", "read", "--labels", "gpu"])).code).toBe(2);

    const revoked = await local(["--json", "token", "revoke", reader.token_id]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(jsonOf<{ token: { revoked_at: string | null } }>(revoked).token.revoked_at).not.toBeNull();
    const refusedWhoami = await local(["--token", reader.token, "whoami"]);
    expect(refusedWhoami.code).toBe(1);
    expect(refusedWhoami.stderr).toContain("token_revoked");
  });

  it("a team's token with no coordinator named reaches the local one, and the refusal says to name yours with --server", async () => {
    const state = tempDir("stray-token");
    try {
      const stray = await runCli(["--state", state.dir, "whoami"], { cwd: state.dir, env: { LOOPWARDEN_TOKEN: "lwt_a-token-of-another-coordinator" } });
      expect(stray.code).toBe(1);
      expect(stray.stderr).toContain("unauthenticated");
      expect(stray.stderr).toContain("name yours with --server or LOOPWARDEN_SERVER");
    } finally {
      state.cleanup();
    }
  });

  it("the first local command that starts a coordinator writes the owner token to the state's owner-token (0600); serve then says only where it is", async () => {
    const state = tempDir("owner-token");
    const env = { LOOPWARDEN_TOKEN: "", LOOPWARDEN_OWNER_TOKEN: "" };
    try {
      // No owner token in the environment: the state directory's own is made, by a command that is not `serve`.
      const first = await runCli(["--json", "--state", state.dir, "team", "list"], { cwd: state.dir, env });
      expect(first.code, first.stderr).toBe(0);
      const file = path.join(state.dir, "owner-token");
      expect(statSync(file).mode & 0o777).toBe(0o600);
      const token = readFileSync(file, "utf8").trim();

      const serve = startCli(["--json", "--state", state.dir, "serve", "--port", String(await freePort())], { cwd: state.dir, env });
      try {
        const resultLine = () =>
          serve
            .output()
            .split("\n")
            .slice(0, -1)
            .find((line) => line.startsWith('{"tool"'));
        await waitFor(() => resultLine() !== undefined, "serve to print its URL");
        const started = JSON.parse(resultLine() ?? "") as { url: string; owner_token?: string; owner_token_file: string | null };
        expect(started.owner_token_file).toBe(file);
        expect(started.owner_token).toBeUndefined();
        expect(serve.output()).not.toContain(token);
        expect((await fetch(`${started.url}/v1/teams`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
        // The log serve names is there to open, though the worker has logged nothing yet.
        expect(readFileSync(path.join(state.dir, "logs", "coordinator.log"), "utf8")).toMatch(/coordinator listening on http:\/\/127\.0\.0\.1:\d+/);
      } finally {
        const exited = exitOf(serve);
        serve.kill("SIGTERM");
        await exited;
      }
    } finally {
      state.cleanup();
    }
  });
});
