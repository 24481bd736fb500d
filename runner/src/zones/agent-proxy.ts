import { chmod, lstat, unlink } from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import { MAX_HOST_CONTACTS, type HostContact } from "#shared/wire/confinement.js";

// The agent zone's only way out (DESIGN §6.7, network `allow`). The agent runs in a network namespace
// of its own with nothing but loopback; the runner serves this HTTP proxy on a Unix socket bind-mounted
// into the zone, and a forwarder inside the zone (agent-forwarder.ts) turns 127.0.0.1:<port> into that
// socket, so HTTP_PROXY/HTTPS_PROXY work unchanged. Every host:port asked for is checked against
// `agent.network.allow` and counted, so the run's event says where the agent reached and how much went
// each way. The proxy connects to each host as named: the name checked is the name connected to.

/** What one agent run asked the proxy for: per host:port, allowed or not, requests and bytes. */
export interface ProxyAudit {
  hosts: HostContact[];
  hosts_omitted: number;
}

/** The allowlisting proxy serving one agent zone. */
export interface AgentProxy {
  /** The Unix socket it listens on. */
  socketPath: string;
  /** The audit since the last call (or the start), and a fresh one begins. */
  takeAudit(): ProxyAudit;
  /** Stops listening and destroys every open tunnel. */
  close(): Promise<void>;
}

/** Whether host:port is allowed by the list (exact host, case-insensitive, same port; `*.example.com:443` matches subdomains of example.com but not example.com itself). */
export function isAllowed(allow: readonly string[], host: string, port: number): boolean {
  const wanted = normaliseHost(host);
  return allow.some((entry) => {
    const colon = entry.lastIndexOf(":");
    const portText = entry.slice(colon + 1);
    if (colon < 0 || !/^\d{1,5}$/.test(portText) || Number(portText) !== port) return false;
    const pattern = normaliseHost(entry.slice(0, colon));
    if (!pattern.startsWith("*.")) return wanted === pattern;
    // A wildcard names subdomains; an address literal has none, and `*.0.0.1` must not let 127.0.0.1 through.
    const suffix = pattern.slice(1);
    return wanted.length > suffix.length && wanted.endsWith(suffix) && !isIpLiteral(wanted);
  });
}

/** Starts the proxy on `socketPath` (a stale socket there is replaced), allowing only the `host:port` entries of `allow`. */
export async function startAgentProxy(options: { allow: readonly string[]; socketPath: string }): Promise<AgentProxy> {
  const { allow, socketPath } = options;
  // sun_path holds 108 bytes with the terminating NUL; a longer path fails obscurely or is cut short.
  if (Buffer.byteLength(socketPath) > 107) throw new Error(`the agent proxy's socket path is too long for a Unix socket (over 107 bytes): ${socketPath}`);
  await removeStaleSocket(socketPath);

  const book = createAuditBook();
  const open = new Set<net.Socket>();
  const track = (socket: net.Socket): void => {
    open.add(socket);
    socket.once("close", () => open.delete(socket));
  };
  // Its own agent, so close() can drop upstream connections without touching the runner's own requests.
  const agent = new http.Agent({ keepAlive: false });

  // An upload through the proxy may take longer than Node's default 5-minute request timeout.
  const server = http.createServer({ requestTimeout: 0 });
  server.on("connection", track);
  server.on("error", () => {});
  server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    try {
      forwardRequest(req, res, { allow, book, agent, track });
    } catch (error) {
      answer(res, 502, `loopwarden proxy: could not forward the request: ${(error as Error).message}`);
    }
  });
  server.on("connect", (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    // The HTTP server lets go of the socket here, its error handler included.
    client.on("error", () => client.destroy());
    try {
      openTunnel(req, client, head, { allow, book, track });
    } catch (error) {
      answerRaw(client, 502, `loopwarden proxy: could not open the tunnel: ${(error as Error).message}`);
    }
  });

  await listenPrivately(server, socketPath);

  return {
    socketPath,
    takeAudit: () => book.take(),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of open) socket.destroy();
        agent.destroy();
      }),
  };
}

interface Target {
  host: string;
  port: number;
}

interface ProxyContext {
  allow: readonly string[];
  book: AuditBook;
  track: (socket: net.Socket) => void;
}

const NOT_A_PROXY_REQUEST = "loopwarden proxy: ask for an absolute http:// URL (GET http://host/path), or CONNECT host:port for https";

function notAllowed(target: Target): string {
  return `loopwarden proxy: ${formatTarget(target)} is not in agent.network.allow`;
}

