import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { PARALLEL_PARTS } from "../../../runner/src/coordinator/artifact-transfers.js";
import { Client } from "../../../runner/src/coordinator/client.js";
import { idleTimeoutFromEnv } from "../../../runner/src/coordinator/transport.js";
import { UserError } from "../../../runner/src/errors.js";
import { BodySourceError, TransferStalled } from "../../../runner/src/coordinator/transfer-watch.js";
import { tempDir } from "../../support/cli.js";

// Transfers (DESIGN §10): a request is never timed whole — an upload, a download or a `complete` takes as
// long as it takes while bytes move — but one that stops moving is aborted, saying what stalled. A failed
// part of a multipart upload is sent again alone; an upload the client gives up on is aborted; one a
// process left unfinished is resumed by the next upload of the same bytes. Sizes are small and the
// servers' pauses short; the limits the tests set are far from both, so nothing depends on timing.

const LOOP = "lp_0123456789abcdef01234567";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
/** Bytes that differ from one test to the next (so no two uploads share a digest). */
const bytesOf = (size: number, seed: number) => Uint8Array.from({ length: size }, (_, index) => (index * 31 + seed) % 251);

type Handler = (request: IncomingMessage, response: ServerResponse, body: () => Promise<Buffer>) => void | Promise<void>;

