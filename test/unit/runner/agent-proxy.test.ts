import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { quote } from "shell-quote";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { MAX_HOST_CONTACTS } from "#shared/wire/confinement.js";
import { freePort } from "../../../runner/src/coordinator/free-port.js";
import { findExecutable } from "../../../runner/src/process/processes.js";
import { isAllowed, startAgentProxy, type AgentProxy } from "../../../runner/src/zones/agent-proxy.js";
import { FORWARDER_SOURCE, forwarderLines } from "../../../runner/src/zones/agent-forwarder.js";

// The agent zone's way out, driven the way the agent's tools drive it: real HTTP and CONNECT requests on
// the proxy's Unix socket (and through the in-zone forwarder over TCP) to real servers on 127.0.0.1.

const dir = mkdtempSync(path.join(os.tmpdir(), "lw-agent-proxy-"));
const children: ChildProcess[] = [];
/** Shells started in process groups of their own (the forwarder as a zone starts it), killed whole. */
const groups: ChildProcess[] = [];

/** What the origin server saw of one request. */
interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

let origin: http.Server;
let originPort = 0;
const seen: Seen[] = [];
let echo: net.Server;
let echoPort = 0;
const echoSockets = new Set<net.Socket>();
let closedPort = 0;
// Listening, but not on the list: the proxy must never reach it.
let unlisted: http.Server;
let unlistedPort = 0;
let unlistedRequests = 0;
let proxy: AgentProxy;
const socketPath = path.join(dir, "proxy.sock");

beforeAll(async () => {
  origin = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString();
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      const answer = `origin got ${req.method} ${body}`;
      res.writeHead(200, { "content-type": "text/plain", "content-length": Buffer.byteLength(answer), "x-origin": "yes" });
      res.end(answer);
    });
  });
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  originPort = (origin.address() as net.AddressInfo).port;

  echo = net.createServer((socket) => {
    echoSockets.add(socket);
    socket.on("close", () => echoSockets.delete(socket));
    socket.on("error", () => socket.destroy());
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", resolve));
  echoPort = (echo.address() as net.AddressInfo).port;

  unlisted = http.createServer((_req, res) => {
    unlistedRequests += 1;
    res.end("should not be reached");
  });
  await new Promise<void>((resolve) => unlisted.listen(0, "127.0.0.1", resolve));
  unlistedPort = (unlisted.address() as net.AddressInfo).port;

  // Allowed, but nothing listens there.
  closedPort = await freePort();
  proxy = await startAgentProxy({ allow: [`127.0.0.1:${originPort}`, `127.0.0.1:${echoPort}`, `127.0.0.1:${closedPort}`], socketPath });
});

beforeEach(() => {
  proxy.takeAudit();
  seen.length = 0;
});

afterEach(async () => {
  await Promise.all([...children.splice(0).map(killChild), ...groups.splice(0).map(killGroup)]);
});

afterAll(async () => {
  await proxy.close();
  for (const socket of echoSockets) socket.destroy();
  await new Promise<void>((resolve) => echo.close(() => resolve()));
  await new Promise<void>((resolve) => unlisted.close(() => resolve()));
  origin.closeAllConnections();
  await new Promise<void>((resolve) => origin.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

/** Kills a child by its pid and waits until it has exited. */
async function killChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  process.kill(child.pid, "SIGKILL");
  await exited;
}

/** Kills a shell started in a process group of its own, with everything it started (the forwarder), and waits for the shell. */
async function killGroup(child: ChildProcess): Promise<void> {
  if (child.pid === undefined) return;
  const exited = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    // The group is gone already.
  }
  await exited;
}

/** Starts `node <args>` and waits for it to print "ready". */
async function startReadyChild(args: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let stdout = "";
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes("ready\n")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`exited ${code} before it was ready: ${stderr}`)));
  });
  return child;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A proxy request (absolute-form URL) sent on the proxy's Unix socket, or over TCP to a forwarder's port. */
function viaProxy(
  to: { socketPath: string } | { port: number },
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const where = "socketPath" in to ? { socketPath: to.socketPath } : { host: "127.0.0.1", port: to.port };
    const req = http.request({ ...where, method: init.method ?? "GET", path: url, headers: init.headers ?? {}, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(init.body);
  });
}

