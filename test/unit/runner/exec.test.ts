import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLoopbackServer, type LoopbackServer } from "../../support/loopback.js";
import { isGoneWithin } from "../../support/process.js";
import { networkIsolation, probeNetworkIsolation, runCommand } from "../../../runner/src/process/exec.js";
import { UserError } from "../../../runner/src/errors.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "lw-exec-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("runCommand", () => {
  it("captures stdout and stderr once, in order, with the exit code", async () => {
    const result = await runCommand("echo one; echo two >&2; exit 3", { cwd: dir, timeoutMs: 10_000 });
    expect(result).toMatchObject({ exit_code: 3, signal: null, timed_out: false, truncated: false });
    expect(result.output.toString()).toBe("one\ntwo\n");
  });

  it("kills a hung command and its children at the timeout", async () => {
    const pidFile = path.join(dir, "child.pid");
    const started = performance.now();
    const result = await runCommand(`sleep 300 & echo $! > ${pidFile}; wait`, { cwd: dir, timeoutMs: 500 });
    expect(result.timed_out).toBe(true);
    expect(result.exit_code).toBeNull();
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(await isGoneWithin(Number(readFileSync(pidFile, "utf8")))).toBe(true);
  });

  it("does not wait for a background child that keeps the output open after the shell exits", async () => {
    const pidFile = path.join(dir, "straggler.pid");
    const result = await runCommand(`sleep 300 & echo $! > ${pidFile}; echo done`, { cwd: dir, timeoutMs: 60_000 });
    expect(result).toMatchObject({ exit_code: 0, timed_out: false });
    expect(result.output.toString()).toBe("done\n");
    expect(await isGoneWithin(Number(readFileSync(pidFile, "utf8")))).toBe(true);
  });

  it("keeps the tail of very long output and says it was truncated", async () => {
    const result = await runCommand("head -c 12000000 /dev/zero | tr '\\0' 'x'; echo END", { cwd: dir, timeoutMs: 60_000 });
    expect(result.truncated).toBe(true);
    expect(result.output.length).toBeLessThanOrEqual(8 * 1024 * 1024 + 65_536);
    expect(result.output.toString().endsWith("END\n")).toBe(true);
  });
});

// Network namespaces need Linux with user namespaces allowed (or root); where they are not, only the
// refusal can be tested.
const isolation = await networkIsolation();

describe("runCommand with network: none", () => {
  let server: LoopbackServer;
  let port = 0;
  beforeAll(async () => {
    server = await startLoopbackServer();
    port = server.port;
  });
  afterAll(() => server.close());

  const connect = (to: number) =>
    `node -e "const s = require('net').connect(${to}, '127.0.0.1'); s.on('connect', () => { console.log('connected'); s.destroy(); }); s.on('error', (e) => { console.log(e.code); process.exit(3); })"`;

  it("reaches a server on the host's loopback with the host's network", async () => {
    const result = await runCommand(connect(port), { cwd: dir, timeoutMs: 30_000, network: "host" });
    expect(result.output.toString()).toBe("connected\n");
    expect(result.exit_code).toBe(0);
  });

  it.skipIf(!isolation.available)("cannot reach it from a namespace of its own, whose own loopback works", async () => {
    const result = await runCommand(connect(port), { cwd: dir, timeoutMs: 30_000, network: "none" });
    expect(result.output.toString()).toBe("ECONNREFUSED\n");
    expect(result.exit_code).toBe(3);
    // The gate's own processes can still talk over the namespace's loopback (a test server, say).
    const own = await runCommand(
      `node -e "const net = require('net'); const srv = net.createServer((c) => c.end('pong')).listen(0, '127.0.0.1', () => { net.connect(srv.address().port, '127.0.0.1').on('data', (d) => { console.log(String(d)); process.exit(0); }); })"`,
      { cwd: dir, timeoutMs: 30_000, network: "none" },
    );
    expect(own.output.toString()).toBe("pong\n");
    // Nothing but the loopback interface exists in there.
    const links = await runCommand("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", { cwd: dir, timeoutMs: 30_000, network: "none" });
    expect(links.output.toString().trim()).toBe("lo");
  });

  it.skipIf(!isolation.available)("still kills a hung command and its children at the timeout", async () => {
    const pidFile = path.join(dir, "isolated-child.pid");
    const result = await runCommand(`sleep 300 & echo $! > ${pidFile}; wait`, { cwd: dir, timeoutMs: 500, network: "none" });
    expect(result.timed_out).toBe(true);
    expect(await isGoneWithin(Number(readFileSync(pidFile, "utf8")))).toBe(true);
  });

  it("keeps the command's exit code and working directory", async () => {
    if (!isolation.available) return;
    const result = await runCommand("pwd; exit 7", { cwd: dir, timeoutMs: 30_000, network: "none" });
    expect(result).toMatchObject({ exit_code: 7, timed_out: false });
    expect(result.output.toString()).toBe(`${dir}\n`);
  });

  it("says why isolation is impossible where it is, instead of running unisolated", async () => {
    const missing = await probeNetworkIsolation({ unshare: null });
    expect(missing).toMatchObject({ available: false, reason: expect.stringMatching(/unshare is not installed|Linux feature/) });
    const broken = await probeNetworkIsolation({ unshare: "/bin/false", ip: "/bin/true" });
    expect(broken.available).toBe(false);
    const noIp = await probeNetworkIsolation({ unshare: "/usr/bin/unshare", ip: null });
    expect(noIp).toMatchObject({ available: false, reason: expect.stringMatching(/ip is not installed|Linux feature/) });
  });

  it.skipIf(isolation.available)("refuses to run at all where namespaces are unavailable", async () => {
    await expect(runCommand("echo ran", { cwd: dir, timeoutMs: 30_000, network: "none" })).rejects.toThrow(UserError);
  });
});
