import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { credentialStoreIn, unseenPaths } from "../../../runner/src/commands/doctor-zones.js";
import { runCommand } from "../../../runner/src/process/exec.js";
import { makeWorkspace, prepareWorkspace, removeWorkspace, runAgentInZone, settleStaleWorkspaces } from "../../../runner/src/zones/agent-zone.js";
import { Contract } from "#shared/wire/contract.js";
import { startLoopbackServer } from "../../support/loopback.js";
import { processesWith } from "../../support/zone-markers.js";
import {
  hiddenPaths,
  hideFromZones,
  hideRepositoryOf,
  probeSandbox,
  sandboxUnavailable,
  toolchainMounts,
  zoneArgs,
  type ZoneSpec,
} from "../../../runner/src/zones/sandbox.js";

// The zones' walls (DESIGN §6.7), tested on this machine's real bubblewrap where it has one: what a
// command inside a zone can see, write and leave behind.

const support = await probeSandbox();
const tmp = mkdtempSync(path.join(os.tmpdir(), "lw-zones-unit-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("finding and refusing", () => {
  it("a machine without bubblewrap cannot confine, and the refusal names the remedy and the opt-out", async () => {
    const missing = await probeSandbox(null);
    expect(missing).toEqual({ available: false, reason: expect.stringContaining("not installed") });
    const broken = await probeSandbox("/bin/false");
    expect(broken).toEqual({ available: false, reason: expect.stringContaining("cannot build a sandbox") });
    const refusal = sandboxUnavailable("bubblewrap (bwrap) is not installed or not on PATH");
    expect(refusal.message).toMatch(/apt-get install bubblewrap/);
    expect(refusal.message).toMatch(/isolation: none/);
    expect(refusal.exitCode).toBe(2);
  });
});

describe("the zone's view", () => {
  const home = "/home/someone";
  const spec: ZoneSpec = { writable: ["/work/clone"], readable: ["/home/someone/.nvm"], network: "none", cwd: "/work/clone" };

  it("covers /tmp, HOME and every hidden path before it binds what the zone may read, and its own directory last", () => {
    const secret = mkdtempSync(path.join(os.tmpdir(), "lw-zones-secret-"));
    hideFromZones(secret);
    const args = zoneArgs("bwrap", spec, home);
    const at = (flag: string, value: string) => args.findIndex((arg, index) => arg === flag && args[index + 1] === value);
    expect(at("--ro-bind", "/")).toBeGreaterThan(0);
    expect(at("--tmpfs", "/tmp")).toBeGreaterThan(at("--ro-bind", "/"));
    expect(at("--tmpfs", home)).toBe(-1); // a home that does not exist here is not mounted over
    expect(at("--bind", "/work/clone")).toBeGreaterThan(at("--tmpfs", "/tmp"));
    expect(args).toContain("--unshare-pid");
    expect(args).toContain("--unshare-net");
    expect(args).toContain("--die-with-parent");
    // A secret under /tmp is already hidden by /tmp's tmpfs; one elsewhere gets its own.
    expect(at("--tmpfs", secret)).toBe(-1);
    expect(zoneArgs("bwrap", { ...spec, network: "host" }, home)).not.toContain("--unshare-net");
    rmSync(secret, { recursive: true, force: true });
  });

  it("mounts PATH's toolchains under the home directory read-only, never a path inside a hidden one", () => {
    const fakeHome = path.join(tmp, "home");
    mkdirSync(path.join(fakeHome, ".nvm", "versions", "node", "bin"), { recursive: true });
    mkdirSync(path.join(fakeHome, "project", "node_modules", ".bin"), { recursive: true });
    hideFromZones(path.join(fakeHome, "project"));
    const mounts = toolchainMounts(
      { PATH: [path.join(fakeHome, ".nvm", "versions", "node", "bin"), path.join(fakeHome, "project", "node_modules", ".bin"), "/usr/bin"].join(":") },
      fakeHome,
    );
    expect(mounts).toContain(path.join(fakeHome, ".nvm"));
    expect(mounts.some((mount) => mount.includes("node_modules"))).toBe(false);
    expect(mounts).not.toContain("/usr/bin");
  });

  it("hides the repository an object store belongs to, and the main checkout of a linked worktree", () => {
    hideRepositoryOf("/srv/code/app/.git/objects");
    expect(hiddenPaths()).toEqual(expect.arrayContaining(["/srv/code/app/.git", "/srv/code/app"]));
    hideRepositoryOf("/srv/bare/app.git/objects");
    expect(hiddenPaths()).toContain("/srv/bare/app.git");
    expect(hiddenPaths()).not.toContain("/srv/bare");
  });

  it("names the paths a command reads that a zone would not see, unless they are mounted", () => {
    const home = "/home/someone";
    expect(unseenPaths("node /tmp/tools/check.js --out=/home/someone/report.xml /usr/bin/true", [], home)).toEqual([
      "/tmp/tools/check.js",
      "/home/someone/report.xml",
    ]);
    expect(unseenPaths("node /tmp/tools/check.js", ["/tmp/tools"], home)).toEqual([]);
    expect(unseenPaths("cat ~/data.csv | node relative/script.js", ["~/data.csv"], home)).toEqual([]);
  });

  it("knows a mounted credential store when it sees one", () => {
    const home = "/home/someone";
    expect(credentialStoreIn("~/.claude", home)).toBe("/home/someone/.claude");
    expect(credentialStoreIn("~/.config/gcloud", home)).toBe("/home/someone/.config");
    expect(credentialStoreIn("/home/someone", home)).not.toBeNull(); // the whole home holds them all
    expect(credentialStoreIn("/home/someone/.ssh/id_ed25519", home)).toBe("/home/someone/.ssh");
    expect(credentialStoreIn("~/datasets", home)).toBeNull();
    expect(credentialStoreIn("/opt/toolchain", home)).toBeNull();
  });
});