/** Sends `CONNECT authority` and resolves with the answer's head and the socket, left open for the tunnel. */
function connectThrough(to: { socketPath: string } | { port: number }, authority: string): Promise<{ head: string; socket: net.Socket }> {
  return new Promise((resolve, reject) => {
    const socket = "socketPath" in to ? net.connect(to.socketPath) : net.connect(to.port, "127.0.0.1");
    let received = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      received = Buffer.concat([received, chunk]);
      const end = received.indexOf("\r\n\r\n");
      if (end < 0) return;
      socket.off("data", onData);
      socket.pause();
      if (end + 4 < received.length) socket.unshift(received.subarray(end + 4));
      resolve({ head: received.subarray(0, end).toString(), socket });
    };
    socket.on("data", onData);
    socket.on("error", reject);
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  });
}

/** Reads from a socket until `length` bytes have arrived (or it ends). */
function readBytes(socket: net.Socket, length: number): Promise<string> {
  return new Promise((resolve) => {
    let received = "";
    const onData = (chunk: Buffer): void => {
      received += chunk.toString();
      if (received.length >= length) done();
    };
    const done = (): void => {
      socket.off("data", onData);
      socket.off("end", done);
      resolve(received);
    };
    socket.on("data", onData);
    socket.on("end", done);
    socket.resume();
  });
}

/** Everything left on a socket until the other side ends it. */
function readToEnd(socket: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let received = "";
    socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
    socket.on("close", () => resolve(received));
    socket.resume();
  });
}

function closed(socket: net.Socket): Promise<void> {
  return new Promise((resolve) => (socket.destroyed ? resolve() : socket.once("close", () => resolve())));
}

describe("plain HTTP through the proxy", () => {
  it("serves an allowed request with its method, path and body, drops proxy and hop-by-hop headers, and audits the bytes", async () => {
    const answer = await viaProxy({ socketPath }, `http://127.0.0.1:${originPort}/echo?q=1`, {
      method: "POST",
      headers: { "proxy-authorization": "Basic c2VjcmV0", connection: "x-hop", "x-hop": "1", "x-keep": "2", host: "elsewhere.example" },
      body: "ping",
    });
    expect(answer.status).toBe(200);
    expect(answer.body).toBe("origin got POST ping");
    expect(answer.headers["x-origin"]).toBe("yes");

    expect(seen).toHaveLength(1);
    const request = seen[0]!;
    expect(request).toMatchObject({ method: "POST", url: "/echo?q=1", body: "ping" });
    expect(request.headers.host).toBe(`127.0.0.1:${originPort}`);
    expect(request.headers["x-keep"]).toBe("2");
    expect(request.headers["x-hop"]).toBeUndefined();
    expect(request.headers["proxy-authorization"]).toBeUndefined();

    expect(proxy.takeAudit()).toEqual({
      hosts: [{ host: "127.0.0.1", port: originPort, allowed: true, requests: 1, bytes_out: 4, bytes_in: Buffer.byteLength("origin got POST ping") }],
      hosts_omitted: 0,
    });
  });

  it("refuses a port not on the list with 403, reaches nothing there, and audits it as not allowed", async () => {
    const answer = await viaProxy({ socketPath }, `http://127.0.0.1:${unlistedPort}/`);
    expect(answer.status).toBe(403);
    expect(answer.body).toBe(`loopwarden proxy: 127.0.0.1:${unlistedPort} is not in agent.network.allow\n`);
    expect(unlistedRequests).toBe(0);
    expect(proxy.takeAudit().hosts).toEqual([{ host: "127.0.0.1", port: unlistedPort, allowed: false, requests: 1, bytes_out: 0, bytes_in: 0 }]);
  });

  it("refuses a wildcard's parent domain and a host not on the list", async () => {
    const wildcard = await startAgentProxy({ allow: ["*.example.test:80"], socketPath: path.join(dir, "wildcard.sock") });
    try {
      expect((await viaProxy({ socketPath: wildcard.socketPath }, "http://example.test/")).status).toBe(403);
      expect((await viaProxy({ socketPath: wildcard.socketPath }, `http://127.0.0.1:${originPort}/`)).status).toBe(403);
      expect(wildcard.takeAudit().hosts.map((contact) => [contact.host, contact.port, contact.allowed])).toEqual([
        ["127.0.0.1", originPort, false],
        ["example.test", 80, false],
      ]);
    } finally {
      await wildcard.close();
    }
  });

  it("answers 400 to a request that is not a proxy request", async () => {
    const answer = await viaProxy({ socketPath }, "/not-absolute");
    expect(answer.status).toBe(400);
    expect(answer.body).toMatch(/absolute http:\/\/ URL/);
    expect(proxy.takeAudit()).toEqual({ hosts: [], hosts_omitted: 0 });
  });

  it("answers 502 when an allowed host cannot be reached", async () => {
    const answer = await viaProxy({ socketPath }, `http://127.0.0.1:${closedPort}/`);
    expect(answer.status).toBe(502);
    expect(answer.body).toMatch(/could not reach 127\.0\.0\.1:\d+: ECONNREFUSED/);
    expect(proxy.takeAudit().hosts).toEqual([{ host: "127.0.0.1", port: closedPort, allowed: true, requests: 1, bytes_out: 0, bytes_in: 0 }]);
  });
});