/** A local server whose handler each test sets; every request is logged as `METHOD path`. */
function stubServer() {
  const state = { handler: null as Handler | null, seen: [] as string[], url: "" };
  let server: Server;
  beforeAll(async () => {
    server = createServer((request, response) => {
      state.seen.push(`${request.method} ${(request.url ?? "").replace(/\?.*$/, "")}`);
      const body = async () => {
        const chunks: Buffer[] = [];
        for await (const chunk of request) chunks.push(chunk as Buffer);
        return Buffer.concat(chunks);
      };
      void Promise.resolve(state.handler?.(request, response, body)).catch((error: unknown) => {
        response.destroy(error as Error);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    state.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterEach(() => {
    state.seen.length = 0;
  });
  afterAll(async () => {
    // Whatever a test left hanging (an answer never sent) is cut; the client already gave up on it.
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return state;
}

function json(response: ServerResponse, status: number, value: unknown): void {
  response.writeHead(status, { "Content-Type": "application/json" });
  response.end(JSON.stringify(value));
}

const stored = (sha: string, size: number) => ({ status: "stored", artifact: { sha256: sha, size, name: "x", content_type: "x", created_at: "now" } });

describe("Client transfers: slow is not dead", () => {
  const stub = stubServer();

  it("an upload the server reads slowly, for longer than a JSON call may take, completes; progress is heard piece by piece", async () => {
    const bytes = bytesOf(1024 * 1024, 1);
    let received: Buffer | null = null;
    stub.handler = async (request, response, body) => {
      if (request.method === "POST") return json(response, 200, { status: "upload", method: "PUT", url: `/v1/loops/${LOOP}/artifacts/${sha256(bytes)}` });
      // Read slowly, then answer late: the whole PUT takes far longer than the 100 ms a JSON call may.
      const chunks: Buffer[] = [];
      for await (const chunk of request) {
        chunks.push(chunk as Buffer);
        await sleep(15);
      }
      received = Buffer.concat(chunks);
      await sleep(300);
      void body;
      json(response, 201, stored(sha256(bytes), bytes.length));
    };
    const client = new Client(stub.url, { retryForMs: 0, requestTimeoutMs: 100, idleTimeoutMs: 10_000 });
    const heard: number[] = [];
    const dir = tempDir("transfer-progress");
    try {
      const file = path.join(dir.dir, "profile.bin");
      await writeFile(file, bytes);
      const ref = await client.uploadArtifactFile(LOOP, file, "profile.bin", "application/octet-stream", (sent, total) => {
        expect(total).toBe(bytes.length);
        heard.push(sent);
      });
      expect(ref).toMatchObject({ sha256: sha256(bytes), size: bytes.length });
    } finally {
      dir.cleanup();
    }
    expect(received && sha256(received)).toBe(sha256(bytes));
    // Many pieces, each heard as it went, never going back; the last is the whole file.
    expect(heard.length).toBeGreaterThan(4);
    expect(heard.every((sent, index) => index === 0 || sent >= (heard[index - 1] ?? 0))).toBe(true);
    expect(heard.at(-1)).toBe(bytes.length);
  });

  it("a download the server trickles, for longer than a JSON call may take, arrives whole", async () => {
    const bytes = bytesOf(24 * 1024, 2);
    stub.handler = async (_request, response) => {
      response.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": String(bytes.length) });
      for (let offset = 0; offset < bytes.length; offset += 1024) {
        response.write(bytes.subarray(offset, offset + 1024));
        await sleep(20);
      }
      response.end();
    };
    const client = new Client(stub.url, { retryForMs: 0, requestTimeoutMs: 100, idleTimeoutMs: 10_000 });
    const downloaded = await client.downloadArtifact(LOOP, sha256(bytes));
    expect(sha256(downloaded)).toBe(sha256(bytes));
  });

  it("a long answer to a JSON call is still limited whole: a coordinator that trickles forever is cut off", async () => {
    stub.handler = async (_request, response) => {
      response.writeHead(200, { "Content-Type": "application/json" });
      response.write("{");
      for (let index = 0; index < 200 && !response.destroyed; index++) {
        response.write(" ");
        await sleep(20);
      }
      response.end("}");
    };
    const client = new Client(stub.url, { retryForMs: 0, requestTimeoutMs: 300, idleTimeoutMs: 10_000 });
    const error = await client.getLoop(LOOP).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(TransferStalled);
    expect((error as Error).message).toMatch(/the coordinator at .* did not finish answering within 300 ms while GET \/v1\/loops\//);
  });
});

describe("LOOPWARDEN_HTTP_IDLE_TIMEOUT", () => {
  it("is a duration; unset, 60 s; anything else is refused by name", () => {
    expect(idleTimeoutFromEnv({})).toBe(60_000);
    expect(idleTimeoutFromEnv({ LOOPWARDEN_HTTP_IDLE_TIMEOUT: "5m" })).toBe(300_000);
    expect(idleTimeoutFromEnv({ LOOPWARDEN_HTTP_IDLE_TIMEOUT: "250ms" })).toBe(250);
    expect(() => idleTimeoutFromEnv({ LOOPWARDEN_HTTP_IDLE_TIMEOUT: "60" })).toThrow(/LOOPWARDEN_HTTP_IDLE_TIMEOUT="60" is not a duration/);
  });
});

describe("Client transfers: dead is named", () => {
  const stub = stubServer();

  it("a download that stops sending is aborted, saying so — never 'cannot reach'", async () => {
    stub.handler = (_request, response) => {
      response.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": "4096" });
      response.write(Buffer.alloc(1024));
      // … and nothing more.
    };
    const client = new Client(stub.url, { retryForMs: 0, idleTimeoutMs: 300 });
    const error = await client.downloadArtifact(LOOP, "a".repeat(64)).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(TransferStalled);
    expect(error).toBeInstanceOf(UserError);
    expect((error as Error).message).toMatch(
      /^the coordinator at http:\/\/127\.0\.0\.1:\d+ stopped answering: no byte received for 300 ms while downloading artifact aaaaaaaaaaaa; LOOPWARDEN_HTTP_IDLE_TIMEOUT/,
    );
  });

  it("an upload whose answer never comes is aborted, naming the file", async () => {
    stub.handler = async (request, response, body) => {
      if (request.method === "POST") return json(response, 200, { status: "upload", method: "PUT", url: `/v1/loops/${LOOP}/artifacts/${"b".repeat(64)}` });
      await body();
      // Read whole, never answered.
    };
    const client = new Client(stub.url, { retryForMs: 0, idleTimeoutMs: 300 });
    const error = await client.uploadArtifact(LOOP, "flame.svg", bytesOf(300 * 1024, 3), "image/svg+xml").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(TransferStalled);
    expect((error as Error).message).toMatch(/stopped answering: no response for 300 ms after uploading flame\.svg \(300\.0 KiB\)/);
    expect((error as Error).message).not.toMatch(/cannot reach/);
  });

  it("a file that changes after it was hashed is not sent as something else, nor retried: the error says it could not be read", async () => {
    const dir = tempDir("transfer-changed");
    try {
      const file = path.join(dir.dir, "profile.bin");
      await writeFile(file, bytesOf(300 * 1024, 10));
      stub.handler = async (request, response, body) => {
        if (request.method === "POST") {
          // Between the digest and the upload, something (a process the gate left running) rewrites it.
          await writeFile(file, bytesOf(100 * 1024, 11));
          return json(response, 200, { status: "upload", method: "PUT", url: `/v1/loops/${LOOP}/artifacts/${"c".repeat(64)}` });
        }
        await body().catch(() => undefined);
        json(response, 201, stored("c".repeat(64), 1));
      };
      const client = new Client(stub.url, { retryForMs: 5_000 });
      const error = await client.uploadArtifactFile(LOOP, file, "profile.bin", "application/octet-stream").catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(BodySourceError);
      expect((error as Error).message).toMatch(/could not read what was being sent while uploading profile\.bin \(300\.0 KiB\)/);
      expect(stub.seen.filter((line) => line.startsWith("PUT")).length).toBeLessThanOrEqual(1);
    } finally {
      dir.cleanup();
    }
  });

  it("a stall is retried while the retries last; the request that then succeeds is answered", async () => {
    let answered = 0;
    stub.handler = (_request, response) => {
      // The first attempt is never answered; the second is.
      if (answered++ === 0) return;
      json(response, 404, { error: { code: "not_found", message: "no such loop" } });
    };
    const client = new Client(stub.url, { retryForMs: 5_000, idleTimeoutMs: 300 });
    await expect(client.getLoop(LOOP)).rejects.toMatchObject({ status: 404, code: "not_found" });
    expect(stub.seen).toHaveLength(2);
  });
});

describe("Client uploads of files", () => {
  const stub = stubServer();

  it("a file larger than the buffers it is read into arrives byte-exact, its progress heard to the end", async () => {
    // 5.5 MiB: read 1 MiB at a time into three buffers used in turn, so each is refilled while the upload goes on.
    const bytes = bytesOf(5.5 * 1024 * 1024, 12);
    let received: Buffer | null = null;
    stub.handler = async (request, response, body) => {
      if (request.method === "POST") return json(response, 200, { status: "upload", method: "PUT", url: `/v1/loops/${LOOP}/artifacts/${sha256(bytes)}` });
      received = await body();
      json(response, 201, stored(sha256(bytes), bytes.length));
    };
    const dir = tempDir("transfer-large");
    const heard: number[] = [];
    try {
      const file = path.join(dir.dir, "profile.bin");
      await writeFile(file, bytes);
      await new Client(stub.url, { retryForMs: 0 }).uploadArtifactFile(LOOP, file, "profile.bin", "application/octet-stream", (sent) => heard.push(sent));
    } finally {
      dir.cleanup();
    }
    expect(received && sha256(received)).toBe(sha256(bytes));
    expect(heard.at(-1)).toBe(bytes.length);
  });

  it("a file replaced by another of the same size after it was hashed is not sent: the error says it could not be read", async () => {
    const dir = tempDir("transfer-replaced");
    try {
      const file = path.join(dir.dir, "profile.bin");
      await writeFile(file, bytesOf(300 * 1024, 13));
      stub.handler = async (request, response, body) => {
        if (request.method === "POST") {
          // As an editor or a build saves a file: other bytes written aside, then renamed over it.
          await writeFile(`${file}.new`, bytesOf(300 * 1024, 14));
          renameSync(`${file}.new`, file);
          return json(response, 200, { status: "upload", method: "PUT", url: `/v1/loops/${LOOP}/artifacts/${"d".repeat(64)}` });
        }
        await body().catch(() => undefined);
        json(response, 201, stored("d".repeat(64), 1));
      };
      const error = await new Client(stub.url, { retryForMs: 5_000 })
        .uploadArtifactFile(LOOP, file, "profile.bin", "application/octet-stream")
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(BodySourceError);
      expect((error as Error).message).toMatch(/profile\.bin changed since it was hashed/);
      expect(stub.seen.filter((line) => line.startsWith("PUT"))).toEqual([]);
    } finally {
      dir.cleanup();
    }
  });
});

describe("Client multipart uploads", () => {
  const stub = stubServer();
  const records = tempDir("upload-records");
  afterAll(() => records.cleanup());

  /** A coordinator's multipart routes for `bytes` in parts of `partSize`; `fail` decides per request whether to answer an error. */
  function multipart(
    bytes: Uint8Array,
    partSize: number,
    fail: (what: string, attempt: number) => { status: number; code: string } | "slow-then-503" | null,
    presigned = false,
    /**
     * As the coordinator does since issue 30: `complete` answers 202 `verifying`, and the check's outcome is
     * the next intent's answer (`fails`: as if storage's object were not the bytes sent, deleted by the check).
     */
    checkAfter: "passes" | "fails" | null = null,
  ) {
    const sha = sha256(bytes);
    let checked: "exists" | "deleted" | null = null;
    const base = `/v1/loops/${LOOP}/artifacts/${sha}/uploads/up-1`;
    const parts = Math.ceil(bytes.length / partSize);
    const attempts = new Map<string, number>();
    const received = new Map<number, Buffer>();
    let uploads = 0;
    stub.handler = async (request, response, body) => {
      const url = (request.url ?? "").replace(/\?.*$/, "");
      const what = request.method === "POST" && url.endsWith("/artifacts") ? "intent" : `${request.method} ${url.replace(base, "") || "/"}`;
      const attempt = (attempts.get(what) ?? 0) + 1;
      attempts.set(what, attempt);
      const data = await body();
      const failure = fail(what, attempt);
      if (failure === "slow-then-503") {
        await sleep(1_500);
        return json(response, 503, { error: { code: "unavailable", message: "try again" } });
      }
      if (failure) return json(response, failure.status, { error: { code: failure.code, message: failure.code } });
      if (what === "intent" && checked) {
        const intent = JSON.parse(data.toString()) as { after_upload?: true };
        expect(intent.after_upload).toBeUndefined();
        if (checked === "exists") return json(response, 200, { status: "exists" });
      }
      if (what === "intent") {
        uploads++;
        return json(response, 200, {
          status: "multipart",
          upload_id: `up-${uploads}`,
          part_size: partSize,
          // Presigned: whole URLs (to this same server), answered with the ETag header as storage answers.
          part_urls: Array.from({ length: parts }, (_, index) => `${presigned ? stub.url : ""}${base}/parts/${index + 1}`),
          complete_url: `${base}/complete`,
          abort_url: base,
        });
      }
      const part = /\/parts\/(\d+)$/.exec(url);
      if (part) {
        received.set(Number(part[1]), data);
        if (presigned) {
          response.writeHead(200, { ETag: `etag-${part[1]}` }).end();
          return;
        }
        return json(response, 200, { part_number: Number(part[1]), etag: `etag-${part[1]}` });
      }
      if (what === "POST /complete") {
        const listed = (JSON.parse(data.toString()) as { parts: { part_number: number; etag: string }[] }).parts;
        expect(listed).toEqual(Array.from({ length: parts }, (_, index) => ({ part_number: index + 1, etag: `etag-${index + 1}` })));
        const whole = Buffer.concat(listed.map((entry) => received.get(entry.part_number) ?? Buffer.alloc(0)));
        if (checkAfter) {
          checked = sha256(whole) === sha && checkAfter === "passes" ? "exists" : "deleted";
          return json(response, 202, { status: "verifying", artifact: { sha256: sha, size: bytes.length } });
        }
        if (sha256(whole) !== sha) return json(response, 400, { error: { code: "digest_mismatch", message: "no" } });
        return json(response, 201, stored(sha, bytes.length));
      }
      if (what === "DELETE /") return json(response, 200, { status: "aborted" });
      json(response, 404, { error: { code: "not_found", message: what } });
    };
    return { attempts, base };
  }

  it("a `complete` answered `verifying` ends the upload; awaitVerified waits for the check with an intent, and a failed check is 400 digest_mismatch", async () => {
    const bytes = bytesOf(300 * 1024, 9);
    const { attempts } = multipart(bytes, 100 * 1024, () => null, false, "passes");
    const client = new Client(stub.url, { retryForMs: 0 });
    const ref = await client.uploadArtifact(LOOP, "profile.bin", bytes, "application/octet-stream");
    expect(Object.fromEntries(attempts)).toEqual({ intent: 1, "PUT /parts/1": 1, "PUT /parts/2": 1, "PUT /parts/3": 1, "POST /complete": 1 });
    await client.awaitVerified(LOOP, ref);
    expect(attempts.get("intent")).toBe(2);
    // Heard once: a second wait asks nothing.
    await client.awaitVerified(LOOP, ref);
    expect(attempts.get("intent")).toBe(2);

    // Storage's object is not the bytes sent: the check deletes it, the intent offers the upload again,
    // and the wait reports it as the file's 400 digest_mismatch (an artifact error, as a refused upload is).
    const other = bytesOf(300 * 1024, 10);
    const failed = multipart(other, 100 * 1024, () => null, false, "fails");
    const swapped = await client.uploadArtifact(LOOP, "profile.bin", other, "application/octet-stream");
    await expect(client.awaitVerified(LOOP, swapped)).rejects.toMatchObject({ status: 400, code: "digest_mismatch" });
    // The multipart upload that second intent began is aborted, not left open with no parts.
    expect(failed.attempts.get("intent")).toBe(2);
    expect(failed.attempts.get("DELETE /")).toBe(1);
  });

  it("a part that fails is sent again alone: the others once each, and the upload completes", async () => {
    const bytes = bytesOf(300 * 1024, 4);
    const { attempts } = multipart(bytes, 100 * 1024, (what, attempt) =>
      what === "PUT /parts/2" && attempt === 1 ? { status: 500, code: "storage_error" } : null,
    );
    const client = new Client(stub.url, { retryForMs: 5_000 });
    await client.uploadArtifact(LOOP, "profile.bin", bytes, "application/octet-stream");
    expect(Object.fromEntries(attempts)).toEqual({ intent: 1, "PUT /parts/1": 1, "PUT /parts/2": 2, "PUT /parts/3": 1, "POST /complete": 1 });
  });

  it("parts to presigned storage go several at a time, never more than PARALLEL_PARTS, and complete byte-exact", async () => {
    const bytes = bytesOf(8 * 64 * 1024 + 1000, 15);
    const sha = sha256(bytes);
    const base = `/v1/loops/${LOOP}/artifacts/${sha}/uploads/up-1`;
    const received = new Map<number, Buffer>();
    let inFlight = 0;
    let most = 0;
    const waiters: (() => void)[] = [];
    stub.handler = async (request, response, body) => {
      const url = (request.url ?? "").replace(/\?.*$/, "");
      if (url.endsWith("/artifacts")) {
        await body();
        return json(response, 200, {
          status: "multipart",
          upload_id: "up-1",
          part_size: 64 * 1024,
          part_urls: Array.from({ length: 9 }, (_, index) => `${stub.url}${base}/parts/${index + 1}`),
          complete_url: `${base}/complete`,
          abort_url: base,
        });
      }
      const part = /\/parts\/(\d+)$/.exec(url);
      if (part) {
        inFlight++;
        most = Math.max(most, inFlight);
        // Each part is held until PARALLEL_PARTS are in flight (or, for the last ones, a moment has passed):
        // a client sending one part after another would show one at a time.
        if (inFlight >= PARALLEL_PARTS) for (const wake of waiters.splice(0)) wake();
        else await Promise.race([new Promise<void>((resolve) => waiters.push(resolve)), sleep(300)]);
        received.set(Number(part[1]), await body());
        inFlight--;
        response.writeHead(200, { ETag: `etag-${part[1]}` }).end();
        return;
      }
      const listed = (JSON.parse((await body()).toString()) as { parts: { part_number: number }[] }).parts;
      const whole = Buffer.concat(listed.map((entry) => received.get(entry.part_number) ?? Buffer.alloc(0)));
      if (sha256(whole) !== sha) return json(response, 400, { error: { code: "digest_mismatch", message: "no" } });
      json(response, 201, stored(sha, bytes.length));
    };
    const heard: number[] = [];
    const dir = tempDir("transfer-parallel");
    try {
      const file = path.join(dir.dir, "profile.bin");
      await writeFile(file, bytes);
      await new Client(stub.url, { retryForMs: 0 }).uploadArtifactFile(LOOP, file, "profile.bin", "application/octet-stream", (sent) => heard.push(sent));
    } finally {
      dir.cleanup();
    }
    expect(most).toBe(PARALLEL_PARTS);
    expect(received.size).toBe(9);
    // Progress of parts at once, heard as one total that never goes back, to the whole file.
    expect(heard.every((sent, index) => index === 0 || sent > (heard[index - 1] ?? 0))).toBe(true);
    expect(heard.at(-1)).toBe(bytes.length);
  });

  it("a part whose sending outlasts the retries' budget and then fails is still retried: the budget counts from the failure", async () => {
    const bytes = bytesOf(200 * 1024, 5);
    const { attempts } = multipart(bytes, 100 * 1024, (what, attempt) => (what === "PUT /parts/1" && attempt === 1 ? "slow-then-503" : null));
    const client = new Client(stub.url, { retryForMs: 1_000 });
    await client.uploadArtifact(LOOP, "profile.bin", bytes, "application/octet-stream");
    expect(attempts.get("PUT /parts/1")).toBe(2);
    expect(attempts.get("DELETE /")).toBeUndefined();
  });

  it("an upload the client gives up on is aborted (DELETE), and its record removed", async () => {
    const bytes = bytesOf(300 * 1024, 6);
    const { attempts } = multipart(bytes, 100 * 1024, (what) => (what === "POST /complete" ? { status: 400, code: "invalid_parts" } : null));
    const client = new Client(stub.url, { retryForMs: 0 });
    const dir = path.join(records.dir, "gives-up");
    await expect(uploadFile(client, bytes, dir)).rejects.toMatchObject({ status: 400, code: "invalid_parts" });
    expect(attempts.get("DELETE /")).toBe(1);
    expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([]);
  });

  it("an upload a process left unfinished (its abort failed too) is resumed by the next upload of the same bytes: only the missing parts are sent", async () => {
    const bytes = bytesOf(400 * 1024, 7);
    const dir = path.join(records.dir, "resume");
    // The first runner: part 3 fails for good, and so does telling the coordinator to abort.
    let first = true;
    const { attempts } = multipart(bytes, 100 * 1024, (what) =>
      first && (what === "PUT /parts/3" || what === "DELETE /") ? { status: 503, code: "unavailable" } : null,
    );
    await expect(uploadFile(new Client(stub.url, { retryForMs: 0 }), bytes, dir)).rejects.toMatchObject({ status: 503 });
    const [left] = readdirSync(dir);
    const record = JSON.parse(readFileSync(path.join(dir, left ?? ""), "utf8")) as { upload_id: string; parts: { part_number: number }[] };
    expect(record.parts.map((part) => part.part_number)).toEqual([1, 2]);

    // The next runner (another client) resumes it: no intent, parts 3 and 4 only, then complete.
    first = false;
    attempts.clear();
    await uploadFile(new Client(stub.url, { retryForMs: 0 }), bytes, dir);
    expect(Object.fromEntries(attempts)).toEqual({ "PUT /parts/3": 1, "PUT /parts/4": 1, "POST /complete": 1 });
    expect(readdirSync(dir)).toEqual([]);
  });

  it("parts to presigned storage go four at a time; an upload left unfinished keeps the parts on their way, and is resumed with the missing ones only", async () => {
    const bytes = bytesOf(600 * 1024, 7);
    const dir = path.join(records.dir, "resume-presigned");
    // The first runner: part 3 fails for good, and so does telling the coordinator to abort. Parts 1 to 4
    // went at once (PARALLEL_PARTS): those taken are recorded, and no part is started after the failure.
    let first = true;
    const { attempts } = multipart(
      bytes,
      100 * 1024,
      (what) => (first && (what === "PUT /parts/3" || what === "DELETE /") ? { status: 503, code: "unavailable" } : null),
      true,
    );
    await expect(uploadFile(new Client(stub.url, { retryForMs: 0 }), bytes, dir)).rejects.toMatchObject({ status: 503 });
    const [left] = readdirSync(dir);
    const record = JSON.parse(readFileSync(path.join(dir, left ?? ""), "utf8")) as { upload_id: string; parts: { part_number: number }[] };
    expect(record.parts.map((part) => part.part_number)).toEqual([1, 2, 4]);
    expect(attempts.get("PUT /parts/5")).toBeUndefined();

    // The next runner (another client) resumes it: no intent, parts 3, 5 and 6 only, then complete.
    first = false;
    attempts.clear();
    await uploadFile(new Client(stub.url, { retryForMs: 0 }), bytes, dir);
    expect(Object.fromEntries(attempts)).toEqual({ "PUT /parts/3": 1, "PUT /parts/5": 1, "PUT /parts/6": 1, "POST /complete": 1 });
    expect(readdirSync(dir)).toEqual([]);
  });

  /**
   * A first runner whose part 2 and abort fail for good, leaving its upload recorded in `dir`; then the
   * next runner's upload of the same bytes, answered by `resumed` (what the stub does with the recorded
   * upload). Answers the requests the second upload made, by kind.
   */
  async function recordedThenResumed(bytes: Uint8Array, dir: string, resumed: (what: string, attempt: number) => { status: number; code: string } | null) {
    let first = true;
    const { attempts } = multipart(bytes, 100 * 1024, (what, attempt) => {
      if (first) return what === "PUT /parts/2" || what === "DELETE /" ? { status: 503, code: "unavailable" } : null;
      return resumed(what, attempt);
    });
    await expect(uploadFile(new Client(stub.url, { retryForMs: 0 }), bytes, dir)).rejects.toMatchObject({ status: 503 });
    first = false;
    attempts.clear();
    await uploadFile(new Client(stub.url, { retryForMs: 0 }), bytes, dir);
    return Object.fromEntries(attempts);
  }

  it("a recorded upload the coordinator no longer has (404 upload_not_found) is started afresh", async () => {
    const bytes = bytesOf(300 * 1024, 8);
    const dir = path.join(records.dir, "gone");
    // The recorded upload is gone: its next part is refused, once; the fresh upload goes through.
    const attempts = await recordedThenResumed(bytes, dir, (what, attempt) =>
      what === "PUT /parts/2" && attempt === 1 ? { status: 404, code: "upload_not_found" } : null,
    );
    expect(attempts).toEqual({
      "PUT /parts/2": 2,
      "DELETE /": 1,
      intent: 1,
      "PUT /parts/1": 1,
      "PUT /parts/3": 1,
      "POST /complete": 1,
    });
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a recorded upload whose parts do not add up to the file (400 size_mismatch on complete) is started afresh", async () => {
    const bytes = bytesOf(300 * 1024, 10);
    const dir = path.join(records.dir, "short");
    // What the recorded parts make is not the file: the coordinator deletes it; the fresh upload goes through.
    const attempts = await recordedThenResumed(bytes, dir, (what, attempt) =>
      what === "POST /complete" && attempt === 1 ? { status: 400, code: "size_mismatch" } : null,
    );
    expect(attempts).toEqual({
      "PUT /parts/2": 2,
      "PUT /parts/3": 2,
      "POST /complete": 2,
      "DELETE /": 1,
      intent: 1,
      "PUT /parts/1": 1,
    });
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a planted record naming another coordinator route is never followed: the token never goes there, the upload starts afresh", async () => {
    const bytes = bytesOf(300 * 1024, 9);
    const dir = path.join(records.dir, "planted");
    const { attempts, base } = multipart(bytes, 100 * 1024, () => null);
    mkdirSync(dir, { recursive: true });
    // What an agent could write where records live: this loop and digest, but its own choice of routes.
    const planted = {
      version: 1,
      server: stub.url,
      loop_id: LOOP,
      sha256: sha256(bytes),
      size: bytes.length,
      name: "profile.bin",
      upload_id: "up-1",
      part_size: 100 * 1024,
      part_urls: ["/v1/tokens", `${base}/parts/2`],
      complete_url: "/v1/teams",
      abort_url: "/v1/tokens/tok_victim",
      parts: [],
      pid: 999_999_999,
      updated_at: "2000-01-01T00:00:00.000Z",
    };
    writeFileSync(path.join(dir, "planted.json"), JSON.stringify(planted));
    await uploadFile(new Client(stub.url, { retryForMs: 0, token: "secret" }), bytes, dir);
    expect(stub.seen.filter((line) => /\/v1\/(tokens|teams)/.test(line))).toEqual([]);
    expect(Object.fromEntries(attempts)).toEqual({ intent: 1, "PUT /parts/1": 1, "PUT /parts/2": 1, "PUT /parts/3": 1, "POST /complete": 1 });
    expect(readdirSync(dir)).toEqual([]);
  });

  async function uploadFile(client: Client, bytes: Uint8Array, dir: string) {
    const file = path.join(records.dir, `${sha256(bytes)}.bin`);
    await writeFile(file, bytes);
    return client.uploadArtifactFile(LOOP, file, "profile.bin", "application/octet-stream", undefined, dir);
  }
});