describe.skipIf(!support.available)("a command in a zone (bubblewrap on this machine)", () => {
  // Every directory a case makes, removed once the cases are done.
  const made: string[] = [];
  afterAll(() => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })));
  const zoneDir = () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "lw-zone-dir-"));
    made.push(dir);
    return { dir, spec: { writable: [dir], network: "none" as const, cwd: dir } };
  };

  it("leaves nothing running: a detached, session-leading process dies with the zone", async () => {
    const { dir, spec } = zoneDir();
    const marker = `lw-zone-leftover-${process.pid}`;
    // Started in a session of its own and left behind; seen running inside the zone before it ends.
    const script = `setsid node -e 'setTimeout(() => {}, 60000)' ${marker} & sleep 0.5; pgrep -f ${marker} >/dev/null && echo "left running"`;
    const result = await runCommand(script, { cwd: dir, timeoutMs: 20_000, zone: spec });
    expect(result.output.toString()).toContain("left running");
    expect(processesWith(marker)).toEqual([]);
  });

  it("sees none of the runner's processes, no private file, and writes only its own directory", async () => {
    const { dir, spec } = zoneDir();
    const secretDir = mkdtempSync(path.join(os.tmpdir(), "lw-zone-hidden-"));
    writeFileSync(path.join(secretDir, "token"), "secret-token");
    const script = [
      `test -e /proc/${process.pid} && echo "runner visible" || echo "runner invisible"`,
      `cat ${path.join(secretDir, "token")} 2>/dev/null || echo "token unreadable"`,
      "echo x > /usr/lw-zone-probe 2>/dev/null && echo 'root writable' || echo 'root read-only'",
      "echo mine > own.txt && echo 'own writable'",
    ].join("; ");
    const result = await runCommand(script, { cwd: dir, timeoutMs: 20_000, zone: spec });
    const output = result.output.toString();
    expect(output).toContain("runner invisible");
    expect(output).toContain("token unreadable");
    expect(output).toContain("root read-only");
    expect(output).toContain("own writable");
    rmSync(secretDir, { recursive: true, force: true });
  });

  it("with network none cannot reach a server on the host's loopback; with host it can", async () => {
    const server = await startLoopbackServer();
    try {
      const { dir, spec } = zoneDir();
      const probe = `node -e "require('net').connect(${server.port}, '127.0.0.1').on('error', e => { console.log('refused', e.code); process.exit(0) }).on('connect', () => { console.log('connected'); process.exit(0) })"`;
      const isolated = await runCommand(probe, { cwd: dir, timeoutMs: 20_000, zone: spec });
      expect(isolated.output.toString()).toContain("refused ECONNREFUSED");
      const hosted = await runCommand(probe, { cwd: dir, timeoutMs: 20_000, zone: { ...spec, network: "host" } });
      expect(hosted.output.toString()).toContain("connected");
    } finally {
      await server.close();
    }
  });
});