describe("CONNECT through the proxy", () => {
  it("tunnels bytes both ways to an allowed host and audits them", async () => {
    const { head, socket } = await connectThrough({ socketPath }, `127.0.0.1:${echoPort}`);
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    socket.write("hello tunnel");
    expect(await readBytes(socket, "hello tunnel".length)).toBe("hello tunnel");
    socket.end();
    await closed(socket);
    expect(proxy.takeAudit()).toEqual({
      hosts: [{ host: "127.0.0.1", port: echoPort, allowed: true, requests: 1, bytes_out: 12, bytes_in: 12 }],
      hosts_omitted: 0,
    });
  });

  it("refuses a host not on the list with 403 and audits it as not allowed", async () => {
    const { head, socket } = await connectThrough({ socketPath }, "blocked.example.test:443");
    expect(head).toMatch(/^HTTP\/1\.1 403 Forbidden/);
    expect(await readToEnd(socket)).toMatch(/blocked\.example\.test:443 is not in agent\.network\.allow/);
    expect(proxy.takeAudit().hosts).toEqual([{ host: "blocked.example.test", port: 443, allowed: false, requests: 1, bytes_out: 0, bytes_in: 0 }]);
  });

  it("answers 502 when an allowed host cannot be reached", async () => {
    const { head, socket } = await connectThrough({ socketPath }, `127.0.0.1:${closedPort}`);
    expect(head).toMatch(/^HTTP\/1\.1 502 /);
    await readToEnd(socket);
  });
});

describe("the audit", () => {
  it("starts afresh after each takeAudit, sorted by host then port", async () => {
    await viaProxy({ socketPath }, "http://b.example.test:81/");
    await viaProxy({ socketPath }, "http://a.example.test:82/");
    await viaProxy({ socketPath }, "http://A.example.test:80/");
    await viaProxy({ socketPath }, "http://a.example.test/");
    const first = proxy.takeAudit();
    expect(first.hosts.map((contact) => `${contact.host}:${contact.port}:${contact.requests}`)).toEqual([
      "a.example.test:80:2",
      "a.example.test:82:1",
      "b.example.test:81:1",
    ]);
    expect(proxy.takeAudit()).toEqual({ hosts: [], hosts_omitted: 0 });
  });

  it(`itemises at most ${MAX_HOST_CONTACTS} hosts, counts the rest, and keeps an allowed host over refused ones`, async () => {
    for (let i = 0; i < MAX_HOST_CONTACTS + 5; i += 1) expect((await viaProxy({ socketPath }, `http://h${i}.example.test/`)).status).toBe(403);
    await viaProxy({ socketPath }, `http://h5.example.test/`);
    expect((await viaProxy({ socketPath }, `http://127.0.0.1:${originPort}/`)).status).toBe(200);
    const audit = proxy.takeAudit();
    expect(audit.hosts).toHaveLength(MAX_HOST_CONTACTS);
    expect(audit.hosts_omitted).toBe(6);
    expect(audit.hosts.find((contact) => contact.port === originPort)).toMatchObject({ allowed: true, requests: 1 });
    expect(audit.hosts.find((contact) => contact.host === "h5.example.test")?.requests).toBe(2);
  });
});

describe("isAllowed", () => {
  const allow = ["api.example.com:443", "*.example.org:443", "127.0.0.1:8080", "*.0.0.1:80"];
  it.each([
    ["api.example.com", 443, true],
    ["API.Example.COM", 443, true],
    ["api.example.com.", 443, true],
    ["api.example.com", 80, false],
    ["example.com", 443, false],
    ["x.api.example.com", 443, false],
    ["a.example.org", 443, true],
    ["a.b.example.org", 443, true],
    ["A.EXAMPLE.ORG", 443, true],
    ["example.org", 443, false],
    ["badexample.org", 443, false],
    ["a.example.org", 80, false],
    ["127.0.0.1", 8080, true],
    ["127.0.0.2", 8080, false],
    ["localhost", 8080, false],
    ["127.0.0.1", 80, false],
  ] as const)("%s:%i → %s", (host, port, expected) => {
    expect(isAllowed(allow, host, port)).toBe(expected);
  });

  it("allows nothing with an empty list", () => {
    expect(isAllowed([], "127.0.0.1", 80)).toBe(false);
  });
});

