import { existsSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { LoopEvent } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { api, gitIn, makeRepo, runCli, sharedCoordinator, TEST_OWNER_TOKEN } from "../support/cli.js";

// What the agent is told (last verdict, history) and what it reports (model, cost, context), through
// the real CLI and coordinator.
describe("the agent's side of the loop", () => {
  const { tmp, coordinator } = sharedCoordinator("agent");
  let serial = 0;

  // An agent with two directions to try. It reads the history and never retries a direction that was
  // rejected before: without the history it would try "double the value" forever. It prints where it
  // works and the history it read, so its log shows both.
  const agent = [
    "import { readFileSync, writeFileSync } from 'node:fs';",
    "import path from 'node:path';",
    "const history = readFileSync(process.env.LOOPWARDEN_HISTORY, 'utf8').split('\\n').filter(Boolean).map((l) => JSON.parse(l));",
    "const last = JSON.parse(readFileSync(process.env.LOOPWARDEN_LAST_VERDICT, 'utf8'));",
    "const best = JSON.parse(readFileSync(process.env.LOOPWARDEN_BEST, 'utf8'));",
    "console.log(`working in ${process.cwd()}, context in ${path.relative(process.cwd(), path.dirname(process.env.LOOPWARDEN_HISTORY))}`);",
    "console.log(`history: ${JSON.stringify(history)}`);",
    "console.log(`last verdict: ${last ? last.decision + ' ' + last.reason : 'none'}`);",
    "console.log(`starting from ${best.candidate_id} at ${best.commit.slice(0, 10)}, failing: ${best.failing_tests.join(', ')}`);",
    "const directions = [['double the value', '2'], ['set the value to 7', '7']];",
    "const rejected = new Set(history.filter((h) => h.status === 'rejected').map((h) => h.description));",
    'for (const [name] of directions) if (rejected.has(name)) console.log(`skipping "${name}": rejected before`);',
    "const [description, value] = directions.find(([name]) => !rejected.has(name)) ?? directions[0];",
    "writeFileSync('value.txt', value + '\\n');",
    "const cost = Number(process.env.AGENT_COST ?? '0.25');",
    "writeFileSync(process.env.LOOPWARDEN_AGENT_REPORT, JSON.stringify({",
    "  agent: { provider: 'scripted', model: 'direction-picker', version: '1' },",
    "  sampling: { temperature: 0 },",
    "  cost: { usd: cost, input_tokens: 1200, output_tokens: 80 },",
    "  context_files: ['value.txt', 'notes/missing.md'],",
    "  description,",
    "}));",
  ].join("\n");

  const project = (extra: Record<string, string> = {}) =>
    makeRepo(path.join(tmp.dir, `repo-${++serial}`), {
      "check.mjs": "import { readFileSync } from 'node:fs';\nprocess.exit(readFileSync('value.txt', 'utf8').trim() === '7' ? 0 : 1);\n",
      "value.txt": "1\n",
      "agent.mjs": agent,
      ...extra,
    });
  const eventsOf = async (loopId: string) =>
    (await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)));

  it("the agent reads the tree it starts from, the last verdict and the history, and skips a direction that was rejected", async () => {
    const repo = project();
    // --skip-doctor: this file tests what the agent is given and reports; oracle.test.ts covers the precondition.
    const result = await runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor", "--check", "node check.mjs", "--exec", "node agent.mjs"], {
      cwd: repo,
    });
    expect(result.code, result.stderr).toBe(10);
    const output = JSON.parse(result.stdout) as { loop_id: string; iteration: number };
    expect(output.iteration).toBe(2);
    const logs = path.join(repo, ".loopwarden", "logs", output.loop_id);
    // Even the first run knows what fails where it starts (t0); after a rejection it starts from t0 again.
    const t0 = gitIn(repo, "rev-parse", "main").trim().slice(0, 10);
    const first = readFileSync(path.join(logs, "agent-1.log"), "utf8");
    expect(first).toContain("last verdict: none");
    expect(first).toContain(`starting from t0 at ${t0}, failing: gate:check`);
    const second = readFileSync(path.join(logs, "agent-2.log"), "utf8");
    expect(second).toContain("last verdict: rejected no_improvement");
    expect(second).toContain(`starting from t0 at ${t0}, failing: gate:check`);
    expect(second).toContain('skipping "double the value": rejected before');

    // Each run works in a workspace of its own outside the repository, a fresh clone with the context
    // files in it (DESIGN §6.7), removed once its tree is taken; the history it read is in its log.
    const workspaces = [first, second].map((log) => /^working in (.+), context in \.loopwarden\/agent$/m.exec(log)?.[1] ?? "");
    for (const workspace of workspaces) {
      expect(path.dirname(path.dirname(workspace))).toBe(path.join(os.tmpdir(), "loopwarden-agent"));
      expect(path.basename(workspace)).toMatch(/^ws-/);
      expect(existsSync(workspace)).toBe(false);
    }
    expect(workspaces[0]).not.toBe(workspaces[1]);
    expect(first).toContain("history: []");
    const history = JSON.parse(/^history: (.+)$/m.exec(second)?.[1] ?? "[]") as unknown[];
    expect(history).toHaveLength(1);
    expect(history[0]).toMatchObject({
      candidate_id: "c1",
      parent: "t0",
      status: "rejected",
      reason: "no_improvement",
      diff_summary: "value.txt +1 -1",
      description: "double the value",
    });
  });

  it("records the agent's report with its candidate: model, sampling, cost, and context files pinned by hash", async () => {
    const repo = project();
    // --skip-doctor: this file tests what the agent is given and reports; oracle.test.ts covers the precondition.
    const result = await runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor", "--check", "node check.mjs", "--exec", "node agent.mjs"], {
      cwd: repo,
    });
    expect(result.code, result.stderr).toBe(10);
    const { loop_id: loopId } = JSON.parse(result.stdout) as { loop_id: string };
    const proposed = (await eventsOf(loopId)).filter((event) => event.type === "candidate_proposed");
    expect(proposed).toHaveLength(2);
    const [, second] = proposed;
    if (second?.type !== "candidate_proposed") throw new Error("no second proposal");
    // The context file is pinned to its content in the candidate: value.txt holds "7\n" there.
    const committed = gitIn(repo, "show", `${second.data.commit}:value.txt`);
    expect(second.data.agent_report).toEqual({
      agent: { provider: "scripted", model: "direction-picker", version: "1" },
      sampling: { temperature: 0 },
      cost: { usd: 0.25, input_tokens: 1200, output_tokens: 80 },
      context_files: [
        { path: "value.txt", sha256: sha256Hex(committed) },
        { path: "notes/missing.md", sha256: null },
      ],
      description: "set the value to 7",
    });
  });

  it("an invalid report is not recorded, and the reason is", async () => {
    const repo = project({
      "agent.mjs":
        "import { writeFileSync } from 'node:fs';\nwriteFileSync('value.txt', '7\\n');\nwriteFileSync(process.env.LOOPWARDEN_AGENT_REPORT, JSON.stringify({ cost: { usd: -1 } }));\n",
    });
    // --skip-doctor: this file tests what the agent is given and reports; oracle.test.ts covers the precondition.
    const result = await runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor", "--check", "node check.mjs", "--exec", "node agent.mjs"], {
      cwd: repo,
    });
    expect(result.code, result.stderr).toBe(10);
    const { loop_id: loopId } = JSON.parse(result.stdout) as { loop_id: string };
    const proposed = (await eventsOf(loopId)).find((event) => event.type === "candidate_proposed");
    if (proposed?.type !== "candidate_proposed") throw new Error("no proposal");
    expect(proposed.data.agent_report).toBeUndefined();
    expect(proposed.data.agent_report_error).toContain("cost.usd");
  });

  it("halts budget_exceeded (18) when the reported cost reaches stop.budget.cost_usd", async () => {
    const repo = project({
      "loop.yaml": [
        "name: budgeted",
        "mode: check_fixpoint",
        "gates:",
        "  - name: check",
        "    run: node check.mjs",
        "stop:",
        "  budget: { cost_usd: 1 }",
        "agent:",
        "  run: node agent.mjs",
        // The agent gets only the variables the contract names (DESIGN §6.7).
        "  env: [AGENT_COST]",
        "",
      ].join("\n"),
      // Never reaches 7: each run costs 0.6, so the second run exhausts the budget.
      "check.mjs": "process.exit(1);\n",
    });
    writeFileSync(path.join(repo, ".gitignore"), ".loopwarden/\n");
    gitIn(repo, "add", "-A");
    gitIn(repo, "commit", "-qm", "budget");
    // --skip-doctor: this file tests what the agent is given and reports; oracle.test.ts covers the precondition.
    const result = await runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo, env: { AGENT_COST: "0.6" } });
    expect(result.code, result.stderr).toBe(18);
    expect(JSON.parse(result.stdout)).toMatchObject({ halt_reason: "budget_exceeded", exit_class: 18, iteration: 2 });
  });

  // The runner holds LOOPWARDEN_TOKEN and LOOPWARDEN_OWNER_TOKEN (the test environment sets both); the
  // agent knows where the coordinator is and tries to propose, lease and report a passing candidate of
  // its own, then fixes nothing. It writes what it got into its candidate, whose commit carries it out of
  // its workspace. It must not reach exit 10: the check still fails.
  const cheat = () =>
    [
      "import { writeFileSync } from 'node:fs';",
      `const base = ${JSON.stringify(coordinator.url)} + '/v1/loops/' + process.env.LOOPWARDEN_LOOP_ID;`,
      "const token = process.env.LOOPWARDEN_TOKEN ?? process.env.LOOPWARDEN_OWNER_TOKEN;",
      "const headers = { 'content-type': 'application/json', ...(token ? { authorization: 'Bearer ' + token } : {}) };",
      "const post = (path, body) => fetch(base + path, { method: 'POST', headers, body: JSON.stringify(body) }).then((response) => response.status, (error) => 'unreachable: ' + (error.cause?.code ?? error.message));",
      "const commit = 'c'.repeat(40);",
      "const proposed = await post('/candidates', { idempotency_key: 'cheat-' + process.env.LOOPWARDEN_ITERATION, commit, diff_sha256: 'd'.repeat(64), empty: false, proposer: { kind: 'step' }, agent: null });",
      "const leased = await post('/leases', { runner_id: 'cheater' });",
      "const leaked = JSON.stringify(process.env).includes(" + JSON.stringify(TEST_OWNER_TOKEN) + ");",
      "writeFileSync('cheat-statuses.json', JSON.stringify({ token: Boolean(token), leaked, proposed, leased }));",
    ].join("\n");

  /** Runs the cheating agent for two iterations, checks the log holds nothing of its own, and answers how each run was confined and what its candidate says it got. */
  async function runCheat(...flags: string[]) {
    const repo = project({ "agent.mjs": cheat() });
    // --skip-doctor: this file tests what the agent is given and reports; oracle.test.ts covers the precondition.
    const args = ["--json", "--server", coordinator.url, "run", "--skip-doctor", "--check", "node check.mjs", "--exec", "node agent.mjs"];
    const result = await runCli([...args, "--max-iterations", "2", ...flags], { cwd: repo });
    expect(result.code, result.stderr).not.toBe(10);
    const loopId = (JSON.parse(result.stdout) as { loop_id: string }).loop_id;
    const events = await eventsOf(loopId);
    // Only the runner's own candidates and leases are in the log.
    expect(events.filter((event) => event.type === "lease_granted" && event.data.runner_id === "cheater")).toEqual([]);
    expect(events.filter((event) => event.type === "candidate_proposed" && event.data.commit === "c".repeat(40))).toEqual([]);
    const proposed = events.flatMap((event) => (event.type === "candidate_proposed" ? [event.data] : []));
    expect(proposed).toHaveLength(2);
    return proposed.map((data) => ({
      confinement: data.agent?.confinement,
      statuses: JSON.parse(gitIn(repo, "show", `${data.commit}:cheat-statuses.json`)) as unknown,
    }));
  }

  it("an agent that tries to report its own evidence cannot reach the coordinator from its zone, and earns nothing", async () => {
    // The agent's network is none by default (DESIGN §6.7): not even the coordinator on loopback.
    for (const run of await runCheat()) {
      expect(run.confinement).toMatchObject({ mechanism: "bwrap", network: "none" });
      expect(run.statuses).toEqual({ token: false, leaked: false, proposed: "unreachable: ECONNREFUSED", leased: "unreachable: ECONNREFUSED" });
    }
  });

  it("unconfined, an agent that reports its own evidence with the credentials in its environment gets 401 and earns nothing", async () => {
    // --unconfined: the agent reaches the coordinator, so what keeps it out is the runner's scrubbing of
    // its tokens from the agent's environment, the subject here.
    for (const run of await runCheat("--unconfined")) {
      expect(run.confinement).toMatchObject({ mechanism: "none" });
      expect(run.statuses).toEqual({ token: false, leaked: false, proposed: 401, leased: 401 });
    }
  });
});
