import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LoopEvent } from "#shared/engine/index.js";
import { LEVEL_HOLD, makeLevelProject } from "../support/level-project.js";
import { dirsHolding, killListed, processesWith, survivorsAfter } from "../support/zone-markers.js";
import { twoRunnerProject } from "../support/two-runner-project.js";
import { api, clonesOf, exitOf, gitIn, makeRepo, recordedLoopId, runCli, sharedCoordinator, startCli, tempDir, waitFor } from "../support/cli.js";

// One coordinator serves the whole file (issue 30: a coordinator's start is about 3 s of CPU): every test
// here crashes or interrupts a runner, never the coordinator, and each works in a repository, and so a
// loop, of its own; what a test reads back it reads by its loop's id, or by its loop's unique name.
const { coordinator } = sharedCoordinator("resume");

/** A directory of this describe block's own, removed after it. */
function ownDir(prefix: string): { dir: string } {
  const tmp = tempDir(prefix);
  afterAll(() => tmp.cleanup());
  return tmp;
}

// The runner is killed with SIGKILL while it evaluates a candidate; `loopwarden run` again picks the
// same loop up from the coordinator, finishes that candidate under its own lease, and goes on.
describe("a runner crash mid-evaluation", () => {
  const tmp = ownDir("mid-evaluation");

  it("resumes the same loop without a duplicate candidate", async () => {
    const { repo, check, marker } = makeLevelProject(tmp.dir);
    // --skip-doctor: this file tests resuming a loop; oracle.test.ts covers the precondition.
    const args = ["--server", coordinator.url, "run", "--skip-doctor", "--check", check, "--exec", "node agent.mjs", "--max-iterations", "5"];
    // The runners' temporary directory is this test's own: any runner that starts removes the clones of
    // runner processes that no longer exist, so another test's runner, started in the shared one while
    // this one lies dead, would remove the very clone this test looks at.
    const tmpDir = path.join(tmp.dir, "runner-tmp");
    mkdirSync(tmpDir);
    const clones = (pid: number) => clonesOf(pid, tmpDir);

    // Only the first run's check of c1 holds (LEVEL_HOLD): the resumed run evaluates it straight through.
    const first = startCli(args, { cwd: repo, env: { LEVEL_HOLD: "1", TMPDIR: tmpDir } });
    const firstPid = first.pid ?? 0;
    await waitFor(() => dirsHolding(clones(firstPid), LEVEL_HOLD.started).length > 0 || first.exitCode !== null, "the first candidate's evaluation");
    expect(first.exitCode, first.output()).toBeNull();
    // The hung check, seen from the host by its marker (its pid in the zone is not the host's).
    expect(processesWith(marker).filter((line) => line.slice(line.indexOf(" ") + 1) === check)).toHaveLength(1);
    first.kill("SIGKILL");
    await exitOf(first);
    // The check ran in the runner's exec zone, whose PID namespace dies with the runner: even a crash
    // leaves no process of the evaluation behind (before the zones, it outlived the runner in a group of
    // its own and the test had to kill it).
    const survivors = await survivorsAfter(marker);
    killListed(survivors);
    expect(survivors).toEqual([]);
    const loopId = recordedLoopId(repo);
    // The crash left the candidate committed on the loop branch, undecided, and its clone behind (in the
    // temporary directory, outside the repository), beside at most the blank clone made ahead for the
    // next candidate (nothing checked out in it).
    expect(gitIn(repo, "log", "-1", "--format=%s")).toContain("candidate of iteration 1");
    const candidateClones = dirsHolding(clones(firstPid), LEVEL_HOLD.started);
    expect(candidateClones).toHaveLength(1);
    const others = readdirSync(clones(firstPid)).filter((entry) => path.join(clones(firstPid), entry) !== candidateClones[0]);
    expect(others.length).toBeLessThanOrEqual(1);
    for (const other of others) expect(readdirSync(path.join(clones(firstPid), other))).toEqual([".git"]);
    expect(existsSync(path.join(repo, ".loopwarden", "clones"))).toBe(false);

    const second = await runCli(["--json", ...args], { cwd: repo, env: { TMPDIR: tmpDir } });
    expect(second.code, second.stderr).toBe(10);
    expect(JSON.parse(second.stdout)).toMatchObject({ loop_id: loopId, halt_reason: "success_condition_met", iteration: 2 });
    // The dead runner's clone is removed by the next one.
    expect(existsSync(clones(firstPid))).toBe(false);

    const events = (await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)));
    const proposed = events.filter((event) => event.type === "candidate_proposed").map((event) => event.data.candidate_id);
    expect(proposed).toEqual(["c1", "c2"]);
    const verdicts = events.filter((event) => event.type === "verdict").map((event) => [event.data.candidate_id, event.data.decision]);
    expect(verdicts).toEqual([
      ["c1", "rejected"],
      ["c2", "promoted"],
    ]);
    // The resumed runner finished c1 under the lease it already held: no second lease was needed.
    expect(events.filter((event) => event.type === "lease_granted").map((event) => event.data.candidate_id)).toEqual(["c1", "c2"]);
  });
});

