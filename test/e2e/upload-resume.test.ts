import { createHash, randomBytes } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client } from "../../runner/src/coordinator/client.js";
import { TEST_OWNER_TOKEN, api, makeRepo, recordedLoopId, runCli, sharedCoordinator } from "../support/cli.js";

// A multipart upload resumed against the real coordinator (binding mode, DESIGN §10): a runner that lost
// the coordinator after two of three parts (and could not abort either) leaves its record; the next
// upload of the same bytes sends only the third part and completes with the ETags the first recorded.
// The coordinator verifies the whole object on complete, so the resumed artifact is byte-exact.

const MiB = 1024 * 1024;
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

async function bodyOf(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** A proxy on 127.0.0.1 in front of the coordinator that logs each request and answers 503 for those `refuse` picks. */
function proxyTo(target: () => string) {
  const state = { url: "", seen: [] as string[], refuse: (_line: string) => false };
  let server: Server;
  beforeAll(async () => {
    server = createServer((request, response) => {
      void (async () => {
        const line = `${request.method} ${(request.url ?? "").replace(/\?.*$/, "")}`;
        state.seen.push(line);
        const body = await bodyOf(request);
        if (state.refuse(line)) {
          response.writeHead(503, { "Content-Type": "application/json" });
          response.end(JSON.stringify({ error: { code: "unavailable", message: "the proxy lost the coordinator" } }));
          return;
        }
        const headers = Object.fromEntries(
          Object.entries(request.headers).flatMap(([name, value]) =>
            ["host", "connection", "content-length"].includes(name) || !value ? [] : [[name, String(value)]],
          ),
        );
        const answer = await fetch(`${target()}${request.url ?? "/"}`, { method: request.method ?? "GET", headers, ...(body.length > 0 ? { body } : {}) });
        response.writeHead(answer.status, { "Content-Type": answer.headers.get("content-type") ?? "application/octet-stream" });
        response.end(Buffer.from(await answer.arrayBuffer()));
      })().catch((error: unknown) => response.destroy(error as Error));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    state.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return state;
}

describe("multipart upload resumed", () => {
  // Files over 5 MiB go up in 5 MiB parts: a 12 MiB file in three.
  const { tmp, coordinator } = sharedCoordinator("upload-resume", { LOOPWARDEN_ARTIFACT_PUT_MAX_BYTES: "5MiB", LOOPWARDEN_ARTIFACT_PART_BYTES: "5MiB" });
  const proxy = proxyTo(() => coordinator.url);

  it("sends only the parts the first runner did not, completes with the recorded ETags, and the artifact is byte-exact", async () => {
    // A loop to upload to: one whose check passes at once.
    const repo = makeRepo(path.join(tmp.dir, "repo"), { "README.md": "resume\n" });
    const created = await runCli(["--server", coordinator.url, "run", "--check", "true", "--exec", "true"], { cwd: repo });
    expect(created.code, created.stderr).toBe(10);
    const loopId = recordedLoopId(repo);

    const bytes = randomBytes(12 * MiB + 3);
    const file = path.join(tmp.dir, "big.bin");
    writeFileSync(file, bytes);
    const records = path.join(tmp.dir, "uploads");

    // The first runner: the third part and the abort never reach the coordinator.
    proxy.refuse = (line) => line.endsWith("/parts/3") || line.startsWith("DELETE ");
    const first = new Client(proxy.url, { token: TEST_OWNER_TOKEN, retryForMs: 0 });
    await expect(first.uploadArtifactFile(loopId, file, "big.bin", "application/octet-stream", undefined, records)).rejects.toMatchObject({ status: 503 });
    const [left] = readdirSync(records);
    const record = JSON.parse(readFileSync(path.join(records, left ?? ""), "utf8")) as { parts: { part_number: number }[] };
    expect(record.parts.map((part) => part.part_number)).toEqual([1, 2]);

    // The next runner, through the same (now healthy) way in: no intent, part 3, complete.
    proxy.refuse = () => false;
    proxy.seen.length = 0;
    const next = new Client(proxy.url, { token: TEST_OWNER_TOKEN, retryForMs: 5_000 });
    const ref = await next.uploadArtifactFile(loopId, file, "big.bin", "application/octet-stream", undefined, records);
    expect(ref).toMatchObject({ sha256: sha256(bytes), size: bytes.length });
    expect(proxy.seen.map((line) => line.replace(/^(\w+) .*\/(parts\/\d+|complete)$/, "$1 $2"))).toEqual(["PUT parts/3", "POST complete"]);
    expect(readdirSync(records)).toEqual([]);

    const downloaded = new Uint8Array(await (await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${ref.sha256}`)).arrayBuffer());
    expect(sha256(downloaded)).toBe(sha256(bytes));
  });
});
