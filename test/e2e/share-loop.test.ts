import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { verifyChain } from "#shared/engine/index.js";
import {
  exitOf,
  loopEvents,
  makeRepo,
  recordedLoopId,
  runCli,
  startCli,
  startCoordinator,
  tempDir,
  type CliResult,
  type TestCoordinator,
} from "../support/cli.js";
import { twoRunnerProject } from "../support/two-runner-project.js";

// docs/teams.md, "Share a loop with your team", step by step, on a local coordinator and with team tokens only:
// the owner token makes the team, the team's admin token makes the others, the laptop's token runs the
// agent (`run`), the runner machine's token evaluates (`work --labels`), and a read token follows along.

function jsonOf<T>(result: CliResult): T {
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as T;
}

describe("docs/teams.md: share a loop with your team", () => {
  const tmp = tempDir("share");
  const stateDir = path.join(tmp.dir, "state");
  let coordinator: TestCoordinator | undefined;

  beforeAll(async () => {
    // 1. A coordinator everyone reaches: `loopwarden serve`, with no owner token given, so it makes its own.
    coordinator = await startCoordinator(stateDir, undefined, { LOOPWARDEN_OWNER_TOKEN: "" });
  });
  afterAll(async () => {
    await coordinator?.stop();
    tmp.cleanup();
  });

  it("the owner's token makes the team; the team's tokens propose, evaluate and read, and nothing more", async () => {
    const url = coordinator?.url ?? "";
    // The owner token it made, kept in the state directory (the tests' own owner token is not this one).
    const ownerToken = readFileSync(path.join(stateDir, "owner-token"), "utf8").trim();
    /** The CLI as a teammate runs it: LOOPWARDEN_SERVER exported, LOOPWARDEN_TOKEN the token in hand. */
    const cli = (token: string, args: string[], cwd = tmp.dir) => runCli(args, { cwd, env: { LOOPWARDEN_SERVER: url, LOOPWARDEN_TOKEN: token } });
    const start = (token: string, args: string[], cwd: string) => startCli(args, { cwd, env: { LOOPWARDEN_SERVER: url, LOOPWARDEN_TOKEN: token } });

    // 2. A team and its tokens.
    const team = jsonOf<{ team: { team_id: string }; token: { token: string } }>(await cli(ownerToken, ["--json", "team", "create", "parser-team"]));
    const admin = team.token.token;
    const create = async (args: string[]) =>
      jsonOf<{ token: { token: string; scopes: string[]; expires_at: string | null } }>(await cli(admin, ["--json", "token", "create", ...args])).token;
    const laptop = await create(["--scopes", "propose,evaluate", "--name", "laptop"]);
    const gpuBox = await create(["--scopes", "evaluate", "--name", "gpu-box", "--expires", "30d"]);
    const viewer = await create(["--scopes", "read", "--name", "viewer"]);
    expect([laptop.scopes, gpuBox.scopes, viewer.scopes]).toEqual([["propose", "evaluate"], ["evaluate"], ["read"]]);
    expect(gpuBox.expires_at).not.toBeNull();
    // An evaluate token makes no tokens and no teams.
    const refusedToken = await cli(gpuBox.token, ["token", "create", "--scopes", "read"]);
    expect(refusedToken.code).toBe(1);
    expect(refusedToken.stderr).toContain("forbidden");

    // 3. The contract says where candidates are evaluated (evaluate.labels: pool=shared), committed.
    const proposer = makeRepo(path.join(tmp.dir, "laptop"), twoRunnerProject());
    // 4. A runner in a clone of the repository, with those labels, serving every running loop of its team
    //    pinned to its checkout's loop.yaml.
    const checkout = path.join(tmp.dir, "gpu-box");
    execFileSync("git", ["clone", "-q", proposer, checkout]);
    // (A checkout for the read token's teammate, also at t0.)
    const elsewhere = path.join(tmp.dir, "viewer");
    execFileSync("git", ["clone", "-q", proposer, elsewhere]);
    const work = start(gpuBox.token, ["work", "--labels", "pool=shared"], checkout);
    try {
      // 5. The agent runs where it lives, with the laptop's token; its candidates are evaluated by the runner.
      const run = await cli(laptop.token, ["run"], proposer);
      expect(run.code, `${run.stderr}\nwork:\n${work.output()}`).toBe(10);
      const loopId = recordedLoopId(proposer, "loop.yaml");
      expect(run.stdout + run.stderr).toContain(`loop ${loopId} halted: success_condition_met`);
      // Without a terminal, the run says what it waits for instead of going silent: the labelled runner
      // to take a candidate, or the runner that has it.
      expect(run.stderr).toMatch(/^\[1\] c1 (is being evaluated by runner \S+|waiting for a runner with pool=shared to evaluate c1) \(\d+ s so far\)$/m);

      // Every evaluation was the runner's (the laptop lacks the label), and the log verifies.
      const events = await loopEvents(url, loopId, viewer.token);
      expect(verifyChain(events as unknown as Record<string, unknown>[]).ok).toBe(true);
      const laptopRunner = (
        JSON.parse(readFileSync(path.join(proposer, ".loopwarden", "state.json"), "utf8")) as { loops: Record<string, { runner_id: string }> }
      ).loops["loop.yaml"]?.runner_id;
      const leases = events.flatMap((event) => (event.type === "lease_granted" ? [event.data.runner_id] : []));
      // (c2 changes nothing: an empty candidate is rejected without an evaluation.)
      expect(leases.length).toBeGreaterThanOrEqual(3);
      expect(laptopRunner).toBeDefined();
      expect(leases).not.toContain(laptopRunner);
      const verdicts = events.flatMap((event) => (event.type === "verdict" ? [[event.data.candidate_id, event.data.decision]] : []));
      expect(verdicts).toEqual([
        ["c1", "promoted"],
        ["c2", "rejected"],
        ["c3", "rejected"],
        ["c4", "promoted"],
      ]);
      // The runner's checkout had only t0: the candidates came to it as bundles through the coordinator.
      expect(work.output()).toContain("from its bundle");

      // A teammate with the read token follows along, and can do nothing else.
      const status = jsonOf<{ loop_id: string; halt_reason: string }>(await cli(viewer.token, ["--json", "status", loopId]));
      expect(status).toMatchObject({ loop_id: loopId, halt_reason: "success_condition_met" });
      const proposal = await fetch(`${url}/v1/loops/${loopId}/candidates`, {
        method: "POST",
        headers: { authorization: `Bearer ${viewer.token}`, "content-type": "application/json" },
        body: JSON.stringify({}),
      });
      expect(proposal.status).toBe(403);
      expect(((await proposal.json()) as { error: { code: string } }).error.code).toBe("forbidden");
      const receipt = await cli(viewer.token, ["receipt", loopId]);
      expect(receipt.code).toBe(1);
      expect(receipt.stderr).toContain("forbidden");
      const newLoop = await cli(viewer.token, ["--json", "run"], elsewhere);
      expect(newLoop.code, newLoop.stderr).toBe(1);
      expect(newLoop.stdout).toContain("forbidden");
      expect(await loopEvents(url, loopId, viewer.token)).toHaveLength(events.length);
    } finally {
      const exited = exitOf(work);
      work.kill("SIGINT");
      expect(await exited, work.output()).toBe(0);
    }
  });
});
