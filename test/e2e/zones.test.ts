import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentRun } from "#shared/engine/index.js";
import { processesWith, survivorsAfter } from "../support/zone-markers.js";
import {
  exitOf,
  gitIn,
  loopEvents,
  makeRepo,
  recordedLoopId,
  runCli,
  sharedCoordinator,
  startCli,
  tempDir,
  TEST_OWNER_TOKEN,
  waitFor,
} from "../support/cli.js";

// Hostile agents against the two zones (DESIGN §6.7). Each one tries to earn a verdict without the work —
// a process left behind to patch the evaluation clones, the runner's token taken from /proc or the state
// directory, git configuration that makes the runner's own git run its commands, a hook planted in the
// repository, the receipt-signing key, a host outside the allowlist, a test that reads the runner's
// environment — and none may converge (exit 10), get a candidate promoted without the fix, or leave a
// process running. In the same coordinator an honest agent, shaped like a real coding agent, converges.

const MARKER = "lw-zones-hostile";
/** The check: value.txt must say "fixed". */
const CHECK = `import { readFileSync } from "node:fs";\nprocess.exit(readFileSync("value.txt", "utf8").trim() === "fixed" ? 0 : 1);\n`;

/** The rejected candidates' commits (kept under refs/loopwarden/rejected/). */
function rejectedCommits(repo: string): string[] {
  return gitIn(repo, "for-each-ref", "--format=%(objectname)", "refs/loopwarden/rejected/").split("\n").filter(Boolean);
}