// DESIGN §6.6: an interrupted loop is resumed, not re-baselined — whatever flags the next `run` has.
describe("interrupt, then run again with other flags", () => {
  const tmp = ownDir("rerun");

  it("resumes the loop and judges the interrupted candidate: a deleted test halts 13, never a new baseline that passes", async () => {
    const repo = makeRepo(path.join(tmp.dir, "repo"), {
      "src/sum.js": "export const sum = (a, b) => a - b;\n",
      "test/sum.test.js": [
        "import assert from 'node:assert/strict';",
        "import { test } from 'node:test';",
        "import { sum } from '../src/sum.js';",
        "test('adds zero', () => assert.equal(sum(2, 0), 2));",
        "test('adds two numbers', () => assert.equal(sum(2, 3), 5));",
        "",
      ].join("\n"),
      // In a run that asks for it (RERUN_HOLD), the gate of the first candidate (the one without the test:
      // t0 has it) waits, so the run can be interrupted there. It says so in its own clone, the exec zone's
      // one writable directory, where the test finds it; a gate keeps no state from one run to the next.
      "pause.mjs": [
        "import { existsSync, writeFileSync } from 'node:fs';",
        "if (process.env.RERUN_HOLD === '1' && !existsSync('test/sum.test.js')) {",
        "  writeFileSync('gate.started', String(process.pid));",
        "  await new Promise((resolve) => setTimeout(resolve, 120_000));",
        "}",
      ].join("\n"),
      // The cheat: delete the failing test, so the suite is green with the bug still there.
      "tools/agent.mjs": "import { rmSync } from 'node:fs';\nrmSync('test/sum.test.js');\n",
      "loop.yaml": [
        "name: rerun",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        "    run: node pause.mjs && node --test --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap",
        "    tests: { tap: .loopwarden/out/tests.tap }",
        "agent:",
        "  run: node tools/agent.mjs",
        "",
      ].join("\n"),
      ".gitignore": ".loopwarden/\n",
    });
    const cli = (...args: string[]) => runCli(["--json", "--server", coordinator.url, ...args], { cwd: repo });

    // --skip-doctor: this file tests resuming a loop; oracle.test.ts covers the precondition.
    const first = startCli(["--server", coordinator.url, "run", "--skip-doctor", "--max-iterations", "3"], { cwd: repo, env: { RERUN_HOLD: "1" } });
    await waitFor(() => dirsHolding(clonesOf(first.pid ?? 0), "gate.started").length > 0 || first.exitCode !== null, "the first candidate's evaluation");
    expect(first.exitCode, first.output()).toBeNull();
    first.kill("SIGINT");
    expect(await exitOf(first)).toBe(130);
    const loopId = recordedLoopId(repo, "loop.yaml");
    // Interrupted mid-evaluation: HEAD is the unjudged candidate, with the test already deleted.
    expect(existsSync(path.join(repo, "test", "sum.test.js"))).toBe(false);

    // A flag that would change the pinned contract is refused with the exact difference, and changes nothing.
    const changed = await cli("run", "--max-iterations", "7");
    expect(changed.code, changed.stderr).toBe(2);
    expect(changed.stdout).toContain("stop.max_iterations: 3 → 7");
    expect(recordedLoopId(repo, "loop.yaml")).toBe(loopId);

    // Without flags the same loop resumes (its pinned limit of 3 stands) and judges the candidate.
    const human = (...args: string[]) => runCli(["--server", coordinator.url, ...args], { cwd: repo });
    const resumed = await human("run");
    expect(resumed.code, resumed.stderr).toBe(13);
    expect(resumed.stderr).toContain(`resuming loop ${loopId} (0 of 3 iterations done)`);
    expect(resumed.stderr).not.toContain("capturing the baseline");
    expect(resumed.stdout + resumed.stderr).toContain(`loop ${loopId} halted: blocked_path_modified (exit 13) after 1 iteration(s)`);
    expect(existsSync(path.join(repo, "test", "sum.test.js"))).toBe(true);

    // A halted loop is reported as halted, with its class; another loop needs --new, from a commit the user made.
    const again = await human("run");
    expect(again.code).toBe(13);
    expect(again.stderr).toContain("already halted");
    expect(JSON.parse((await cli("run")).stdout)).toMatchObject({ loop_id: loopId, status: "halted", halt_reason: "blocked_path_modified" });
    const fresh = await cli("run", "--new");
    expect(fresh.code).toBe(1);
    expect(fresh.stdout).toContain(`the branch of loop ${loopId}`);
    // Refused on the loop's branch, --new changed nothing, and says nothing that it did.
    const refused = await human("run", "--new");
    expect(refused.code).toBe(1);
    expect(refused.stderr).not.toContain("now follows");
    expect(recordedLoopId(repo, "loop.yaml")).toBe(loopId);
    gitIn(repo, "switch", "-q", "main");
    // --skip-doctor: this file tests resuming a loop; oracle.test.ts covers the precondition.
    const other = await human("run", "--new", "--skip-doctor", "--max-iterations", "1");
    const newLoop = recordedLoopId(repo, "loop.yaml");
    expect(newLoop).not.toBe(loopId);
    expect(other.stderr).toContain(`--new: loop ${loopId} is left as it is on its coordinator; this repository now follows loop ${newLoop}`);
    expect(other.stdout + other.stderr).toContain("halted: blocked_path_modified");
  });
});