function forwardRequest(req: http.IncomingMessage, res: http.ServerResponse, context: ProxyContext & { agent: http.Agent }): void {
  req.on("error", () => {});
  res.on("error", () => {});
  const url = parseAbsoluteUrl(req.url ?? "");
  if (!url) return answer(res, 400, NOT_A_PROXY_REQUEST);
  const { target } = url;
  const allowed = isAllowed(context.allow, target.host, target.port);
  context.book.tally(target, allowed, { requests: 1 });
  if (!allowed) return answer(res, 403, notAllowed(target));

  const headers = forwardableHeaders(req.rawHeaders);
  // The absolute URL names the host, whatever Host the client sent (RFC 9112 §3.2.2).
  headers["host"] = url.hostHeader;
  // Transfer-Encoding is hop-by-hop, but a chunked body still needs framing on the way up.
  if (/\bchunked\b/i.test(req.headers["transfer-encoding"] ?? "") && req.headers["content-length"] === undefined) headers["transfer-encoding"] = "chunked";
  const upstream = http.request({ host: target.host, port: target.port, method: req.method ?? "GET", path: url.path, headers, agent: context.agent });
  upstream.on("socket", context.track);
  upstream.on("error", (error: NodeJS.ErrnoException) => {
    req.unpipe(upstream);
    answer(res, 502, `loopwarden proxy: could not reach ${formatTarget(target)}: ${error.code ?? error.message}`);
  });
  upstream.on("response", (answerIn: http.IncomingMessage) => {
    try {
      answerIn.on("error", () => res.destroy());
      // An answer cut short upstream must reach the client cut short, not as a complete one.
      answerIn.on("close", () => {
        if (!answerIn.complete) res.destroy();
      });
      answerIn.on("data", (chunk: Buffer) => context.book.tally(target, true, { bytes_in: chunk.length }));
      const status = answerIn.statusCode ?? 502;
      res.writeHead(status, answerIn.statusMessage || (http.STATUS_CODES[status] ?? ""), forwardableHeaders(answerIn.rawHeaders));
      answerIn.pipe(res);
    } catch {
      res.destroy();
      upstream.destroy();
    }
  });
  res.on("close", () => {
    if (!res.writableFinished) upstream.destroy();
  });
  req.on("data", (chunk: Buffer) => context.book.tally(target, true, { bytes_out: chunk.length }));
  req.pipe(upstream);
}

function openTunnel(req: http.IncomingMessage, client: net.Socket, head: Buffer, context: ProxyContext): void {
  const target = parseAuthority(req.url ?? "", null);
  if (!target) return answerRaw(client, 400, NOT_A_PROXY_REQUEST);
  const allowed = isAllowed(context.allow, target.host, target.port);
  context.book.tally(target, allowed, { requests: 1 });
  if (!allowed) return answerRaw(client, 403, notAllowed(target));

  const upstream = net.connect({ host: target.host, port: target.port });
  context.track(upstream);
  let established = false;
  upstream.on("error", (error: NodeJS.ErrnoException) => {
    if (established) client.destroy();
    else answerRaw(client, 502, `loopwarden proxy: could not reach ${formatTarget(target)}: ${error.code ?? error.message}`);
  });
  // A clean end travels through the pipes (each side may still be sending); only a failure cuts the other side.
  client.on("close", (hadError) => {
    if (hadError || !established) upstream.destroy();
  });
  upstream.on("close", (hadError) => {
    if (hadError && established) client.destroy();
  });
  upstream.on("connect", () => {
    established = true;
    client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    if (head.length > 0) {
      context.book.tally(target, true, { bytes_out: head.length });
      upstream.write(head);
    }
    client.on("data", (chunk: Buffer) => context.book.tally(target, true, { bytes_out: chunk.length }));
    upstream.on("data", (chunk: Buffer) => context.book.tally(target, true, { bytes_in: chunk.length }));
    client.pipe(upstream);
    upstream.pipe(client);
  });
}

/** A plain-text answer on a proxied request, or a cut connection when an answer has already begun. */
function answer(res: http.ServerResponse, status: number, text: string): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const body = `${text}\n`;
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/** A plain-text answer written straight on a CONNECT socket, which the HTTP server has let go of. */
function answerRaw(socket: net.Socket, status: number, text: string): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = `${text}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ""}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

// Meaningful for one connection only (RFC 9110 §7.6.1), plus Expect: this proxy has already answered it.
const HOP_BY_HOP = new Set(["connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "expect"]);

/** The headers worth passing on: not hop-by-hop, not named in Connection, not Proxy-*. */
function forwardableHeaders(rawHeaders: readonly string[]): Record<string, string | string[]> {
  const named = new Set<string>();
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]?.toLowerCase() !== "connection") continue;
    for (const name of (rawHeaders[i + 1] ?? "").split(",")) named.add(name.trim().toLowerCase());
  }
  const headers: Record<string, string | string[]> = {};
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = (rawHeaders[i] ?? "").toLowerCase();
    const value = rawHeaders[i + 1] ?? "";
    if (!name || HOP_BY_HOP.has(name) || named.has(name) || name.startsWith("proxy-")) continue;
    const before = headers[name];
    // A header sent twice goes on sent twice; one sent once stays a string (Node insists for Host).
    headers[name] = before === undefined ? value : [...(Array.isArray(before) ? before : [before]), value];
  }
  return headers;
}

/** `http://authority/path` split into where to connect, the Host to send, and the path as written. */
function parseAbsoluteUrl(url: string): { target: Target; hostHeader: string; path: string } | null {
  const match = /^http:\/\/([^/?#]*)([^#]*)/i.exec(url);
  if (!match) return null;
  // Credentials in the URL are the client's business with the origin, not part of where to connect.
  const authority = (match[1] ?? "").slice((match[1] ?? "").lastIndexOf("@") + 1);
  const target = parseAuthority(authority, 80);
  if (!target) return null;
  const rest = match[2] ?? "";
  return { target, hostHeader: authority, path: rest.startsWith("/") ? rest : `/${rest}` };
}

/** `host:port` or `[v6]:port` (the port optional when `defaultPort` is given); null when it is not one. */
function parseAuthority(authority: string, defaultPort: number | null): Target | null {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]@/\s]+))(?::(\d{1,5}))?$/.exec(authority);
  if (!match) return null;
  const v6 = match[1];
  const host = v6 !== undefined ? v6.toLowerCase() : normaliseHost(match[2] ?? "");
  if (v6 === undefined && !isHostName(host)) return null;
  const port = match[3] !== undefined ? Number(match[3]) : defaultPort;
  if (port === null || port < 1 || port > 65_535) return null;
  return { host, port };
}

