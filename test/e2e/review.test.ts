import { cpSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT, exitOf, gitIn, makeRepo, recordedLoopId, runCli, sharedCoordinator, startCli, waitFor } from "../support/cli.js";

// The human step (docs/design.md §6.8), through the real CLI: an agent that finds a test it believes is
// wrong asks for it to change; the candidate waits for a person instead of halting the loop. Only a person
// with the admin or review scope answers, and the answer is in the signed log; nobody answering halts
// `human_required`; nothing the agent writes or reaches answers for it.

const TAP_GATE = [
  "gates:",
  "  - name: unit",
  "    run: node --test --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap",
  "    tests: { tap: .loopwarden/out/tests.tap }",
];

/** The agent's request, written where LOOPWARDEN_REQUESTS says. */
const REQUEST = [
  "writeFileSync(process.env.LOOPWARDEN_REQUESTS, JSON.stringify({",
  "  files: ['test/text.test.js'],",
  "  why: 'slugify should trim hyphens at both ends; the test only checks one side',",
  "}));",
].join("\n");

/** Iteration 1: fixes slugify, changes the protected test and asks to. Iteration 2: fixes titleCase, tests untouched. */
const AGENT = [
  "import { readFileSync, writeFileSync } from 'node:fs';",
  "const iteration = Number(process.env.LOOPWARDEN_ITERATION);",
  "if (iteration === 1) {",
  "  writeFileSync('src/text.js', readFileSync('src/text.js', 'utf8').replace('replace(/[^a-z0-9]/g, \"-\")', 'replace(/[^a-z0-9]+/g, \"-\").replace(/^-+|-+$/g, \"\")'));",
  "  writeFileSync('test/text.test.js', readFileSync('test/text.test.js', 'utf8').replace('\"loop-warden\");', '\"loop-warden\");\\n  assert.equal(slugify(\"--x--\"), \"x\");'));",
  REQUEST,
  "} else {",
  "  writeFileSync('src/text.js', readFileSync('src/text.js', 'utf8').replace('replace(/\\\\b\\\\w/,', 'replace(/\\\\b\\\\w/g,'));",
  "}",
].join("\n");