// `run` lets a rejection's return of the working tree to the best commit run on while the next agent
// works (it never reads the working tree): a runner killed while it is in flight leaves the rejected
// candidate at HEAD, or the tree half restored, and the next run settles either without losing the
// candidate or proposing it twice.
describe("a runner crash while the working tree goes back to the best commit", () => {
  const tmp = ownDir("restore-crash");

  it("the next run finds the rejected candidate kept, the tree at the best commit, and converges", async () => {
    const { repo, check } = makeLevelProject(tmp.dir);
    const git = (...args: string[]) => gitIn(repo, ...args).trim();
    const t0 = git("rev-parse", "HEAD");
    // --skip-doctor: this file tests resuming a loop; oracle.test.ts covers the precondition.
    const args = ["--server", coordinator.url, "run", "--skip-doctor", "--check", check, "--exec", "node agent.mjs", "--max-iterations", "5"];
    const crashed = await runCli(args, { cwd: repo, env: { LOOPWARDEN_FAULT: "restore-begun" } });
    expect(crashed.code, crashed.stderr).toBeNull();
    const loopId = recordedLoopId(repo);

    const again = await runCli(["--json", ...args], { cwd: repo });
    expect(again.code, again.stderr).toBe(10);
    expect(JSON.parse(again.stdout)).toMatchObject({ loop_id: loopId, halt_reason: "success_condition_met", iteration: 2 });
    const events = (await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)));
    expect(events.filter((event) => event.type === "candidate_proposed").map((event) => event.data.candidate_id)).toEqual(["c1", "c2"]);
    // c1, rejected before the crash, is kept under its ref on t0; the tree is the promoted c2's, clean.
    const rejected = git("rev-parse", `refs/loopwarden/rejected/${loopId}/c1`);
    expect(git("rev-parse", `${rejected}^`)).toBe(t0);
    expect(git("show", `${rejected}:level.txt`)).toBe("1");
    expect(git("rev-parse", "HEAD^")).toBe(t0);
    expect(git("show", "HEAD:level.txt")).toBe("2");
    expect(git("status", "--porcelain", "--untracked-files=all")).toBe("");
  });
});

