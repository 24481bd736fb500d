import { cpSync, existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoopEvent, verifyChain } from "#shared/engine/index.js";
import { LoopList, LoopSummary } from "#shared/wire/api.js";
import { api, ROOT, gitIn, makeRepo, runCli, startCoordinator, tempDir, type CliResult, type TestCoordinator } from "../support/cli.js";
import { startWranglerDev } from "../support/wrangler-dev.js";

// The demo loop through the real stack: the runner starts its own local coordinator on demand, runs the
// loop to convergence and stops it; a second coordinator on the same state then serves what was stored.
describe("a flag-only loop converges end to end", () => {
  const tmp = tempDir("converge");
  const repo = path.join(tmp.dir, "repo");
  const state = path.join(tmp.dir, "state");
  let result: CliResult;

  beforeAll(async () => {
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    makeRepo(repo, {});
    // --skip-doctor: this file tests convergence and the stored state; oracle.test.ts covers the precondition.
    result = await runCli(
      ["--json", "--state", state, "run", "--skip-doctor", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"],
      { cwd: repo },
    );
  }, 120_000);
  afterAll(() => tmp.cleanup());
  // The two tests that read the stored state back share one coordinator restarted on it (issue 30: a
  // coordinator's start is about 3 s of CPU); the second stops it before wrangler dev opens the same files.
  let restarted: Promise<TestCoordinator> | undefined;
  const restartOnState = () => (restarted ??= startCoordinator(state));
  afterAll(async () => {
    await (await restarted?.catch(() => undefined))?.stop();
  });

  it("halts success_condition_met with exit code 10 and exactly one JSON object on stdout", () => {
    expect(result.code, result.stderr).toBe(10);
    const lines = result.stdout.trim().split("\n");
    expect(lines).toHaveLength(1);
    const output = JSON.parse(lines[0] ?? "");
    expect(output).toMatchObject({
      tool: "loopwarden",
      status: "halted",
      halt_reason: "success_condition_met",
      exit_class: 10,
      iteration: 3,
      errors: [],
    });
  });

  it("leaves the fix on the loop branch and keeps rejected candidates under refs", () => {
    const loopId = JSON.parse(result.stdout).loop_id as string;
    expect(gitIn(repo, "branch", "--show-current").trim()).toBe(`loopwarden/${loopId}`);
    expect(readFileSync(path.join(repo, "src", "text.js"), "utf8")).toContain("split(/\\s+/)");
    expect(gitIn(repo, "status", "--porcelain").trim()).toBe("");
    const rejected = gitIn(repo, "for-each-ref", "--format=%(refname)", "refs/loopwarden/rejected/").trim().split("\n");
    // c1 changed something and was rejected: kept. c2 changed nothing (no_change): nothing to keep.
    expect(rejected).toEqual([`refs/loopwarden/rejected/${loopId}/c1`]);
    // The rejected change is recoverable from its ref.
    expect(gitIn(repo, "show", `refs/loopwarden/rejected/${loopId}/c1`, "--", "src/text.js")).toContain('replace(/^-+|-+$/g, "")');
    // The user's own branch was never moved.
    expect(gitIn(repo, "log", "--format=%s", "main").trim()).toBe("initial");
  });

  it("stops the coordinator it started", () => {
    expect(existsSync(path.join(state, "coordinator.json"))).toBe(false);
  });

  it("persists the loop: a coordinator restarted on the same state serves its summary, D1 listing, logs and a verifiable event chain", async () => {
    const loopId = JSON.parse(result.stdout).loop_id as string;
    const coordinator = await restartOnState();
    const summary = LoopSummary.parse(await (await api(`${coordinator.url}/v1/loops/${loopId}`)).json());
    expect(summary).toMatchObject({ status: "halted", iteration: 3, best: { candidate_id: "c3", failing: 0 } });

    const raw = (await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const check = verifyChain(raw);
    expect(check).toEqual({ ok: true, head: summary.head });
    const events = raw.map((event) => LoopEvent.parse(event));
    expect(events.map((event) => event.type)).toContain("halted");

    // Every gate log an observation cites is stored in R2 under its sha256.
    const reported = events.filter((event) => event.type === "observation_reported");
    expect(reported).toHaveLength(2);
    for (const event of reported) {
      const log = event.data.observation.gates[0]?.log;
      expect(log).toBeTruthy();
      const body = await (await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${log?.sha256}`)).text();
      expect(body).toContain("$ node --test");
    }

    // The D1 projection lists the loop (drained by the LoopObject's alarm).
    const list = LoopList.parse(await (await api(`${coordinator.url}/v1/loops`)).json());
    expect(list.loops).toContainEqual(expect.objectContaining({ loop_id: loopId, status: "halted", halt_reason: "success_condition_met", iteration: 3 }));

    const status = await runCli(["--json", "--server", coordinator.url, "status", loopId], { cwd: repo });
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ status: "halted", halt_reason: "success_condition_met", exit_class: 10 });
  });

  it("keeps wrangler dev's on-disk layout: wrangler dev on the same state reads back exactly what the coordinator wrote", async () => {
    const loopId = JSON.parse(result.stdout).loop_id as string;
    const read = async (url: string) => {
      const summary = await (await api(`${url}/v1/loops/${loopId}`)).text();
      const events = await (await api(`${url}/v1/loops/${loopId}/events`)).text();
      const list = await (await api(`${url}/v1/loops`)).text();
      // A gate log the first report cites, from R2.
      const reported = events
        .trim()
        .split("\n")
        .map((line) => LoopEvent.parse(JSON.parse(line)))
        .find((event) => event.type === "observation_reported");
      const sha = reported?.type === "observation_reported" ? reported.data.observation.gates[0]?.log?.sha256 : undefined;
      const log = await (await api(`${url}/v1/loops/${loopId}/artifacts/${sha ?? "none"}`)).text();
      return { summary, events, list, log };
    };
    const ours = await restartOnState();
    let written: Awaited<ReturnType<typeof read>>;
    try {
      written = await read(ours.url);
    } finally {
      await ours.stop();
    }
    const wrangler = await startWranglerDev(path.join(state, "data"), path.join(tmp.dir, "wrangler-logs"));
    try {
      expect(await read(wrangler.url)).toEqual(written);
      expect(JSON.parse(written.summary)).toMatchObject({ loop_id: loopId, status: "halted" });
      expect(written.log).toContain("$ node --test");
    } finally {
      await wrangler.stop();
    }
  });
});