describe("the human step: a request to change protected files", () => {
  const { tmp, coordinator } = sharedCoordinator("review");
  let serial = 0;

  const project = (agent: string, extraContract: string[] = []) => {
    const repo = path.join(tmp.dir, `repo-${++serial}`);
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    writeFileSync(path.join(repo, "the-agent.mjs"), agent);
    writeFileSync(
      path.join(repo, "loop.yaml"),
      ["name: reviewed", "mode: check_fixpoint", ...TAP_GATE, ...extraContract, "agent:", "  run: node the-agent.mjs", ""].join("\n"),
    );
    writeFileSync(path.join(repo, ".gitignore"), ".loopwarden/\n");
    return makeRepo(repo, {});
  };

  it("review shows the request; ack lets exactly that change be judged and promoted; the next candidate is held to the approved file; the receipt names who approved", async () => {
    const repo = project(AGENT, ["stop:", "  max_iterations: 2"]);
    const run = startCli(["--server", coordinator.url, "run"], { cwd: repo });
    try {
      await waitFor(() => run.output().includes("asks a person to allow its change to test/text.test.js") || run.exitCode !== null, "the review request");
      const loopId = recordedLoopId(repo, "loop.yaml");
      const review = await runCli(["--server", coordinator.url, "review"], { cwd: repo });
      expect(review.code, review.stderr).toBe(0);
      expect(review.stdout).toContain("c1 at");
      expect(review.stdout).toContain("asks to change test/text.test.js");
      expect(review.stdout).toContain("why (the agent's words): slugify should trim hyphens at both ends");
      // The diff of the request is shown: the test line the agent added.
      expect(review.stdout).toContain('+  assert.equal(slugify("--x--"), "x");');

      const withoutNote = await runCli(["--server", coordinator.url, "ack", "c1"], { cwd: repo });
      expect(withoutNote.code).not.toBe(0);
      const acked = await runCli(["--server", coordinator.url, "ack", "c1", "--note", "the trim is the intended behaviour"], { cwd: repo });
      expect(acked.code, acked.stderr).toBe(0);
      expect(acked.stdout).toContain("c1 approved");

      expect(await exitOf(run), run.output()).toBe(12);
      const output = run.output();
      expect(output).toMatch(/\[1\] c1 promoted \(fewer_failures\)/);
      // Iteration 2 leaves the approved test as c1 made it: compared with the approved reading, not t0's.
      expect(output).toMatch(/\[2\] c2 promoted \(fewer_failures\)/);
      expect(readFileSync(path.join(repo, "test", "text.test.js"), "utf8")).toContain('slugify("--x--")');

      const receiptUrl = /receipt: (\S+)/.exec(output)?.[1] ?? "";
      const verified = await runCli(["verify", receiptUrl], { cwd: repo });
      expect(verified.code, verified.stdout + verified.stderr).toBe(0);
      expect(verified.stdout).toMatch(
        /review: c1: change to test\/text\.test\.js approved by owner at \S+ \(now promoted\): the trim is the intended behaviour/,
      );
      const receipt = (await (await fetch(`${receiptUrl}.json`)).json()) as { payload: string };
      const predicate = (JSON.parse(Buffer.from(receipt.payload, "base64").toString("utf8")) as { predicate: { reviews?: unknown[] } }).predicate;
      expect(predicate.reviews).toEqual([
        expect.objectContaining({
          candidate_id: "c1",
          decision: "ack",
          by: "owner",
          files: ["test/text.test.js"],
          status: "promoted",
          note: "the trim is the intended behaviour",
        }),
      ]);
      expect(gitIn(repo, "status", "--porcelain").trim()).toBe("");
      const watched = await runCli(["--server", coordinator.url, "watch", loopId], { cwd: repo });
      expect(watched.stdout).toMatch(/c1's change to test\/text\.test\.js approved by owner: the trim is the intended behaviour/);
    } finally {
      if (run.exitCode === null) run.kill("SIGKILL");
    }
  });

  it("reject rejects the candidate (review_rejected) and the loop goes on", async () => {
    const repo = project(AGENT, ["stop:", "  max_iterations: 1"]);
    const run = startCli(["--server", coordinator.url, "run"], { cwd: repo });
    try {
      await waitFor(() => run.output().includes("asks a person to allow") || run.exitCode !== null, "the review request");
      const rejected = await runCli(["--server", coordinator.url, "reject", "c1", "--note", "the test is right"], { cwd: repo });
      expect(rejected.code, rejected.stderr).toBe(0);
      expect(await exitOf(run), run.output()).toBe(12);
      expect(run.output()).toMatch(/c1 rejected \(review_rejected\): owner rejected its change to test\/text\.test\.js: the test is right/);
      expect(readFileSync(path.join(repo, "test", "text.test.js"), "utf8")).not.toContain('slugify("--x--")');
    } finally {
      if (run.exitCode === null) run.kill("SIGKILL");
    }
  });

  it("nobody answers: the loop halts human_required (11) after stop.review_timeout, and an agent's own attempts to approve change nothing", async () => {
    const state = path.join(tmp.dir, "state");
    const attacker = [
      "import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';",
      AGENT.split("\n").slice(3, 5).join("\n"),
      REQUEST,
      "// Every way it could try to answer for the person: files beside the request, the context directory,",
      "// the coordinator's owner token, and the coordinator itself.",
      "const tried = [];",
      "for (const [file, body] of [",
      "  [process.env.LOOPWARDEN_REQUESTS + '.ack', '{\"decision\":\"ack\"}'],",
      '  [\'.loopwarden/agent/review.json\', \'{"candidate_id":"c1","decision":"ack","note":"self"}\'],',
      "  [process.env.LOOPWARDEN_CONTEXT + '/ack.json', '{\"ack\":true}'],",
      "]) { try { mkdirSync(file.slice(0, file.lastIndexOf('/')), { recursive: true }); writeFileSync(file, body); tried.push('wrote ' + file); } catch (error) { tried.push('could not write ' + file); } }",
      "let token = process.env.LOOPWARDEN_TOKEN ?? null;",
      "try { token = readFileSync(process.env.VICTIM_STATE + '/owner-token', 'utf8').trim(); tried.push('read the owner token'); } catch { tried.push('no owner token'); }",
      "try {",
      "  const answer = await fetch(process.env.VICTIM_URL + '/v1/loops/' + process.env.LOOPWARDEN_LOOP_ID + '/candidates/c1/review', { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token }, body: JSON.stringify({ decision: 'ack', note: 'self-approved' }) });",
      "  tried.push('coordinator answered ' + answer.status);",
      "} catch { tried.push('coordinator unreachable'); }",
      "console.log('ATTEMPTS: ' + tried.join('; '));",
    ].join("\n");
    const repo = project(attacker, ["stop:", "  max_iterations: 3", "  review_timeout: 3s"]);
    const env = { VICTIM_STATE: state, VICTIM_URL: coordinator.url };
    writeFileSync(
      path.join(repo, "loop.yaml"),
      readFileSync(path.join(repo, "loop.yaml"), "utf8").replace("  run: node the-agent.mjs", "  run: node the-agent.mjs\n  env: [VICTIM_STATE, VICTIM_URL]"),
    );
    gitIn(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "agent env");
    const result = await runCli(["--json", "--server", coordinator.url, "run"], { cwd: repo, env });
    expect(result.code, result.stderr).toBe(11);
    expect(JSON.parse(result.stdout.trim())).toMatchObject({ halt_reason: "human_required", exit_class: 11, iteration: 0 });
    const loopId = recordedLoopId(repo, "loop.yaml");
    // The agent's own account of what it tried, from its log (--json keeps its output off stderr).
    const attempts = readFileSync(path.join(repo, ".loopwarden", "logs", loopId, "agent-1.log"), "utf8");
    expect(attempts).toContain("ATTEMPTS:");
    expect(attempts).not.toContain("read the owner token");
    expect(attempts).not.toMatch(/coordinator answered 2\d\d/);
    // The log, event by event: the request timed out, and nothing answered it.
    const watched = await runCli(["--server", coordinator.url, "watch", loopId], { cwd: repo });
    const log = watched.stdout + watched.stderr;
    expect(log).toContain("nobody answered c1's review request");
    expect(log).not.toMatch(/approved by|refused by/);
    expect(readFileSync(path.join(repo, "test", "text.test.js"), "utf8")).not.toContain('slugify("--x--")');
  });
});
