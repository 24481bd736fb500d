import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { LoopEvent } from "#shared/engine/index.js";
import { profiledAnswerProject } from "../support/profiled-answer-project.js";
import { api, makeRepo, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";
import { corruptStoredArtifact } from "../support/stored-blobs.js";

// Artifacts end to end (DESIGN §10): a gate that writes a CPU profile (`node --cpu-prof`) named by the
// contract's `artifacts` globs has it stored with the loop, byte-exact; a rejected candidate's failing
// gate output is one command away (`loopwarden logs`), and the rejection line says which gate and test.

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

describe("artifacts and logs", () => {
  const { tmp, coordinator } = sharedCoordinator("artifacts");

  it("stores the gate's CPU profile byte-exact, and `logs` shows a rejected candidate's failing gate", async () => {
    const repo = makeRepo(
      path.join(tmp.dir, "repo"),
      profiledAnswerProject(
        [
          "import { writeFileSync } from 'node:fs';",
          "const body = process.env.LOOPWARDEN_ITERATION === '1' ? \"throw new Error('answer exploded');\" : 'return 42;';",
          "writeFileSync('src/answer.js', `export function answer() {\\n  ${body}\\n}\\n`);",
        ].join("\n"),
        4,
      ),
    );

    // --skip-doctor: this file tests artifacts and logs; oracle.test.ts covers the precondition.
    const run = await runCli(["--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo });
    expect(run.code, run.stderr).toBe(10);
    // The rejection names the failing gate and points at its output.
    expect(run.stderr).toMatch(/c1 rejected/);
    expect(run.stderr).toMatch(/gate unit exit 1.* — its output: loopwarden logs c1/);

    const loopId = recordedLoopId(repo, "loop.yaml");
    const events = (await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)));
    const report = events.find((event) => event.type === "observation_reported" && event.data.candidate_id === "c2");
    if (report?.type !== "observation_reported") throw new Error("no report for c2");
    const profile = report.data.observation.artifacts?.find((artifact) => artifact.name === "profile/unit.cpuprofile");
    expect(profile, JSON.stringify(report.data.observation.artifacts)).toBeDefined();
    if (!profile) return;
    // Downloadable from the coordinator, byte-exact, served as an attachment and never rendered.
    const response = await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${profile.sha256}`);
    expect(response.status).toBe(200);
    expect(response.headers.get("x-content-type-options")).toBe("nosniff");
    expect(response.headers.get("content-disposition")).toMatch(/^attachment/);
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(bytes.byteLength).toBe(profile.size);
    expect(sha256(bytes)).toBe(profile.sha256);
    expect(JSON.parse(new TextDecoder().decode(bytes))).toHaveProperty("nodes");

    // `artifacts --download` writes them, digests checked.
    const download = path.join(tmp.dir, "download");
    const listed = await runCli(["--json", "--server", coordinator.url, "artifacts", "c2", "--download", download], { cwd: repo });
    expect(listed.code, listed.stderr).toBe(0);
    const written = readFileSync(path.join(download, "profile", "unit.cpuprofile"));
    expect(sha256(written)).toBe(profile.sha256);
    expect(readdirSync(download).sort()).toEqual(["gate-unit.log", "profile"]);

    // `logs` with no argument: the latest evaluated candidate's log — c2 passed every gate, so its last
    // gate's; `logs c1`: the failing gate of the rejected one, with the test's own message.
    const latest = await runCli(["--server", coordinator.url, "logs"], { cwd: repo });
    expect(latest.code, latest.stderr).toBe(0);
    expect(latest.stderr).toMatch(/c2 gate unit \(passed\): gate-unit\.log/);
    expect(latest.stdout).toContain("$ node --cpu-prof");
    expect(latest.stdout).not.toContain("answer exploded");
    const logs = await runCli(["--server", coordinator.url, "logs", "c1"], { cwd: repo });
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stdout).toContain("answer exploded");
    expect(logs.stderr).toMatch(/c1 gate unit \(exit 1\)/);
    const unknown = await runCli(["--server", coordinator.url, "logs", "c1", "--gate", "lint"], { cwd: repo });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/ran no gate lint \(it ran: unit\)/);
    // `status` lists what the loop stored; the export names each candidate's files.
    const status = await runCli(["--json", "--server", coordinator.url, "status"], { cwd: repo });
    expect((JSON.parse(status.stdout) as { artifacts: { name: string; sha256: string }[] }).artifacts).toContainEqual(
      expect.objectContaining({ name: "unit.cpuprofile", sha256: profile.sha256 }),
    );
    // In words, status counts the stored files and leaves naming them to `artifacts`, which names them as
    // the candidate's evidence does, by path: one file never goes by two names.
    const said = await runCli(["--server", coordinator.url, "status"], { cwd: repo });
    expect(said.stdout).toMatch(/artifacts: +\d+\+? stored \(each candidate's, by path: loopwarden artifacts \[CANDIDATE\]\)/);
    expect(said.stdout).not.toContain("unit.cpuprofile");
    const inWords = await runCli(["--server", coordinator.url, "artifacts", "c2"], { cwd: repo });
    expect(inWords.stdout).toContain("profile/unit.cpuprofile");
    const exported = await runCli(["--server", coordinator.url, "export", "--format", "candidates.jsonl"], { cwd: repo });
    const c2 = exported.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { candidate_id: string; artifacts: { name: string }[] })
      .find((line) => line.candidate_id === "c2");
    expect(c2?.artifacts.map((artifact) => artifact.name)).toContain("profile/unit.cpuprofile");
    // The public receipt page names the best's stored files by digest, and links every candidate's: the
    // rejected c1's failing gate log is served from the receipt, without a token, byte-exact.
    const loop = (await (await api(`${coordinator.url}/v1/loops/${loopId}`)).json()) as { receipt_id: string };
    const page = await (await fetch(`${coordinator.url}/r/${loop.receipt_id}`)).text();
    expect(page).toContain("Files stored with the best");
    expect(page).toContain("profile/unit.cpuprofile");
    expect(page).toContain(profile.sha256.slice(0, 16));
    const c1Failed = events.find((event) => event.type === "observation_reported" && event.data.candidate_id === "c1");
    const c1FailedLog = c1Failed?.type === "observation_reported" ? c1Failed.data.observation.gates[0]?.log : null;
    if (!c1FailedLog) throw new Error("no stored log for c1");
    const c1Row = /<tr><td>c1<\/td>.*?<\/tr>/s.exec(page)?.[0] ?? "";
    expect(c1Row).toContain("rejected");
    const href = /<a href="([^"]+)" class="rejected"[^>]*>gate-unit\.log<\/a>/.exec(c1Row)?.[1];
    expect(href, c1Row).toBe(`/r/${loop.receipt_id}/files/${c1FailedLog.sha256}`);
    const served = await fetch(`${coordinator.url}${href}`);
    expect(served.status).toBe(200);
    expect(served.headers.get("x-content-type-options")).toBe("nosniff");
    const servedBytes = new Uint8Array(await served.arrayBuffer());
    expect(sha256(servedBytes)).toBe(c1FailedLog.sha256);
    expect(new TextDecoder().decode(servedBytes)).toContain("answer exploded");
    // Only what the signed log names: a digest it does not name is not served, stored or not.
    // A candidate's bundle is stored with the loop (its code: the team's) and named by its proposal, not as evidence.
    const bundle = events.flatMap((event) => (event.type === "candidate_proposed" && event.data.bundle ? [event.data.bundle] : []))[0];
    if (!bundle) throw new Error("no candidate bundle stored");
    expect((await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${bundle.sha256}`)).status).toBe(200);
    expect((await fetch(`${coordinator.url}/r/${loop.receipt_id}/files/${bundle.sha256}`)).status).toBe(404);
    // `explain` points at the output of a gate that failed.
    const explain = await runCli(["--server", coordinator.url, "explain"], { cwd: repo });
    expect(explain.stdout).toMatch(/c1 rejected .*\n\s+gate unit exit 1.*loopwarden logs c1/);

    // A stored log whose bytes were damaged in storage (one byte, same length) is never passed off as the
    // gate's output: `logs` and `artifacts --download` name the digest mismatch and fail.
    const c1Report = events.find((event) => event.type === "observation_reported" && event.data.candidate_id === "c1");
    const c1Log = c1Report?.type === "observation_reported" ? c1Report.data.observation.gates[0]?.log : null;
    if (!c1Log) throw new Error("no stored log for c1");
    corruptStoredArtifact(path.join(tmp.dir, "state"), c1Log.sha256, 0.5);
    const damaged = await runCli(["--server", coordinator.url, "logs", "c1"], { cwd: repo });
    expect(damaged.code).toBe(1);
    expect(damaged.stderr).toMatch(/gate-unit\.log as stored does not match its digest/);
    const damagedJson = await runCli(["--json", "--server", coordinator.url, "logs", "c1"], { cwd: repo });
    expect(damagedJson.code).toBe(1);
    expect(damagedJson.stdout).not.toContain("answer exploded");
    const damagedDownload = await runCli(["--server", coordinator.url, "artifacts", "c1", "--download", path.join(tmp.dir, "damaged")], { cwd: repo });
    expect(damagedDownload.code).toBe(1);
    expect(damagedDownload.stderr).toMatch(/gate-unit\.log as downloaded does not match its digest/);
  });
  it("stores t0's profile and lists it as t0's, even when the runner was killed between the creation and the uploads", async () => {
    const repo = makeRepo(
      path.join(tmp.dir, "t0-repo"),
      profiledAnswerProject(
        ["import { writeFileSync } from 'node:fs';", "writeFileSync('src/answer.js', 'export function answer() {\\n  return 42;\\n}\\n');"].join("\n"),
        1,
      ),
    );
    // Killed once the coordinator answered the creation, before anything t0 cites was uploaded: the next
    // run finishes the creation from what was kept on disk, files included (the t0 clone is long gone).
    // --skip-doctor: this file tests artifacts and logs; oracle.test.ts covers the precondition.
    const crashed = await runCli(["--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo, env: { LOOPWARDEN_FAULT: "create-answered" } });
    expect(crashed.code).toBeNull();
    const run = await runCli(["--server", coordinator.url, "run"], { cwd: repo });
    expect(run.code, run.stderr).toBe(10);
    expect(readdirSync(path.join(repo, ".loopwarden", "creating"))).toEqual([]);
    // Nothing of the creation is left behind: the copies went with it once uploaded.
    const staging = path.join(repo, ".loopwarden", "t0-files");
    expect(existsSync(staging) ? readdirSync(staging) : []).toEqual([]);

    const loopId = recordedLoopId(repo, "loop.yaml");
    const created = LoopEvent.parse(JSON.parse((await (await api(`${coordinator.url}/v1/loops/${loopId}/events?limit=1`)).text()).trim()));
    if (created.type !== "loop_created") throw new Error("the log does not start with loop_created");
    const profile = created.data.t0.observation.artifacts?.find((artifact) => artifact.name === "profile/unit.cpuprofile");
    expect(profile, JSON.stringify(created.data.t0.observation.artifacts)).toBeDefined();
    if (!profile) return;

    // `artifacts t0` lists the baseline's gate log and profile; --download writes them, digests checked.
    const listed = await runCli(["--json", "--server", coordinator.url, "artifacts", "t0"], { cwd: repo });
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toMatchObject({
      candidate_id: "t0",
      artifacts: [expect.objectContaining({ name: "gate-unit.log" }), { ...profile }],
    });
    const download = path.join(tmp.dir, "t0-download");
    const fetched = await runCli(["--server", coordinator.url, "artifacts", "t0", "--download", download], { cwd: repo });
    expect(fetched.code, fetched.stderr).toBe(0);
    const written = readFileSync(path.join(download, "profile", "unit.cpuprofile"));
    expect(written.byteLength).toBe(profile.size);
    expect(sha256(written)).toBe(profile.sha256);
    expect(JSON.parse(written.toString("utf8"))).toHaveProperty("nodes");
    // c1's profile is its own file, beside t0's.
    const c1 = await runCli(["--json", "--server", coordinator.url, "artifacts", "c1"], { cwd: repo });
    const c1Profile = (JSON.parse(c1.stdout) as { artifacts: { name: string; sha256: string }[] }).artifacts.find((file) => file.name === profile.name);
    expect(c1Profile?.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(c1Profile?.sha256).not.toBe(profile.sha256);
    // `logs t0`: the baseline's failing gate, with the test's own message.
    const logs = await runCli(["--server", coordinator.url, "logs", "t0"], { cwd: repo });
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stderr).toMatch(/t0 gate unit \(exit 1\)/);
    expect(logs.stdout).toContain("the answer must be 42");

    // The receipt page lists t0's files in full, each linked and served from the receipt.
    const loop = (await (await api(`${coordinator.url}/v1/loops/${loopId}`)).json()) as { receipt_id: string };
    const page = await (await fetch(`${coordinator.url}/r/${loop.receipt_id}`)).text();
    const t0Files = /<h2>Files stored with t0 \(the baseline\)<\/h2>\s*<table>(.*?)<\/table>/s.exec(page)?.[1] ?? "";
    expect(t0Files).toContain(`<a href="/r/${loop.receipt_id}/files/${profile.sha256}">profile/unit.cpuprofile</a>`);
    const served = await fetch(`${coordinator.url}/r/${loop.receipt_id}/files/${profile.sha256}`);
    expect(served.headers.get("content-disposition")).toMatch(/^attachment/);
    expect(sha256(new Uint8Array(await served.arrayBuffer()))).toBe(profile.sha256);
  });

  it("names the test the candidate broke in its rejection line, not one that failed at t0 already, and `logs` shows that gate", async () => {
    const repo = makeRepo(path.join(tmp.dir, "junit-repo"), {
      "src/answer.js": "export function answer() {\n  return 42;\n}\n",
      // "a: …" fails from t0 on and sorts first; "z: …" passes at t0 and is what the agent breaks.
      "test/answer.test.js": [
        "import assert from 'node:assert/strict';",
        "import { test } from 'node:test';",
        "import { answer } from '../src/answer.js';",
        "test('a: a known failure since t0', () => assert.fail('known since t0'));",
        "test('z: the answer is 42', () => assert.equal(answer(), 42, 'the answer must be 42'));",
        "",
      ].join("\n"),
      "agent.mjs": "import { writeFileSync } from 'node:fs';\nwriteFileSync('src/answer.js', 'export function answer() {\\n  return 41;\\n}\\n');\n",
      "loop.yaml": [
        "name: junit-answer",
        "mode: check_fixpoint",
        "gates:",
        "  - name: unit",
        "    run: node --test --test-reporter=junit --test-reporter-destination=.loopwarden/out/junit.xml",
        "    tests: { junit: .loopwarden/out/junit.xml }",
        "agent:",
        "  run: node agent.mjs",
        "stop:",
        "  max_iterations: 1",
        "",
      ].join("\n"),
      ".gitignore": ".loopwarden/\n",
    });
    // --skip-doctor: this file tests artifacts and logs; oracle.test.ts covers the precondition.
    const run = await runCli(["--server", coordinator.url, "run", "--skip-doctor"], { cwd: repo });
    expect(run.code, run.stderr).not.toBeNull();
    expect(run.stderr).toMatch(/c1 rejected \(regressed\)/);
    const line = run.stderr.split("\n").find((text) => text.includes("its output: loopwarden logs c1")) ?? "";
    expect(line).toMatch(/gate unit exit 1, broke test \S*z: the answer is 42 — its output: loopwarden logs c1/);
    expect(line).not.toContain("a known failure");

    // `logs` with no argument: the latest evaluated candidate (c1) and its first failing gate.
    const logs = await runCli(["--server", coordinator.url, "logs"], { cwd: repo });
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stderr).toMatch(/c1 gate unit \(exit 1\)/);
    expect(logs.stdout).toContain("$ node --test --test-reporter=junit");
    expect(logs.stdout).toContain("[loopwarden] exit code 1");
  });
});