describe("a per-run credential", () => {
  /** A repository with one commit, a workspace of it, and a contract whose agent is `run` with `credentials`. */
  async function setup(run: string, credentials: { env: string; mint: string; revoke: string }) {
    const repo = mkdtempSync(path.join(tmp, "credential-"));
    execFileSync("git", ["init", "-q", "-b", "main"], { cwd: repo });
    writeFileSync(path.join(repo, "file.txt"), "x\n");
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@l", "add", "-A"], { cwd: repo });
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", "init"], { cwd: repo });
    const workspace = await makeWorkspace(repo, "HEAD");
    const contract = Contract.parse({ name: "c", mode: "check_fixpoint", gates: [{ name: "g", run: "true" }], agent: { run, credentials }, isolation: "none" });
    return { repo, workspace, contract };
  }

  it("is revoked after an agent run that fails, with the credential the agent got", async () => {
    const revoked = path.join(tmp, "revoked.txt");
    const { repo, workspace, contract } = await setup('echo "$RUN_TOKEN" > got.txt; exit 3', {
      env: "RUN_TOKEN",
      mint: "echo chatter >&2; echo first line; echo tok-1234",
      revoke: `echo "$RUN_TOKEN" > ${revoked}`,
    });
    const zoned = await runAgentInZone({ repo, workspace, contract, loopEnv: {}, timeoutMs: 20_000, onNote: () => {} });
    expect(zoned.result.exit_code).toBe(3);
    expect(readFileSync(path.join(workspace.dir, "got.txt"), "utf8").trim()).toBe("tok-1234");
    expect(readFileSync(revoked, "utf8").trim()).toBe("tok-1234");
    expect(zoned.confinement).toMatchObject({ mechanism: "none", credential: true });
    await removeWorkspace(workspace);
  });

  it("that cannot be minted stops the run before the agent starts, saying why", async () => {
    const { repo, workspace, contract } = await setup("touch ran.txt", { env: "RUN_TOKEN", mint: "echo denied >&2; exit 3", revoke: "true" });
    await expect(runAgentInZone({ repo, workspace, contract, loopEnv: {}, timeoutMs: 20_000, onNote: () => {} })).rejects.toThrow(
      /agent\.credentials\.mint exited 3: denied/,
    );
    expect(existsSync(path.join(workspace.dir, "ran.txt"))).toBe(false);
    await removeWorkspace(workspace);
  });
});

describe("workspaces a killed runner left", () => {
  it("are set aside for their repository's next run, and removed when their repository is gone", async () => {
    const repo = mkdtempSync(path.join(tmp, "stale-"));
    execFileSync("git", ["init", "-q", "-b", "main"], { cwd: repo });
    writeFileSync(path.join(repo, "file.txt"), "x\n");
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@l", "add", "-A"], { cwd: repo });
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", "init"], { cwd: repo });
    const base = execFileSync("git", ["rev-parse", "HEAD"], { cwd: repo, encoding: "utf8" }).trim();
    // Two workspaces of a runner that no longer exists (a pid above any this machine hands out): one of
    // this repository with an agent's edit, one of a repository since deleted.
    const workspace = await makeWorkspace(repo, base, "lp_stale");
    writeFileSync(path.join(workspace.dir, "edit.txt"), "the agent's\n");
    const gone = await makeWorkspace(repo, base, "lp_gone");
    const ownerOfGone = `${gone.dir}.owner.json`;
    writeFileSync(ownerOfGone, readFileSync(ownerOfGone, "utf8").replace(JSON.stringify(path.resolve(repo)), JSON.stringify(path.join(tmp, "deleted-repo"))));
    const dead = path.join(path.dirname(path.dirname(workspace.dir)), "4194301");
    renameSync(path.dirname(workspace.dir), dead);
    const refs = await settleStaleWorkspaces(repo);
    expect(refs).toHaveLength(1);
    expect(refs[0]).toMatch(/^refs\/loopwarden\/interrupted\/lp_stale\//);
    expect(execFileSync("git", ["show", `${refs[0]}:edit.txt`], { cwd: repo, encoding: "utf8" })).toBe("the agent's\n");
    expect(existsSync(dead)).toBe(false);
  });

  it("made ahead, are recorded at the commit the agent starts from: the best made ahead for, or the new best after a promotion", async () => {
    const repo = mkdtempSync(path.join(tmp, "ahead-"));
    const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@l", ...args], { cwd: repo, encoding: "utf8" }).trim();
    git("init", "-q", "-b", "main");
    writeFileSync(path.join(repo, "file.txt"), "x\n");
    git("add", "-A");
    git("commit", "-qm", "init");
    const base = git("rev-parse", "HEAD");
    writeFileSync(path.join(repo, "promoted.txt"), "y\n");
    git("add", "-A");
    git("commit", "-qm", "promoted");
    const promoted = git("rev-parse", "HEAD");
    // Made ahead at the best as it stood, then taken once a candidate was promoted; and one taken at the commit it was made at.
    prepareWorkspace(repo, base);
    const afterPromotion = await makeWorkspace(repo, promoted, "lp_ahead");
    prepareWorkspace(repo, promoted);
    const same = await makeWorkspace(repo, promoted, "lp_same");
    for (const workspace of [afterPromotion, same]) {
      expect(JSON.parse(readFileSync(`${workspace.dir}.owner.json`, "utf8")).base).toBe(promoted);
      writeFileSync(path.join(workspace.dir, "edit.txt"), "the agent's\n");
    }
    // The runner is killed while both agents work: each edit is set aside on the commit its agent started from.
    const dead = path.join(path.dirname(path.dirname(same.dir)), "4194302");
    renameSync(path.dirname(same.dir), dead);
    const refs = await settleStaleWorkspaces(repo);
    expect(refs.map((ref) => ref.split("/")[3]).sort()).toEqual(["lp_ahead", "lp_same"]);
    for (const ref of refs) {
      expect(git("rev-parse", `${ref}^`)).toBe(promoted);
      expect(git("diff", "--name-only", promoted, ref)).toBe("edit.txt");
    }
    expect(existsSync(dead)).toBe(false);
  });
});