// Issue 26: a run stopped while another runner judges its candidate said nothing of that verdict when
// it resumed (a promoted candidate is simply the best by then). It prints the verdicts decided while it
// was away first, from what this checkout recorded having shown.
describe("a run resumed after its candidate was judged elsewhere", () => {
  const tmp = ownDir("away");

  it("prints the verdicts decided while it was away, first, and never twice", async () => {
    const repo = makeRepo(path.join(tmp.dir, "laptop"), twoRunnerProject());
    const checkout = path.join(tmp.dir, "box");
    execFileSync("git", ["clone", "-q", repo, checkout]);
    const args = ["--server", coordinator.url, "run"];
    // The contract wants a runner with pool=shared, which the laptop is not. Its t0 is measured by a
    // runner with the label (here a run given it, stopped as soon as the coordinator has created the loop:
    // the next run sends that creation again and follows the loop, baseline/t0 test in baseline-lease.test).
    // --skip-doctor: this file tests resuming a loop; oracle.test.ts covers the precondition.
    const creator = await runCli([...args, "--labels", "pool=shared", "--skip-doctor"], { cwd: repo, env: { LOOPWARDEN_FAULT: "create-answered" } });
    expect(creator.code, creator.stderr).toBeNull();
    // The run proposes c1 and waits, saying so (stderr is a pipe here, not a terminal) within 35 s, as issue 26 asks.
    const first = startCli(args, { cwd: repo });
    await waitFor(
      () => /waiting for a runner with pool=shared to evaluate c1/.test(first.output()) || first.exitCode !== null,
      "the run saying it waits for a runner",
      35_000,
    );
    first.kill("SIGINT");
    await exitOf(first);
    const loopId = recordedLoopId(repo, "loop.yaml");
    // While the run is away, a runner with the label judges c1 (fixes add: promoted), and goes on serving.
    const work = startCli(["--server", coordinator.url, "work", "--labels", "pool=shared", "--loop", loopId], { cwd: checkout });
    try {
      await waitFor(() => /c1 promoted/.test(work.output()) || work.exitCode !== null, "the runner's verdict on c1");
      const again = await runCli(args, { cwd: repo });
      expect(again.code, `${again.stderr}\nwork:\n${work.output()}`).toBe(10);
      expect(again.stderr).toMatch(/^while this run was away, the loop decided 1 candidate\(s\):\n\[away\] c1 promoted \(fewer_failures\)/m);
      // Shown once: the candidate at HEAD, settled on resume, is not printed again; later verdicts are this run's own.
      expect(again.stderr.match(/c1 promoted/g)).toHaveLength(1);
      expect(await exitOf(work)).toBe(0);
    } finally {
      if (work.exitCode === null) work.kill("SIGKILL");
    }
  });
});

// DESIGN §6.6 and §4: a runner killed between the loop's creation and recording it must not leave the
// loop orphaned and create a second one on the next run.
describe("a runner crash right after the loop is created", () => {
  const tmp = ownDir("create-crash");

  it.each(["create-saved", "create-answered", "loop-created"])(
    "killed at %s, the next run sends the same creation again and follows the one loop the coordinator has, its baseline log stored",
    async (point) => {
      const name = `crash-${point}`;
      const repo = makeRepo(path.join(tmp.dir, name), { "README.md": "x\n" });
      // --skip-doctor: this file tests resuming a loop; oracle.test.ts covers the precondition.
      const args = ["--server", coordinator.url, "run", "--skip-doctor", "--check", "true", "--exec", "true", "--name", name];
      const crashed = await runCli(args, { cwd: repo, env: { LOOPWARDEN_FAULT: point } });
      expect(crashed.code).toBeNull();
      expect(existsSync(path.join(repo, ".loopwarden", "state.json"))).toBe(false);

      const again = await runCli(["--json", ...args], { cwd: repo });
      expect(again.code, again.stderr).toBe(10);
      const loopId = (JSON.parse(again.stdout) as { loop_id: string }).loop_id;
      expect(recordedLoopId(repo)).toBe(loopId);
      expect(readdirSync(path.join(repo, ".loopwarden", "creating"))).toEqual([]);
      // The baseline's gate log, which the creation cites, is stored whichever point the crash came at.
      const created = LoopEvent.parse(JSON.parse((await (await api(`${coordinator.url}/v1/loops/${loopId}/events?limit=1`)).text()).trim()));
      const sha = created.type === "loop_created" ? created.data.t0.observation.gates[0]?.log?.sha256 : undefined;
      expect((await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${sha ?? "none"}`)).status).toBe(200);
      // One loop of that name on the coordinator, once the listing (filled from each loop's outbox) has
      // the one this run follows.
      const named = async () =>
        ((await (await api(`${coordinator.url}/v1/loops`)).json()) as { loops: { loop_id: string; name: string }[] }).loops.filter(
          (loop) => loop.name === name,
        );
      let listed = await named();
      for (let attempt = 0; attempt < 100 && !listed.some((loop) => loop.loop_id === loopId); attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        listed = await named();
      }
      expect(listed).toHaveLength(1);
    },
  );
});
