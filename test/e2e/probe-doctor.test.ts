import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLoopbackServer, type LoopbackServer } from "../support/loopback.js";
import { freePort } from "../../runner/src/coordinator/free-port.js";
import { makeRepo, runCli, tempDir } from "../support/cli.js";

// probe and doctor (DESIGN §6.5, §13) through the real CLI: gates run in fresh clones exactly as
// evaluations run them. Neither needs a coordinator.
describe("probe and doctor", () => {
  const tmp = tempDir("probe");
  let serial = 0;
  const cli = (repo: string, ...args: string[]) => runCli(["--json", ...args], { cwd: repo });
  const one = (stdout: string) => {
    const lines = stdout.trim().split("\n");
    expect(lines, stdout).toHaveLength(1);
    return JSON.parse(lines[0] ?? "") as Record<string, unknown>;
  };
  const contract = (gates: string[], extra: string[] = []) =>
    ["name: probe-test", "mode: check_fixpoint", "gates:", ...gates, "agent:", "  run: echo unused", ...extra, ""].join("\n");
  const repoWith = (files: Record<string, string>) => makeRepo(path.join(tmp.dir, `repo-${++serial}`), files);
  const checkNamed = (result: Record<string, unknown>, name: string) =>
    (result.checks as { check: string; status: string; detail: string; halt_reason?: string }[]).find((check) => check.check === name);

  afterAll(() => tmp.cleanup());

  it("probe on a deterministic gate: no failures, a bound just under 3/N, exit 0, progress on stderr", async () => {
    const repo = repoWith({ "loop.yaml": contract(["  - name: unit", "    run: test -f src.txt"]), "src.txt": "ok\n" });
    const result = await cli(repo, "probe", "--runs", "5");
    expect(result.code, result.stderr).toBe(0);
    const json = one(result.stdout);
    expect(json).toMatchObject({ tool: "loopwarden", status: "ok", runs: 5, failures: 0, flipping_tests: [], errors: [] });
    const bound = json.flake_rate_upper_bound as number;
    expect(bound).toBeCloseTo(1 - 0.05 ** (1 / 5), 3);
    expect(bound).toBeLessThan(3 / 5);
    expect(Object.keys(json).sort()).toEqual(["errors", "failures", "flake_rate_upper_bound", "flipping_tests", "runs", "status", "tool", "version"]);

    const human = await runCli(["probe", "--max-flake-rate", "0.5"], { cwd: repo });
    expect(human.code).toBe(0);
    // ⌈3 / 0.5⌉ = 6 runs, one progress line each.
    expect(human.stderr.match(/^\[probe \d\/6\] gates 1\/1 passed/gm)).toHaveLength(6);
    expect(human.stdout).toContain("0 of 6 run(s)");
    expect(human.stdout).toContain("flipping tests: none");
  });

  it("probe on a test that fails in runs 2 and 5 of 8 exits 14 (check_flaky) and names it", async () => {
    // The run counter lives outside the repository, so each fresh clone sees the sequence go on and
    // the test itself is not flaky: runs 2 and 5 fail, the others pass. Flakiness is the subject, not
    // confinement, and a confined gate (DESIGN §6.7) can write nothing that outlives its clone: hence
    // `isolation: none`.
    const counter = path.join(tmp.dir, `counter-${++serial}`);
    const repo = repoWith({
      "gate.mjs": [
        "import { existsSync, readFileSync, writeFileSync } from 'node:fs';",
        "const counter = process.argv[2];",
        "const run = existsSync(counter) ? Number(readFileSync(counter, 'utf8')) + 1 : 1;",
        "writeFileSync(counter, String(run));",
        "const fine = ![2, 5].includes(run);",
        "writeFileSync('out/tests.tap', ['TAP version 13', '1..2', 'ok 1 - stable', `${fine ? 'ok' : 'not ok'} 2 - racy cache`, ''].join('\\n'));",
        "process.exit(fine ? 0 : 1);",
      ].join("\n"),
      "loop.yaml": contract(["  - name: unit", `    run: node gate.mjs ${counter}`, "    tests: { tap: out/tests.tap }"], ["isolation: none"]),
    });
    const result = await cli(repo, "probe", "--runs", "8");
    expect(result.code, result.stderr).toBe(14);
    const json = one(result.stdout);
    expect(json).toMatchObject({ status: "halted", halt_reason: "check_flaky", exit_class: 14, runs: 8, failures: 2 });
    expect(json.flipping_tests).toEqual(["gate:unit", "racy cache"]);
    // Clopper-Pearson, 2 of 8, one-sided 95%.
    expect(json.flake_rate_upper_bound).toBeCloseTo(0.5997, 4);

    rmSync(counter);
    const human = await runCli(["probe", "--runs", "8"], { cwd: repo });
    expect(human.code).toBe(14);
    expect(human.stdout).toContain("racy cache: passed in runs 1, 3, 4, 6, 7, 8; failed in runs 2, 5");
    expect(human.stderr).toMatch(/\[probe 2\/8\] gates 0\/1 passed, tests 1 passing \/ 1 failing .*differs from run 1 in gate:unit, racy cache/);
    // Every run's gate logs are kept for whoever investigates.
    expect(readFileSync(path.join(repo, ".loopwarden", "probe", "run-2", "gate-unit.log"), "utf8")).toContain("exit code 1");
  });

  it("probe refuses bad flags with a usage error (2) and one JSON object", async () => {
    const repo = repoWith({ "loop.yaml": contract(["  - name: unit", "    run: 'true'"]) });
    for (const args of [
      ["--runs", "0"],
      ["--runs", "2000"],
      ["--max-flake-rate", "1.5"],
      ["--max-flake-rate", "0.0001"],
      ["--runs", "5", "--max-flake-rate", "0.1"],
    ]) {
      const result = await cli(repo, "probe", ...args);
      expect(result.code, args.join(" ")).toBe(2);
      expect(one(result.stdout)).toMatchObject({ status: "error", errors: [expect.any(String)] });
    }
  });

  it("doctor --mutate on a gate that is always green exits 15 (check_inadequate)", async () => {
    const repo = repoWith({ "loop.yaml": contract(["  - name: unit", "    run: echo all good"]), "src.txt": "good\n" });
    const result = await cli(repo, "doctor", "--mutate", "echo broken > src.txt");
    expect(result.code, result.stderr).toBe(15);
    const json = one(result.stdout);
    expect(json).toMatchObject({ status: "halted", halt_reason: "check_inadequate", exit_class: 15 });
    expect(checkNamed(json, "adequacy")).toMatchObject({ status: "fail", halt_reason: "check_inadequate", detail: expect.stringContaining("changed src.txt") });
    expect(checkNamed(json, "determinism")?.status).toBe("ok");
    expect(checkNamed(json, "side effects")?.status).toBe("ok");
    expect(checkNamed(json, "coordinator")).toMatchObject({ status: "skip", detail: expect.stringContaining("on demand") });
  });

  it("doctor without --mutate runs the contract's doctor.mutate, as many times as its doctor.runs says", async () => {
    const repo = repoWith({
      "loop.yaml": contract(["  - name: unit", "    run: echo all good"], ["doctor: { mutate: echo broken > src.txt, runs: 2 }"]),
      "src.txt": "good\n",
    });
    const result = await cli(repo, "doctor");
    expect(result.code, result.stderr).toBe(15);
    const json = one(result.stdout);
    expect(checkNamed(json, "adequacy")).toMatchObject({ status: "fail", halt_reason: "check_inadequate" });
    expect(checkNamed(json, "determinism")?.detail).toMatch(/^2 run\(s\) in fresh clones agree/);
  });

  it("doctor on adequate, deterministic gates exits 0; each check is one line", async () => {
    const repo = repoWith({ "loop.yaml": contract(["  - name: unit", "    run: grep -q good src.txt"]), "src.txt": "good\n" });
    const result = await runCli(["doctor", "--mutate", "echo broken > src.txt", "--runs", "2"], { cwd: repo });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    const lines = result.stdout.trim().split("\n");
    expect(lines.slice(0, -1).map((line) => line.split(":")[0])).toEqual([
      "ok git",
      "ok contract",
      // The contract names no scope: a warning, which changes no exit code.
      "warn scope",
      "ok zones",
      "ok agent network",
      "ok agent variables",
      "ok mounts",
      "ok paths",
      "ok gates' network",
      "ok working tree",
      "skip coordinator",
      "ok determinism",
      "ok side effects",
      "ok adequacy",
    ]);
    expect(result.stdout).toContain("the gates catch it: gate:unit failed");
    expect(lines.at(-1)).toBe("doctor: ready for a loop");
  });

  it("doctor reports a gate that passes once and fails on a rerun in the same clone as check_has_side_effects (14)", async () => {
    const repo = repoWith({ "loop.yaml": contract(["  - name: unit", "    run: test ! -e .ran && touch .ran"]) });
    const result = await cli(repo, "doctor");
    expect(result.code, result.stderr).toBe(14);
    const json = one(result.stdout);
    expect(json).toMatchObject({ status: "halted", halt_reason: "check_has_side_effects", exit_class: 14 });
    // In fresh clones it is deterministic; only the rerun in one clone sees what it left behind.
    expect(checkNamed(json, "determinism")?.status).toBe("ok");
    expect(checkNamed(json, "side effects")).toMatchObject({ status: "fail", detail: expect.stringContaining("gate:unit (passed → failed)") });
    expect(checkNamed(json, "adequacy")?.status).toBe("skip");
  });

  it("doctor with an invalid contract exits 2 and runs no gate; with an unreachable --server it fails that check (1)", async () => {
    const marker = path.join(tmp.dir, `ran-${++serial}`);
    const bad = repoWith({ "loop.yaml": contract(["  - name: unit", `    run: touch ${marker}`, "    timout: 2m"]) });
    const result = await cli(bad, "doctor");
    expect(result.code).toBe(2);
    const json = one(result.stdout);
    expect(checkNamed(json, "contract")).toMatchObject({ status: "fail", detail: expect.stringContaining('did you mean "timeout"') });
    expect(checkNamed(json, "determinism")?.status).toBe("skip");
    expect(json.errors).toEqual([expect.stringContaining("contract:")]);
    // A gate run confined could not have left the marker (DESIGN §6.7), but it would have left its log.
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(path.join(bad, ".loopwarden", "doctor"))).toBe(false);

    const good = repoWith({ "loop.yaml": contract(["  - name: unit", "    run: 'true'"]) });
    const unreachable = await cli(good, "--server", `http://127.0.0.1:${await freePort()}`, "doctor", "--runs", "1");
    expect(unreachable.code).toBe(1);
    expect(checkNamed(one(unreachable.stdout), "coordinator")).toMatchObject({ status: "fail", detail: expect.stringContaining("does not answer") });
  });

  describe("exec.network: none", () => {
    let server: LoopbackServer;
    let port = 0;
    beforeAll(async () => {
      server = await startLoopbackServer();
      port = server.port;
    });
    afterAll(() => server.close());

    // The gate prints what it met (its log, kept by probe, says it) and also writes it to `out`, outside
    // its clone: a confined gate cannot (DESIGN §6.7), so a file there means a gate ran unconfined.
    const connectRepo = (outputs: string) =>
      repoWith({
        "connect.mjs": [
          "import { connect } from 'node:net';",
          "import { writeFileSync } from 'node:fs';",
          "const [port, out] = process.argv.slice(2);",
          "const met = (what) => { console.log(`connect: ${what}`); try { writeFileSync(out, what); } catch {} };",
          "const socket = connect(Number(port), '127.0.0.1');",
          "socket.on('connect', () => { met('connected'); socket.destroy(); });",
          "socket.on('error', (error) => { met(error.code); process.exit(1); });",
        ].join("\n"),
        "host.yaml": contract(["  - name: connect", `    run: node connect.mjs ${port} ${outputs}/host`]),
        "isolated.yaml": contract(["  - name: connect", `    run: node connect.mjs ${port} ${outputs}/isolated`], ["exec: { network: none }"]),
        "unconfined.yaml": contract(
          ["  - name: connect", `    run: node connect.mjs ${port} ${outputs}/unconfined`],
          ["exec: { network: none }", "isolation: none"],
        ),
      });

    it("a gate reaches a server on the host's 127.0.0.1 without exec, and cannot inside its own namespace", async () => {
      const outputs = path.join(tmp.dir, `net-${++serial}`);
      mkdirSync(outputs);
      const repo = connectRepo(outputs);
      const log = path.join(repo, ".loopwarden", "probe", "run-1", "gate-connect.log");
      const host = await cli(repo, "--contract", "host.yaml", "probe", "--runs", "1");
      expect(host.code, host.stderr).toBe(0);
      expect(readFileSync(log, "utf8")).toMatch(/^connect: connected$/m);
      // Confined in its clone all the same.
      expect(existsSync(path.join(outputs, "host"))).toBe(false);

      // The zone's own network namespace (the e2e layer needs bubblewrap; where it is missing the contract
      // is refused, as the next test shows).
      const isolated = await cli(repo, "--contract", "isolated.yaml", "probe", "--runs", "1");
      expect(isolated.code, isolated.stderr).toBe(0);
      expect(one(isolated.stdout)).toMatchObject({ status: "ok", runs: 1, failures: 0 });
      expect(readFileSync(log, "utf8")).toMatch(/^connect: ECONNREFUSED$/m);
      expect(existsSync(path.join(outputs, "isolated"))).toBe(false);
    });

    it("where bubblewrap cannot be found the contract is refused, and so is an unconfined one asking for exec.network: none where unshare cannot be found, each with the reason; no gate runs", async () => {
      const outputs = path.join(tmp.dir, `net-${++serial}`);
      mkdirSync(outputs);
      const repo = connectRepo(outputs);
      // A PATH with node and git only.
      const bin = path.join(tmp.dir, `bin-${serial}`);
      mkdirSync(bin);
      symlinkSync(process.execPath, path.join(bin, "node"));
      const git = (process.env.PATH ?? "")
        .split(path.delimiter)
        .map((dir) => path.join(dir, "git"))
        .find((file) => existsSync(file));
      symlinkSync(git ?? "/usr/bin/git", path.join(bin, "git"));
      const probe = (contractFile: string) => runCli(["--json", "--contract", contractFile, "probe", "--runs", "1"], { cwd: repo, env: { PATH: bin } });
      const doctor = (contractFile: string) => runCli(["--json", "--contract", contractFile, "doctor"], { cwd: repo, env: { PATH: bin } });
      // A gate that ran would have left its log (confined or not), and unconfined its file in `outputs`.
      const ranNoGate = () => {
        expect(existsSync(path.join(repo, ".loopwarden", "probe"))).toBe(false);
        expect(existsSync(path.join(repo, ".loopwarden", "doctor"))).toBe(false);
        expect(readdirSync(outputs)).toEqual([]);
      };

      // Confined (the default): no zone can be built without bubblewrap (DESIGN §6.7).
      const confined = await probe("isolated.yaml");
      expect(confined.code, confined.stderr).toBe(2);
      expect(one(confined.stdout)).toMatchObject({
        status: "error",
        errors: [expect.stringMatching(/cannot confine them: bubblewrap \(bwrap\) is not installed or not on PATH.*isolation: none/)],
      });
      const confinedDoctor = await doctor("isolated.yaml");
      expect(confinedDoctor.code).toBe(2);
      expect(checkNamed(one(confinedDoctor.stdout), "zones")).toMatchObject({ status: "fail", detail: expect.stringContaining("bubblewrap") });
      ranNoGate();

      // Unconfined, the gates' network namespace needs unshare.
      const unconfined = await probe("unconfined.yaml");
      expect(unconfined.code, unconfined.stderr).toBe(2);
      expect(one(unconfined.stdout)).toMatchObject({
        status: "error",
        errors: [expect.stringMatching(/exec\.network: none .*cannot isolate them: .*unshare .*remove exec from the contract/)],
      });
      const unconfinedDoctor = await doctor("unconfined.yaml");
      expect(unconfinedDoctor.code).toBe(2);
      expect(checkNamed(one(unconfinedDoctor.stdout), "network isolation")).toMatchObject({ status: "fail" });
      ranNoGate();
    });
  });
});