/** Lower case, without the root's trailing dot: the form hosts are compared and recorded in. */
function normaliseHost(host: string): string {
  const lower = host.toLowerCase();
  return lower.endsWith(".") ? lower.slice(0, -1) : lower;
}

function isHostName(host: string): boolean {
  return host.length >= 1 && host.length <= 253 && host.split(".").every((label) => /^[a-z0-9_-]{1,63}$/.test(label));
}

function isIpLiteral(host: string): boolean {
  return net.isIP(host) !== 0;
}

function formatTarget(target: Target): string {
  return target.host.includes(":") ? `[${target.host}]:${target.port}` : `${target.host}:${target.port}`;
}

/** Removes a socket left behind by an earlier proxy; anything else at the path is refused, not deleted. */
async function removeStaleSocket(socketPath: string): Promise<void> {
  let isSocket: boolean;
  try {
    isSocket = (await lstat(socketPath)).isSocket();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  if (!isSocket) throw new Error(`the agent proxy's socket path ${socketPath} is taken by something that is not a socket`);
  await unlink(socketPath);
}

/** Listens on the Unix socket created 0600, so no other user on the host can use the agent's way out. */
async function listenPrivately(server: http.Server, socketPath: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error): void => reject(error);
    server.once("error", onError);
    // The socket is bound synchronously inside listen(), so a umask set around it covers only this file
    // and leaves no moment in which the socket is open to others. Worker threads may not set the umask;
    // the chmod below still applies there.
    let previous: number | null = null;
    try {
      previous = process.umask(0o177);
    } catch {
      previous = null;
    }
    try {
      server.listen(socketPath, () => {
        server.off("error", onError);
        resolve();
      });
    } finally {
      if (previous !== null) process.umask(previous);
    }
  });
  await chmod(socketPath, 0o600);
}

type Tally = Partial<Pick<HostContact, "requests" | "bytes_out" | "bytes_in">>;

interface AuditBook {
  tally(target: Target, allowed: boolean, counts: Tally): void;
  take(): ProxyAudit;
}

// Distinct hosts remembered beyond the itemised ones, so each is counted once in hosts_omitted; past this,
// every request to a host not yet seen counts, so a flood cannot grow the runner's memory without bound.
const MAX_REMEMBERED_OMITTED = 100_000;

function createAuditBook(): AuditBook {
  let hosts = new Map<string, HostContact>();
  let omitted = new Set<string>();
  let omittedUnremembered = 0;

  const omit = (key: string): void => {
    if (omitted.size < MAX_REMEMBERED_OMITTED) omitted.add(key);
    else omittedUnremembered += 1;
  };

  const entryFor = (target: Target, allowed: boolean): HostContact | null => {
    const key = `${target.host}:${target.port}`;
    const known = hosts.get(key);
    if (known) return known;
    if (omitted.has(key)) return null;
    if (hosts.size >= MAX_HOST_CONTACTS) {
      // Where the agent's bytes actually went matters more than what it was refused, so an allowed host
      // takes the place of a refused one (which is then counted as omitted) rather than going unitemised.
      const refused = allowed ? [...hosts].find(([, contact]) => !contact.allowed) : undefined;
      if (!refused) {
        omit(key);
        return null;
      }
      hosts.delete(refused[0]);
      omit(refused[0]);
    }
    const entry: HostContact = { host: target.host, port: target.port, allowed, requests: 0, bytes_out: 0, bytes_in: 0 };
    hosts.set(key, entry);
    return entry;
  };

  return {
    tally(target, allowed, counts) {
      const entry = entryFor(target, allowed);
      if (!entry) return;
      entry.requests += counts.requests ?? 0;
      entry.bytes_out += counts.bytes_out ?? 0;
      entry.bytes_in += counts.bytes_in ?? 0;
    },
    take() {
      const audit: ProxyAudit = {
        hosts: [...hosts.values()].map((contact) => ({ ...contact })).sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : a.port - b.port)),
        hosts_omitted: omitted.size + omittedUnremembered,
      };
      hosts = new Map();
      omitted = new Set();
      omittedUnremembered = 0;
      return audit;
    },
  };
}
