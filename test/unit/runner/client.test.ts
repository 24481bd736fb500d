import { createServer, type Server } from "node:http";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client, CoordinatorError } from "../../../runner/src/coordinator/client.js";
import { UserError } from "../../../runner/src/errors.js";
import { freePort } from "../../../runner/src/coordinator/free-port.js";

// A coordinator that answers an error is reachable: the runner reports what it said, and retries only
// what a retry can fix (connection failures, 429, 500 and 502-504), never "cannot reach … is it running?".

describe("Client errors", () => {
  let server: Server;
  let url = "";
  const hits = new Map<string, number>();
  const limitedAt = new Map<string, number[]>();
  let received: { encoding: string; wireBytes: number; json: unknown } | undefined;
  beforeAll(async () => {
    server = createServer((request, response) => {
      hits.set(request.url ?? "", (hits.get(request.url ?? "") ?? 0) + 1);
      if (request.url === "/echo/v1/loops" && request.method === "POST") {
        // Answers what it received: the encoding, the bytes on the wire, and the JSON they decode to.
        const chunks: Buffer[] = [];
        request.on("data", (chunk: Buffer) => chunks.push(chunk));
        request.on("end", () => {
          const wire = Buffer.concat(chunks);
          const gzipped = request.headers["content-encoding"] === "gzip";
          received = {
            encoding: request.headers["content-encoding"] ?? "identity",
            wireBytes: wire.length,
            json: JSON.parse((gzipped ? gunzipSync(wire) : wire).toString()),
          };
          response.writeHead(422, { "Content-Type": "application/json" });
          response.end(JSON.stringify({ error: { code: "seen", message: "received" } }));
        });
        return;
      }
      const paged = /\/paged\/v1\/loops\/[^/]+\/events\?after=(\d+)/.exec(request.url ?? "");
      if (paged) {
        // Pages of two events, cut short the way a byte budget cuts them: "more" says whether to go on.
        const after = Number(paged[1]);
        const seqs = [after + 1, after + 2].filter((seq) => seq <= 5);
        response.writeHead(200, { "Content-Type": "application/x-ndjson", "Loopwarden-More": String(after + 2 < 5) });
        response.end(seqs.map((seq) => `{"seq":${seq}}\n`).join(""));
        return;
      }
      if (request.url?.startsWith("/limited/")) {
        // Rate limited once, then answered: the retry must wait at least the second it is told to.
        const times = (limitedAt.get(request.url) ?? []).concat(Date.now());
        limitedAt.set(request.url, times);
        if (times.length === 1) {
          response.writeHead(429, { "Content-Type": "application/json", "Retry-After": "1" });
          response.end(JSON.stringify({ error: { code: "rate_limited", message: "too many requests" } }));
          return;
        }
        response.writeHead(404, { "Content-Type": "application/json" });
        response.end(JSON.stringify({ error: { code: "not_found", message: "no such loop" } }));
        return;
      }
      const [status, code] = request.url?.includes("storage") ? [507, "storage_limit"] : [500, "internal_error"];
      response.writeHead(status, { "Content-Type": "application/json" });
      response.end(JSON.stringify({ error: { code, message: `answered ${status}` } }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("a 500 that outlasts the retries is reported with the coordinator's own code and message", async () => {
    // A budget that holds several retries however slowly a loaded machine answers the first request.
    const client = new Client(url, { retryForMs: 2_000 });
    const error = await client.getLoop("lp_0123456789abcdef01234567").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(CoordinatorError);
    expect(error).toMatchObject({ status: 500, code: "internal_error", message: "answered 500" });
    expect(hits.get("/v1/loops/lp_0123456789abcdef01234567")).toBeGreaterThan(1);
  });

  it("a 429 is retried after its Retry-After; the 404 that follows is not retried", async () => {
    const client = new Client(`${url}/limited`, { retryForMs: 10_000 });
    await expect(client.getLoop("lp_0123456789abcdef01234567")).rejects.toMatchObject({ status: 404, code: "not_found" });
    const times = limitedAt.get("/limited/v1/loops/lp_0123456789abcdef01234567") ?? [];
    expect(times).toHaveLength(2);
    expect((times[1] ?? 0) - (times[0] ?? 0)).toBeGreaterThanOrEqual(990);
  });

  it("a 429 whose Retry-After outlasts the retry budget is reported as the coordinator's answer", async () => {
    const client = new Client(`${url}/limited`, { retryForMs: 200 });
    await expect(client.getLoop("lp_1123456789abcdef01234567")).rejects.toMatchObject({ status: 429, code: "rate_limited" });
    expect(limitedAt.get("/limited/v1/loops/lp_1123456789abcdef01234567")).toHaveLength(1);
  });

  it("a storage limit (507) is not retried: no retry can help", async () => {
    const client = new Client(`${url}/storage`, { retryForMs: 5_000 });
    await expect(client.getLoop("lp_0123456789abcdef01234567")).rejects.toMatchObject({ status: 507, code: "storage_limit" });
    expect(hits.get("/storage/v1/loops/lp_0123456789abcdef01234567")).toBe(1);
  });

  it("sends a large body gzip-encoded, a small one as it is; the coordinator decodes the same JSON", async () => {
    const client = new Client(`${url}/echo`, { retryForMs: 0 });
    const big = { ids: Array.from({ length: 20_000 }, (_, index) => `tests/test_module_${index % 97}.py::test_case_${index}`) };
    await client.createLoop(big as never).catch(() => undefined);
    expect(received).toMatchObject({ encoding: "gzip", json: big });
    expect(received?.wireBytes).toBeLessThan(JSON.stringify(big).length / 5);
    const small = { ids: ["a"] };
    await client.createLoop(small as never).catch(() => undefined);
    expect(received).toMatchObject({ encoding: "identity", json: small });
  });

  it("reads the event log page after page while the coordinator says more follow, however short the pages", async () => {
    const lines = await new Client(`${url}/paged`).eventLines("lp_0123456789abcdef01234567");
    expect(lines.map((line) => (JSON.parse(line) as { seq: number }).seq)).toEqual([1, 2, 3, 4, 5]);
  });

  it("only a coordinator that cannot be reached at all is 'cannot reach'", async () => {
    const client = new Client(`http://127.0.0.1:${await freePort()}`, { retryForMs: 300 });
    const error = await client.getLoop("lp_0123456789abcdef01234567").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(UserError);
    expect((error as Error).message).toMatch(/cannot reach the coordinator/);
  });
});

// Uploads (DESIGN §10): the first asks for an intent; once the coordinator has shown it stores uploads
// itself (an intent answered with its own path), a small artifact is PUT at once — one request, not
// two — while a large one still asks first.
describe("Client uploads", () => {
  let server: Server;
  let url = "";
  const seen: string[] = [];
  beforeAll(async () => {
    server = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const path = (request.url ?? "").replace(/\?.*$/, "");
        seen.push(`${request.method} ${path}`);
        response.writeHead(200, { "Content-Type": "application/json" });
        if (request.method === "POST") {
          response.end(JSON.stringify({ status: "upload", method: "PUT", url: `${path}/${"a".repeat(64)}` }));
          return;
        }
        response.end(JSON.stringify({ status: "stored", artifact: {} }));
      });
    });
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("asks for an intent once, then PUTs small artifacts directly; a large one still asks", async () => {
    const client = new Client(url, { retryForMs: 0 });
    const loop = "lp_0123456789abcdef01234567";
    await client.uploadArtifact(loop, "gate-1.log", new TextEncoder().encode("first"), "text/plain");
    await client.uploadArtifact(loop, "gate-2.log", new TextEncoder().encode("second"), "text/plain");
    const methods = seen.map((line) => line.split(" ")[0]);
    expect(methods).toEqual(["POST", "PUT", "PUT"]);
    seen.length = 0;
    await client.uploadArtifact(loop, "profile.bin", new Uint8Array(512 * 1024), "application/octet-stream");
    expect(seen.map((line) => line.split(" ")[0])).toEqual(["POST", "PUT"]);
  });
});
