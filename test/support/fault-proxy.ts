import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { mulberry32 } from "./prng.js";

// A small proxy on 127.0.0.1 in front of a coordinator that misbehaves the way networks do: it sends
// some mutating requests twice (a client retry the first copy of which did arrive) and drops some
// answers after the coordinator acted on the request (a lost response). Seeded, so a failure replays.

/** What the proxy did, for the test to report and assert on. */
export interface FaultCounts {
  requests: number;
  duplicated: number;
  dropped: number;
}

export interface FaultProxy {
  url: string;
  counts: FaultCounts;
  stop(): Promise<void>;
}

const MUTATING = new Set(["POST", "PUT", "DELETE"]);
/** Hop-by-hop headers, and what fetch sets itself, are not forwarded. */
const NOT_FORWARDED = new Set(["host", "connection", "content-length", "transfer-encoding", "keep-alive"]);

async function bodyOf(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/**
 * Starts the proxy. Each mutating request is, with probability `duplicate`, forwarded twice (the
 * client gets the second answer), and, with probability `drop`, answered by closing the connection
 * once the coordinator has answered (the client never learns the outcome and must retry). With
 * `atLeastOne`, the second mutating request is duplicated and the third's answer dropped when chance has
 * not done so yet: a short run (a test's) still meets both faults, whatever its seed.
 */
export async function startFaultProxy(target: string, options: { seed: number; duplicate: number; drop: number; atLeastOne?: boolean }): Promise<FaultProxy> {
  const random = mulberry32(options.seed);
  const counts: FaultCounts = { requests: 0, duplicated: 0, dropped: 0 };
  let mutations = 0;
  const forward = (request: IncomingMessage, body: Buffer) => {
    const headers = Object.fromEntries(
      Object.entries(request.headers).flatMap(([name, value]) => (NOT_FORWARDED.has(name) || value === undefined ? [] : [[name, String(value)]])),
    );
    return fetch(`${target}${request.url ?? "/"}`, {
      method: request.method ?? "GET",
      headers,
      ...(body.length > 0 || MUTATING.has(request.method ?? "") ? { body } : {}),
    });
  };
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    void (async () => {
      counts.requests++;
      const body = await bodyOf(request);
      const mutating = MUTATING.has(request.method ?? "");
      const nth = mutating ? ++mutations : 0;
      let answer = await forward(request, body);
      if (mutating && (random() < options.duplicate || (options.atLeastOne && nth === 2 && counts.duplicated === 0))) {
        counts.duplicated++;
        await answer.arrayBuffer();
        answer = await forward(request, body);
      }
      const bytes = Buffer.from(await answer.arrayBuffer());
      if (mutating && (random() < options.drop || (options.atLeastOne && nth === 3 && counts.dropped === 0))) {
        counts.dropped++;
        response.destroy();
        return;
      }
      const headers: Record<string, string> = {};
      answer.headers.forEach((value, name) => {
        if (!NOT_FORWARDED.has(name) && name !== "content-encoding") headers[name] = value;
      });
      response.writeHead(answer.status, headers);
      response.end(bytes);
    })().catch(() => response.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    counts,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