// The forwarder as the agent's zone starts it (`forwarderLines`, then the agent's command): socat where
// the machine has it (.ci/run installs it; README, "Needs"), else the Node script. Run here on the host's
// loopback, on a free port, with the same lines.
describe.each(["socat", "node"] as const)("the in-zone forwarder (%s)", (way) => {
  it("is listening when the agent starts, forwards HTTP and CONNECT to the proxy, and relays a half-closed tunnel's answer", async () => {
    const socat = way === "socat" ? await findExecutable("socat") : null;
    if (way === "socat") expect(socat, "socat is not installed: apt-get install socat (README, Quick start)").not.toBeNull();
    const script = path.join(dir, "forwarder.cjs");
    writeFileSync(script, FORWARDER_SOURCE);
    const port = await freePort();
    const fifo = path.join(dir, `forwarder-${way}.fifo`);
    rmSync(fifo, { force: true });
    // The "agent" connects at once: the lines return only once the forwarder listens.
    const agent = `${quote([process.execPath, "-e", `require("net").connect(${port}, "127.0.0.1").on("connect", () => console.log("ready")).on("error", (e) => { console.error(e.message); process.exit(1); })`])}; exec sleep 600`;
    const shell = spawn("/bin/sh", ["-c", [...forwarderLines({ port, socketPath, socat, script, fifo }), agent].join("\n")], {
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    groups.push(shell);
    let said = "";
    shell.stderr?.on("data", (chunk: Buffer) => (said += chunk.toString()));
    await new Promise<void>((resolve, reject) => {
      shell.stdout?.on("data", (chunk: Buffer) => chunk.toString().includes("ready") && resolve());
      shell.once("exit", (code) => reject(new Error(`the agent could not connect (exit ${code}): ${said}`)));
    });

    const answer = await viaProxy({ port }, `http://127.0.0.1:${originPort}/through-forwarder`, { method: "PUT", body: "via tcp" });
    expect(answer.status).toBe(200);
    expect(answer.body).toBe("origin got PUT via tcp");
    expect(seen.map((request) => request.url)).toEqual(["/through-forwarder"]);

    const { head, socket } = await connectThrough({ port }, `127.0.0.1:${echoPort}`);
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    // Sent, then this side ended: the echo still comes back whole before the tunnel closes.
    socket.end("round trip");
    expect(await readToEnd(socket)).toBe("round trip");

    expect(proxy.takeAudit().hosts.map((contact) => [contact.port, contact.requests, contact.bytes_out, contact.bytes_in])).toEqual(
      [
        [originPort, 1, 7, Buffer.byteLength("origin got PUT via tcp")],
        [echoPort, 1, 10, 10],
      ].sort((a, b) => a[0]! - b[0]!),
    );
  });
});

describe("the proxy's socket", () => {
  it("replaces a stale socket, is private to its user, and is gone with every tunnel after close", async () => {
    const stalePath = path.join(dir, "stale.sock");
    const holder = await startReadyChild(["-e", "require('net').createServer().listen(process.argv[1], () => console.log('ready'))", stalePath]);
    await killChild(holder);
    expect(statSync(stalePath).isSocket()).toBe(true);

    const own = await startAgentProxy({ allow: [`127.0.0.1:${echoPort}`], socketPath: stalePath });
    expect(statSync(stalePath).mode & 0o777).toBe(0o600);
    const { head, socket } = await connectThrough({ socketPath: stalePath }, `127.0.0.1:${echoPort}`);
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    await own.close();
    await closed(socket);
    expect(existsSync(stalePath)).toBe(false);
  });

  it("refuses to replace a file that is not a socket", async () => {
    const filePath = path.join(dir, "not-a-socket");
    writeFileSync(filePath, "keep me");
    await expect(startAgentProxy({ allow: [], socketPath: filePath })).rejects.toThrow(/not a socket/);
    expect(existsSync(filePath)).toBe(true);
  });
});