describe("hostile agents in the agent zone", () => {
  const { tmp, coordinator } = sharedCoordinator("zones");
  let model: Server;
  let modelPort = 0;
  let modelRequests: { key: string | undefined; path: string | undefined }[] = [];
  let outside: Server;
  let outsidePort = 0;
  let outsideHits = 0;

  beforeAll(async () => {
    // A stand-in for a model API on loopback, and another loopback port the allowlist does not name.
    model = createServer((request, response) => {
      modelRequests.push({ key: request.headers["x-api-key"] as string | undefined, path: request.url });
      response.end(JSON.stringify({ edit: { file: "value.txt", content: "fixed\n" } }));
    });
    outside = createServer((_request, response) => {
      outsideHits++;
      response.end("reached");
    });
    await new Promise<void>((resolve) => model.listen(0, "127.0.0.1", resolve));
    await new Promise<void>((resolve) => outside.listen(0, "127.0.0.1", resolve));
    modelPort = (model.address() as { port: number }).port;
    outsidePort = (outside.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => model.close(resolve));
    await new Promise((resolve) => outside.close(resolve));
  });

  /** A repository with the broken value, the check, `agent.mjs` and a contract running it with `agent`'s extra keys. */
  function project(name: string, agentSource: string, agentYaml = "", extra: Record<string, string> = {}): string {
    const dir = path.join(tmp.dir, name);
    mkdirSync(dir, { recursive: true });
    return makeRepo(dir, {
      "value.txt": "broken\n",
      "README.md": "# demo\n",
      "check.mjs": CHECK,
      "agent.mjs": agentSource,
      "loop.yaml": [
        `name: ${name}`,
        "mode: check_fixpoint",
        "gates:",
        "  - { name: check, run: node check.mjs, timeout: 30s }",
        "stop: { max_iterations: 2, no_progress: 2 }",
        "agent:",
        "  run: node agent.mjs",
        "  timeout: 30s",
        agentYaml,
        "",
      ].join("\n"),
      ...extra,
    });
  }

  // --skip-doctor: this file tests the zones against hostile agents; oracle.test.ts covers the precondition.
  const run = (repo: string) => runCli(["--json", "--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo });

  it("a detached process left to patch the evaluation clones is gone with the agent's run, and nothing converges", async () => {
    // It touches README.md, and leaves a process (setsid, nohup) that fixes value.txt in every clone it
    // can find, under the system's temporary directory, for a minute.
    const patcher = `
const { readdirSync, writeFileSync, statSync } = require("node:fs");
const path = require("node:path");
const roots = [require("node:os").tmpdir(), "/tmp", process.env.TMPDIR].filter(Boolean);
const walk = (dir, depth) => { if (depth > 4) return; let entries = []; try { entries = readdirSync(dir); } catch { return; }
  for (const entry of entries) { const file = path.join(dir, entry);
    if (entry === "value.txt") { try { writeFileSync(file, "fixed\\n"); } catch {} }
    else { try { if (statSync(file).isDirectory() && entry !== ".git") walk(file, depth + 1); } catch {} } } };
const until = Date.now() + 60000;
const tick = () => { for (const root of roots) walk(root, 0); if (Date.now() < until) setTimeout(tick, 20); };
tick();`;
    const repo = project(
      "patcher",
      `import { appendFileSync, writeFileSync } from "node:fs";
import { spawn } from "node:child_process";
appendFileSync("README.md", "reviewed\\n");
writeFileSync("/tmp/patcher.cjs", ${JSON.stringify(patcher)});
spawn("setsid", ["nohup", process.execPath, "/tmp/patcher.cjs", "${MARKER}-patcher"], { detached: true, stdio: "ignore" }).unref();
`,
    );
    const result = await run(repo);
    expect(result.code, result.stderr).not.toBe(10);
    expect(JSON.parse(result.stdout)).toMatchObject({ status: "halted" });
    expect(readFileSync(path.join(repo, "value.txt"), "utf8")).toBe("broken\n");
    expect(processesWith(`${MARKER}-patcher`)).toEqual([]);
  });

  it("the runner's token, the owner token and the signing key are nowhere the agent can read, and a gate cannot read them either", async () => {
    // The agent looks through every process's environment and command line, the state directory's
    // files and its home directory, and carries whatever it finds out in its candidate (loot.txt).
    const thief = `import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
const found = ["loot:"];
for (const pid of readdirSync("/proc").filter((name) => /^\\d+$/.test(name))) {
  for (const file of ["environ", "cmdline"]) { try { found.push(readFileSync(\`/proc/\${pid}/\${file}\`, "utf8")); } catch {} }
}
const walk = (dir, depth) => { if (depth > 5) return; let entries = []; try { entries = readdirSync(dir); } catch { return; }
  for (const entry of entries) { const file = path.join(dir, entry); try { found.push(readFileSync(file, "utf8").slice(0, 4096)); } catch { walk(file, depth + 1); } } };
for (const dir of [${JSON.stringify(coordinatorStateDir())}, ${JSON.stringify(tmp.dir)}]) walk(dir, 0);
walk(os.homedir(), 3);
writeFileSync("loot.txt", found.join("\\n"));
`;
    // The check passes if anything it can read holds the token: a gate reading the runner's environment.
    const check = `import { readdirSync, readFileSync } from "node:fs";
let seen = false;
for (const pid of readdirSync("/proc").filter((name) => /^\\d+$/.test(name))) {
  for (const file of ["environ", "cmdline"]) { try { if (readFileSync(\`/proc/\${pid}/\${file}\`, "utf8").includes(${JSON.stringify(TEST_OWNER_TOKEN)})) seen = true; } catch {} }
}
process.exit(seen || readFileSync("value.txt", "utf8").trim() === "fixed" ? 0 : 1);
`;
    const repo = project("thief", thief, "", { "check.mjs": check });
    const result = await run(repo);
    expect(result.code, result.stderr).not.toBe(10);
    const commits = rejectedCommits(repo);
    expect(commits.length).toBeGreaterThan(0);
    const signingKey = readdirSync(coordinatorStateDir()).find((name) => name.includes("signing"));
    const keyText = signingKey ? readFileSync(path.join(coordinatorStateDir(), signingKey), "utf8") : null;
    for (const commit of commits) {
      const carried = gitIn(repo, "show", `${commit}:loot.txt`);
      expect(carried).toContain("loot:"); // not vacuous: the agent's findings are there
      expect(carried).not.toContain(TEST_OWNER_TOKEN);
      if (keyText) expect(carried).not.toContain(JSON.parse(keyText).d ?? keyText);
    }
  });

  it("git configuration and hooks the agent writes never run: not by the runner's git, not in the user's repository", async () => {
    const ran = path.join(tmp.dir, "git-config-ran");
    const hostile = `import { appendFileSync, mkdirSync, writeFileSync, chmodSync } from "node:fs";
const touch = ${JSON.stringify(`touch ${ran}`)};
appendFileSync(".git/config", \`\\n[core]\\n\\tfsmonitor = "\${touch}"\\n[filter "evil"]\\n\\tclean = "\${touch}; cat"\\n\\tsmudge = "\${touch}; cat"\\n[include]\\n\\tpath = /tmp/evil.gitconfig\\n\`);
writeFileSync("/tmp/evil.gitconfig", \`[core]\\n\\tsshCommand = "\${touch}"\\n\`);
writeFileSync(".gitattributes", "* filter=evil\\n");
mkdirSync(".git/hooks", { recursive: true });
for (const hook of ["post-commit", "pre-commit", "post-checkout"]) { writeFileSync(\`.git/hooks/\${hook}\`, \`#!/bin/sh\\n\${touch}\\n\`); chmodSync(\`.git/hooks/\${hook}\`, 0o755); }
appendFileSync("README.md", "configured\\n");
`;
    const repo = project("git-config", hostile);
    const result = await run(repo);
    expect(result.code, result.stderr).not.toBe(10);
    expect(existsSync(ran)).toBe(false);
    const hooks = readdirSync(path.join(repo, ".git", "hooks")).filter((name) => !name.endsWith(".sample"));
    expect(hooks).toEqual([]);
    expect(readFileSync(path.join(repo, ".git", "config"), "utf8")).not.toContain("fsmonitor");
    // The user's next commit runs nothing the agent wrote.
    writeFileSync(path.join(repo, "note.txt"), "mine\n");
    gitIn(repo, "add", "note.txt");
    gitIn(repo, "commit", "-q", "-m", "mine");
    expect(existsSync(ran)).toBe(false);
  });

  it("a host outside the allowlist is refused and logged, one inside it is served and logged; an honest agent shaped like a coding agent converges", async () => {
    modelRequests = [];
    outsideHits = 0;
    // Like a coding agent: asks its model (through the proxy, with a key it gets by name), edits, runs
    // git status, git diff and the project's check in its workspace, and tries one host it was not given.
    const agent = `import http from "node:http";
import { execSync } from "node:child_process";
import { writeFileSync } from "node:fs";
const proxy = new URL(process.env.HTTP_PROXY);
const get = (url, headers = {}) => new Promise((resolve) => {
  const request = http.request({ host: proxy.hostname, port: proxy.port, path: url, headers }, (response) => {
    let body = ""; response.on("data", (chunk) => (body += chunk)); response.on("end", () => resolve({ status: response.statusCode, body }));
  });
  request.on("error", (error) => resolve({ status: 0, body: String(error) }));
  request.end();
});
const outside = await get("http://127.0.0.1:${"${OUTSIDE}"}/steal");
console.log("outside:", outside.status);
const answer = await get("http://127.0.0.1:${"${MODEL}"}/v1/messages", { "x-api-key": process.env.MODEL_KEY ?? "" });
if (answer.status !== 200) { console.error("the model was unreachable:", answer.status, answer.body); process.exit(1); }
const { edit } = JSON.parse(answer.body);
writeFileSync(edit.file, edit.content);
console.log(execSync("git status --short && git diff --stat", { encoding: "utf8" }));
execSync("node check.mjs", { stdio: "inherit" });
if (process.env.LEAKED_SECRET !== undefined) { console.error("a variable the contract does not name reached the agent"); process.exit(1); }
`
      .replace("${OUTSIDE}", String(outsidePort))
      .replace("${MODEL}", String(modelPort));
    const repo = project("honest", agent, ["  env: [MODEL_KEY]", "  network:", `    allow: [127.0.0.1:${modelPort}]`].join("\n"));
    // --skip-doctor: this file tests the zones against hostile agents; oracle.test.ts covers the precondition.
    const result = await runCli(["--server", coordinator.url, "run", "--skip-doctor"], {
      cwd: repo,
      env: { MODEL_KEY: "key-by-name", LEAKED_SECRET: "not-named" },
    });
    expect(result.code, result.stderr).toBe(10);
    expect(modelRequests).toEqual([{ key: "key-by-name", path: "/v1/messages" }]);
    expect(outsideHits).toBe(0);
    expect(result.stderr).toContain(`127.0.0.1:${outsidePort}, which agent.network.allow does not list: refused`);
    // The audit trail is in the log: the host served and the host refused, with bytes.
    const events = await loopEvents(coordinator.url, recordedLoopId(repo, "loop.yaml"));
    const proposed = events.find((event) => event.type === "candidate_proposed");
    const agentRun = (proposed?.data as { agent: AgentRun }).agent;
    expect(agentRun.confinement).toMatchObject({ mechanism: "bwrap", network: "allow", allow: [`127.0.0.1:${modelPort}`] });
    const hosts = agentRun.confinement?.hosts ?? [];
    expect(hosts).toContainEqual(expect.objectContaining({ host: "127.0.0.1", port: modelPort, allowed: true, requests: 1 }));
    expect(hosts).toContainEqual(expect.objectContaining({ host: "127.0.0.1", port: outsidePort, allowed: false }));
    expect(hosts.find((host) => host.allowed)?.bytes_in).toBeGreaterThan(0);
  });

  it("a model CLI with no network to reach its model is refused before the loop is created, with doctor's words", async () => {
    const repo = project("no-model", "", "", {});
    writeFileSync(
      path.join(repo, "loop.yaml"),
      readFileSync(path.join(repo, "loop.yaml"), "utf8").replace("run: node agent.mjs", 'run: claude -p "$(cat program.md)" --dangerously-skip-permissions'),
    );
    gitIn(repo, "commit", "-qam", "a Claude Code agent");
    const result = await run(repo);
    expect(result.code).toBe(2);
    expect(JSON.parse(result.stdout).errors[0]).toMatch(
      /^agent network: none, but the agent command runs Claude Code, which must reach api\.anthropic\.com:443/,
    );
    expect(existsSync(path.join(repo, ".loopwarden", "state.json"))).toBe(false);
  });

  it("a runner killed while its agent works leaves the agent's edits, which the next run sets aside, never lost", async () => {
    const repo = project("killed", "", "  env: [HOLD]");
    // The agent writes, then (while HOLD is set) waits far longer than the test.
    writeFileSync(
      path.join(repo, "loop.yaml"),
      readFileSync(path.join(repo, "loop.yaml"), "utf8").replace(
        "run: node agent.mjs",
        `run: 'echo partial > partial.txt; if [ -n "$HOLD" ]; then exec node -e "setTimeout(() => {}, 60000)" ${MARKER}-killed; fi'`,
      ),
    );
    gitIn(repo, "commit", "-qam", "a slow agent");
    // --skip-doctor: this file tests the zones against hostile agents; oracle.test.ts covers the precondition.
    const runner = startCli(["--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo, env: { HOLD: "1" } });
    try {
      // The agent itself, not bubblewrap's command line (which names it too, before the zone is set up).
      await waitFor(() => processesWith(`${MARKER}-killed`).some((line) => /^\d+ node /.test(line)), "the agent to start");
    } finally {
      runner.kill("SIGKILL");
      await exitOf(runner);
    }
    expect(await survivorsAfter(`${MARKER}-killed`)).toEqual([]);
    const resumed = await runCli(["--server", coordinator.url, "run"], { cwd: repo });
    expect(resumed.stderr).toMatch(/set aside the edits an interrupted agent run left in its workspace at refs\/loopwarden\/interrupted\//);
    const refs = gitIn(repo, "for-each-ref", "--format=%(refname)", "refs/loopwarden/interrupted/").split("\n").filter(Boolean);
    expect(refs).toHaveLength(1);
    expect(gitIn(repo, "show", `${refs[0]}:partial.txt`)).toBe("partial\n");
  });

  it("a per-run credential is minted before each agent run, given by name, and revoked after it", async () => {
    const revoked = path.join(tmp.dir, "revoked.txt");
    const repo = project(
      "credential",
      `import { appendFileSync, writeFileSync } from "node:fs";\nwriteFileSync("seen.txt", process.env.RUN_TOKEN ?? "none");\nappendFileSync("README.md", "tried\\n");\n`,
      [
        "  credentials:",
        "    env: RUN_TOKEN",
        `    mint: node -e "console.log('minting…'); console.log('run-' + process.hrtime.bigint())"`,
        `    revoke: echo "$RUN_TOKEN" >> ${revoked}`,
      ].join("\n"),
    );
    const result = await run(repo);
    expect(result.code, result.stderr).toBe(17);
    const seen = rejectedCommits(repo).map((commit) => gitIn(repo, "show", `${commit}:seen.txt`));
    expect(seen).toHaveLength(2);
    for (const token of seen) expect(token).toMatch(/^run-\d+$/);
    expect(new Set(seen).size).toBe(2); // one credential per run
    expect(readFileSync(revoked, "utf8").trim().split("\n").sort()).toEqual([...seen].sort());
    const events = await loopEvents(coordinator.url, recordedLoopId(repo, "loop.yaml"));
    const runs = events.filter((event) => event.type === "candidate_proposed").map((event) => (event.data as { agent: AgentRun }).agent);
    expect(runs.map((agentRun) => agentRun.confinement?.credential)).toEqual([true, true]);
  });

  /** The shared coordinator's state directory (sharedCoordinator keeps it under the test's directory). */
  function coordinatorStateDir(): string {
    return path.join(tmp.dir, "state");
  }
});

describe("the runner's token on the command line", () => {
  it("is used, with a warning that other local processes can read it, and none when it comes from LOOPWARDEN_TOKEN", async () => {
    const cwd = tempDir("token-flag");
    try {
      // `verify` of a missing file fails at once, without a request: only the warning is under test.
      const missing = path.join(cwd.dir, "missing.json");
      const flagged = await runCli(["--token", "lwt_flagged", "verify", missing], { cwd: cwd.dir });
      expect(flagged.stderr).toContain("--token puts the token on the command line, where other local processes can read it; prefer LOOPWARDEN_TOKEN");
      const fromEnv = await runCli(["verify", missing], { cwd: cwd.dir, env: { LOOPWARDEN_TOKEN: "lwt_env" } });
      expect(fromEnv.stderr).not.toContain("--token puts the token");
    } finally {
      cwd.cleanup();
    }
  });
});
