import { env } from "cloudflare:workers";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { drizzle } from "drizzle-orm/d1";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import { ArtifactIntentResponse, ArtifactList, ArtifactStored, ArtifactVerifying, UploadedPart } from "#shared/wire/api.js";
import { app } from "../../worker/src/app.js";
import { MAX_PUT_BYTES, MIN_PART_BYTES, PART_SIZE, artifactLimits, parseByteSize } from "../../worker/src/artifacts/artifact-limits.js";
import { sanitizeName } from "../../worker/src/artifacts/artifact-names.js";
import { bindingStorage } from "../../worker/src/artifacts/artifact-storage-binding.js";
import { artifactKey, unverified } from "../../worker/src/artifacts/artifact-store.js";
import { recordArtifact } from "../../worker/src/artifacts/artifact-rows.js";
import { TEST_IDS, call, createLoop, postJson } from "./fixtures.js";

// Artifacts through the R2 binding (DESIGN §10): an intent answers `exists`, one PUT, or a multipart
// upload; the worker records a row only once R2 holds the object with its size and SHA-256, and serves
// it as a download that no browser renders as anything but plain text.

const [A] = TEST_IDS;
const MiB = 1024 * 1024;
const encode = (text: string) => new TextEncoder().encode(text);

// ---- requests and what they leave behind ----------------------------------------------------------

async function errorOf(response: Response): Promise<{ code: string; message: string }> {
  return ((await response.json()) as { error: { code: string; message: string } }).error;
}

async function intend(loopId: string, body: object): Promise<ArtifactIntentResponse> {
  const response = await postJson(`/v1/loops/${loopId}/artifacts`, body);
  expect(response.status, await response.clone().text()).toBe(200);
  return ArtifactIntentResponse.parse(await response.json());
}

function put(path: string, body: BodyInit, headers: Record<string, string> = {}): Promise<Response> {
  return call(path, { method: "PUT", headers, body });
}

/** A request (with the owner's token) to a worker whose deployment sets `vars` otherwise (a lower quota, smaller parts). */
async function callWith(vars: Record<string, string>, path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${env.OWNER_TOKEN}`);
  // Handed to the app directly, a request has no Content-Length unless it is given one.
  if (init.body instanceof Uint8Array && !headers.has("content-length")) headers.set("content-length", String(init.body.length));
  const ctx = createExecutionContext();
  const response = await app.fetch(new Request(`http://lw.test${path}`, { ...init, headers }), { ...env, ...vars }, ctx);
  await waitOnExecutionContext(ctx);
  return response;
}

/** The loop's running total of recorded bytes, and the sum of its rows' sizes: the two must agree. */
async function usageOf(loopId: string): Promise<{ total: number | null; sum: number }> {
  const total = await env.DB.prepare("SELECT bytes FROM loop_artifact_usage WHERE loop_id = ?").bind(loopId).first<{ bytes: number }>();
  const sum = await env.DB.prepare("SELECT coalesce(sum(size), 0) AS bytes FROM artifacts WHERE loop_id = ?").bind(loopId).first<{ bytes: number }>();
  return { total: total?.bytes ?? null, sum: sum?.bytes ?? 0 };
}

/** The ETag an artifact's row keeps (null: none). */
async function recordedEtag(loopId: string, sha256: string): Promise<string | null> {
  const row = await env.DB.prepare("SELECT etag FROM artifacts WHERE loop_id = ? AND sha256 = ?").bind(loopId, sha256).first<{ etag: string | null }>();
  return row?.etag ?? null;
}

/** The loop's D1 rows, as the routes record them. */
async function rowsOf(loopId: string): Promise<{ sha256: string; size: number; name: string; content_type: string }[]> {
  const { results } = await env.DB.prepare("SELECT sha256, size, name, content_type FROM artifacts WHERE loop_id = ? ORDER BY sha256").bind(loopId).all();
  return results as { sha256: string; size: number; name: string; content_type: string }[];
}

/** Records a filler artifact of `size` bytes (no object) and counts it in the loop's running total, as an upload would. */
async function fillQuota(loopId: string, size: number): Promise<void> {
  await env.DB.batch([
    env.DB.prepare(
      "INSERT INTO artifacts (loop_id, sha256, size, name, content_type, created_at) VALUES (?, ?, ?, 'filler.bin', 'application/octet-stream', ?)",
    ).bind(loopId, sha256Hex(`filler ${size}`), size, new Date().toISOString()),
    env.DB.prepare("INSERT INTO loop_artifact_usage (loop_id, bytes) VALUES (?, ?) ON CONFLICT (loop_id) DO UPDATE SET bytes = bytes + excluded.bytes").bind(
      loopId,
      size,
    ),
  ]);
}

/** The keys of the loop's objects in R2. */
async function objectsOf(loopId: string): Promise<string[]> {
  return (await env.ARTIFACTS.list({ prefix: `loops/${loopId}/` })).objects.map((object) => object.key).sort();
}

// ---- a file over 95 MiB, never held whole in memory ------------------------------------------------

/** 96 MiB and a byte: two parts, the last of 32 MiB + 1. */
const BIG_SIZE = 96 * MiB + 1;
const PERIOD = 251;
/** Byte i of the big file is i % 251: a period that divides no part size, so a part out of place shows. */
const PATTERN = Uint8Array.from({ length: MiB + PERIOD }, (_, index) => index % PERIOD);

/** Bytes [start, end) of the big file, in 1 MiB chunks. */
function bigFile(start = 0, end = BIG_SIZE): ReadableStream<Uint8Array> {
  let offset = start;
  return new ReadableStream({
    pull(controller) {
      if (offset >= end) return controller.close();
      const length = Math.min(MiB, end - offset);
      controller.enqueue(PATTERN.slice(offset % PERIOD, (offset % PERIOD) + length));
      offset += length;
    },
  });
}

/** A stream as a request body with its length known, so it is sent with a Content-Length. */
function sized(stream: ReadableStream<Uint8Array>, length: number): ReadableStream<Uint8Array> {
  const fixed = new FixedLengthStream(length);
  void stream.pipeTo(fixed.writable).catch(() => undefined);
  return fixed.readable;
}

/**
 * A multipart upload of bytes [offset, offset + intent.size) of the big file, with the limits `vars`, up
 * to (not including) `complete`'s request: its URL and body.
 */
async function uploadParts(
  vars: Record<string, string>,
  loopId: string,
  intent: { sha256: string; size: number; content_type: string; name: string },
  offset = 0,
): Promise<{ completeUrl: string; body: string }> {
  const asked = await callWith(vars, `/v1/loops/${loopId}/artifacts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(intent),
  });
  const answer = ArtifactIntentResponse.parse(await asked.json());
  if (answer.status !== "multipart") throw new Error(`expected a multipart upload, got ${JSON.stringify(answer)}`);
  const parts: UploadedPart[] = [];
  for (const [index, url] of answer.part_urls.entries()) {
    const start = index * MIN_PART_BYTES;
    const end = Math.min(start + MIN_PART_BYTES, intent.size);
    const sent = await callWith(vars, url, {
      method: "PUT",
      headers: { "content-length": String(end - start) },
      body: sized(bigFile(offset + start, offset + end), end - start),
    });
    parts.push(UploadedPart.parse(await sent.json()));
  }
  return { completeUrl: answer.complete_url, body: JSON.stringify({ parts }) };
}

async function sha256Of(stream: ReadableStream<Uint8Array>): Promise<string> {
  const digest = new crypto.DigestStream("SHA-256");
  await stream.pipeTo(digest);
  return [...new Uint8Array(await digest.digest)].map((byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** Reads a download to the end, checking every byte against the big file; answers how many there were. */
async function expectBigFile(body: ReadableStream<Uint8Array>): Promise<number> {
  let offset = 0;
  for await (const chunk of body) {
    for (let index = 0; index < chunk.length; index++) {
      if (chunk[index] !== (offset + index) % PERIOD) throw new Error(`byte ${offset + index} is ${chunk[index]}, not ${(offset + index) % PERIOD}`);
    }
    offset += chunk.length;
  }
  return offset;
}

type Multipart = Extract<ArtifactIntentResponse, { status: "multipart" }>;

/** Sends the big file's bytes [start, end) as one part; answers what the part's PUT answered. */
async function putPart(url: string, start: number, end: number): Promise<UploadedPart> {
  const response = await put(url, sized(bigFile(start, end), end - start));
  expect(response.status, await response.clone().text()).toBe(200);
  return UploadedPart.parse(await response.json());
}

async function complete(upload: Multipart, parts: UploadedPart[]): Promise<Response> {
  return postJson(upload.complete_url, { parts });
}

let bigSha = "";

beforeAll(async () => {
  bigSha = await sha256Of(bigFile());
});

// ---- the tests -------------------------------------------------------------------------------------

describe("a small artifact: one PUT through the worker", () => {
  const log = encode("FAIL parse.nested\nexpected 3, got 4\n<script>alert(1)</script>\n");
  const sha = sha256Hex(log);

  it("is uploaded, recorded, listed, and downloaded byte-exact as an attachment that is never sniffed", async () => {
    const loop = await createLoop("artifact-small", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    const intent = await intend(loop.loop_id, { sha256: sha, size: log.length, content_type: "text/html", name: "unit.log" });
    expect(intent).toEqual({ status: "upload", method: "PUT", url: `${base}/${sha}?name=unit.log` });
    expect(await rowsOf(loop.loop_id)).toEqual([]);

    const stored = await put(intent.status === "upload" ? intent.url : "", log, { "content-type": "text/html" });
    expect(stored.status).toBe(201);
    const { artifact } = ArtifactStored.parse(await stored.json());
    expect(artifact).toEqual({ sha256: sha, size: log.length, name: "unit.log", content_type: "text/html", created_at: expect.any(String) });
    expect(await rowsOf(loop.loop_id)).toEqual([{ sha256: sha, size: log.length, name: "unit.log", content_type: "text/html" }]);

    const listed = await call(base);
    expect(listed.status).toBe(200);
    expect(ArtifactList.parse(await listed.json())).toEqual({ artifacts: [artifact], next_cursor: null });

    const got = await call(`${base}/${sha}`);
    expect(got.status).toBe(200);
    // Uploaded as HTML, served as bytes to save: the uploader's content type renders nothing.
    expect(got.headers.get("content-type")).toBe("application/octet-stream");
    expect(got.headers.get("content-disposition")).toBe('attachment; filename="unit.log"');
    expect(got.headers.get("x-content-type-options")).toBe("nosniff");
    expect(got.headers.get("content-length")).toBe(String(log.length));
    expect(new Uint8Array(await got.arrayBuffer())).toEqual(log);
  });

  it("serves explicit plain UTF-8 text inline, and nothing else", async () => {
    const loop = await createLoop("artifact-inline", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    const cases = [
      { type: "text/plain; charset=utf-8", served: "text/plain; charset=utf-8", disposition: "inline" },
      { type: "Text/Plain;Charset=UTF-8", served: "text/plain; charset=utf-8", disposition: "inline" },
      { type: "text/plain", served: "application/octet-stream", disposition: "attachment" },
      { type: "image/svg+xml", served: "application/octet-stream", disposition: "attachment" },
    ];
    for (const [index, { type, served, disposition }] of cases.entries()) {
      const bytes = encode(`log ${index}\n`);
      const sha256 = sha256Hex(bytes);
      expect((await put(`${base}/${sha256}?name=log-${index}.txt`, bytes, { "content-type": type })).status).toBe(201);
      const got = await call(`${base}/${sha256}`);
      expect([got.headers.get("content-type"), got.headers.get("content-disposition")], type).toEqual([served, `${disposition}; filename="log-${index}.txt"`]);
      expect(got.headers.get("x-content-type-options")).toBe("nosniff");
      expect(new Uint8Array(await got.arrayBuffer())).toEqual(bytes);
    }
  });

  it("answers a second intent for the same bytes `exists`, and a second PUT of them keeps the first record", async () => {
    const loop = await createLoop("artifact-exists", [A]);
    const intent = { sha256: sha, size: log.length, content_type: "text/plain", name: "first.log" };
    const first = await intend(loop.loop_id, intent);
    expect((await put(first.status === "upload" ? first.url : "", log)).status).toBe(201);
    expect(await intend(loop.loop_id, { ...intent, name: "second.log" })).toEqual({ status: "exists" });
    const again = await put(`/v1/loops/${loop.loop_id}/artifacts/${sha}?name=second.log`, log);
    expect(again.status).toBe(200);
    expect(ArtifactStored.parse(await again.json()).artifact.name).toBe("first.log");
    expect(await rowsOf(loop.loop_id)).toHaveLength(1);
  });

  it("refuses bytes that do not hash to their sha256 with 400 digest_mismatch: no row, no object", async () => {
    const loop = await createLoop("artifact-put-mismatch", [A]);
    const tampered = encode("FAIL parse.nested\nexpected 3, got 5\n<script>alert(1)</script>\n");
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const response = await put(`/v1/loops/${loop.loop_id}/artifacts/${sha}`, tampered);
      expect(response.status).toBe(400);
      expect(await errorOf(response)).toMatchObject({ code: "digest_mismatch" });
    } finally {
      warn.mockRestore();
    }
    expect(await rowsOf(loop.loop_id)).toEqual([]);
    expect(await objectsOf(loop.loop_id)).toEqual([]);
    expect((await call(`/v1/loops/${loop.loop_id}/artifacts/${sha}`)).status).toBe(404);
  });

  it("refuses a body shorter than its Content-Length with 400 length_mismatch (not a digest or storage error): nothing stored", async () => {
    const loop = await createLoop("artifact-short", [A]);
    const response = await put(`/v1/loops/${loop.loop_id}/artifacts/${sha}`, new TextDecoder().decode(log.subarray(0, 10)), {
      "content-length": String(log.length),
    });
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({ code: "length_mismatch", message: expect.stringContaining(`${log.length}`) });
    expect(await rowsOf(loop.loop_id)).toEqual([]);
    expect(await objectsOf(loop.loop_id)).toEqual([]);
  });
});

describe("names", () => {
  const sha = sha256Hex("names");

  it.each([
    ["unit.log", "unit.log"],
    ["../../etc/passwd", "passwd"],
    ["C:\\Users\\me\\build output.txt", "build_output.txt"],
    ['a"b;c\r\nd<e>.html', "a_b_c__d_e_.html"],
    ["..", `${sha.slice(0, 12)}.bin`],
    [".env", "env"],
    ["-rf", "rf"],
    ["日本語", `${sha.slice(0, 12)}.bin`],
    ["résumé.pdf", "r_sum_.pdf"],
    [undefined, `${sha.slice(0, 12)}.bin`],
    [`${"x".repeat(150)}.log`, `${"x".repeat(96)}.log`],
  ])("%j → %j", (raw, expected) => {
    expect(sanitizeName(raw, sha)).toBe(expected);
  });

  it("are sanitised in the intent's URL, again from the PUT's query, and served as the attachment's file name", async () => {
    const loop = await createLoop("artifact-names", [A]);
    const bytes = encode("profile\n");
    const sha256 = sha256Hex(bytes);
    const intent = await intend(loop.loop_id, { sha256, size: bytes.length, content_type: "text/plain", name: '../secret dir/"prof ile".svg' });
    expect(intent).toMatchObject({ url: `/v1/loops/${loop.loop_id}/artifacts/${sha256}?name=_prof_ile_.svg` });
    // A client that skips the intent's URL gets the same treatment.
    const stored = await put(`/v1/loops/${loop.loop_id}/artifacts/${sha256}?name=${encodeURIComponent("/tmp/x\u0000y\nz.svg")}`, bytes);
    expect(ArtifactStored.parse(await stored.json()).artifact.name).toBe("x_y_z.svg");
    const got = await call(`/v1/loops/${loop.loop_id}/artifacts/${sha256}`);
    expect(got.headers.get("content-disposition")).toBe('attachment; filename="x_y_z.svg"');
    await got.arrayBuffer();
  });
});

describe("limits", () => {
  const limits = artifactLimits(env);

  it("reads wrangler.toml's byte sizes", () => {
    expect(limits).toEqual({ maxBytes: 5 * 1024 * MiB, quotaBytes: 20 * 1024 * MiB });
    expect([parseByteSize("5368709120"), parseByteSize("95 MiB"), parseByteSize("5GB"), parseByteSize("-1"), parseByteSize("1.5GiB")]).toEqual([
      5368709120,
      95 * MiB,
      null,
      null,
      null,
    ]);
    expect(() => artifactLimits({ ARTIFACT_MAX_BYTES: "lots" })).toThrow(/ARTIFACT_MAX_BYTES = "lots" is not a byte size/);
  });

  it("refuses an artifact over ARTIFACT_MAX_BYTES with 413 before anything is stored", async () => {
    const loop = await createLoop("artifact-too-large", [A]);
    const response = await postJson(`/v1/loops/${loop.loop_id}/artifacts`, {
      sha256: sha256Hex("huge"),
      size: limits.maxBytes + 1,
      content_type: "application/zip",
    });
    expect(response.status).toBe(413);
    expect(await errorOf(response)).toMatchObject({ code: "artifact_too_large" });
    // The same file at the limit would be taken (as a multipart upload, aborted here).
    const atLimit = await intend(loop.loop_id, { sha256: sha256Hex("huge"), size: limits.maxBytes, content_type: "application/zip" });
    expect(atLimit).toMatchObject({ status: "multipart", part_size: PART_SIZE });
    expect(atLimit.status === "multipart" && atLimit.part_urls).toHaveLength(Math.ceil(limits.maxBytes / PART_SIZE));
    expect((await call(atLimit.status === "multipart" ? atLimit.abort_url : "", { method: "DELETE" })).status).toBe(200);
    expect(await objectsOf(loop.loop_id)).toEqual([]);
  });

  it("refuses an upload that would take the loop past LOOP_ARTIFACT_QUOTA_BYTES with 507 quota_exceeded; a recorded artifact still `exists`", async () => {
    const loop = await createLoop("artifact-quota", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    const small = encode("0123456789");
    const smallSha = sha256Hex(small);
    expect((await put(`${base}/${smallSha}`, small)).status).toBe(201);
    // As if the loop had stored all but 10 bytes of its quota already: a row, and the running total that counts it.
    await fillQuota(loop.loop_id, limits.quotaBytes - 20);

    const eleven = encode("01234567890");
    const refused = await postJson(base, { sha256: sha256Hex(eleven), size: eleven.length, content_type: "text/plain" });
    expect(refused.status).toBe(507);
    expect(await errorOf(refused)).toMatchObject({ code: "quota_exceeded" });
    // A PUT without the intent is held to the same quota, before a byte is stored.
    const direct = await put(`${base}/${sha256Hex(eleven)}`, eleven);
    expect(direct.status).toBe(507);
    expect(await errorOf(direct)).toMatchObject({ code: "quota_exceeded" });
    expect(await objectsOf(loop.loop_id)).toEqual([artifactKey(loop.loop_id, smallSha)]);

    expect(await intend(loop.loop_id, { sha256: sha256Hex("0123456789"), size: 10, content_type: "text/plain" })).toEqual({ status: "exists" });
    const ten = encode("abcdefghij");
    expect(await intend(loop.loop_id, { sha256: sha256Hex(ten), size: ten.length, content_type: "text/plain" })).toMatchObject({ status: "upload" });
  });
});

/** Moving 96 MiB through the worker into local R2 and back takes a few seconds. */
const BIG_TIMEOUT_MS = 60_000;

describe("a large artifact: a multipart upload through the worker", () => {
  it(
    `goes up in ${PART_SIZE / MiB} MiB parts, a part sent again replaces the first, and comes back byte-exact`,
    async () => {
      const loop = await createLoop("artifact-big", [A]);
      const base = `/v1/loops/${loop.loop_id}/artifacts`;
      expect(BIG_SIZE).toBeGreaterThan(MAX_PUT_BYTES);
      const upload = await intend(loop.loop_id, { sha256: bigSha, size: BIG_SIZE, content_type: "application/x-git-bundle", name: "candidate-1.bundle" });
      if (upload.status !== "multipart") throw new Error(`expected a multipart upload, got ${JSON.stringify(upload)}`);
      const uploadPath = `${base}/${bigSha}/uploads/${encodeURIComponent(upload.upload_id)}`;
      expect(upload).toEqual({
        status: "multipart",
        upload_id: expect.any(String),
        part_size: PART_SIZE,
        part_urls: [`${uploadPath}/parts/1`, `${uploadPath}/parts/2`],
        complete_url: `${uploadPath}/complete`,
        abort_url: uploadPath,
      });
      const [url1 = "", url2 = ""] = upload.part_urls;

      // Part 2 first, and wrong (a byte); then both parts right. The re-sent part replaces the first.
      const stale = await putPart(url2, 0, 1);
      const part1 = await putPart(url1, 0, PART_SIZE);
      const part2 = await putPart(url2, PART_SIZE, BIG_SIZE);
      expect([part1.part_number, part2.part_number]).toEqual([1, 2]);
      expect(part2.etag).not.toBe(stale.etag);
      const staleComplete = await complete(upload, [part1, stale]);
      expect(staleComplete.status).toBe(400);
      expect(await errorOf(staleComplete)).toMatchObject({ code: "invalid_parts" });
      expect(await rowsOf(loop.loop_id)).toEqual([]);

      // Answered once storage holds the object with its size; its digest is checked after the answer
      // (issue 30), and an intent (without `after_upload`) waits for that check.
      const completed = await complete(upload, [part1, part2]);
      expect(completed.status, await completed.clone().text()).toBe(202);
      expect(ArtifactVerifying.parse(await completed.json())).toEqual({ status: "verifying", artifact: { sha256: bigSha, size: BIG_SIZE } });
      expect(await intend(loop.loop_id, { sha256: bigSha, size: BIG_SIZE, content_type: "application/x-git-bundle" })).toEqual({ status: "exists" });
      expect(await rowsOf(loop.loop_id)).toHaveLength(1);
      const [artifact] = ArtifactList.parse(await (await call(base)).json()).artifacts;
      expect(artifact).toMatchObject({ sha256: bigSha, size: BIG_SIZE, name: "candidate-1.bundle", content_type: "application/x-git-bundle" });

      const got = await call(`${base}/${bigSha}`);
      expect(got.status).toBe(200);
      expect(got.headers.get("content-type")).toBe("application/octet-stream");
      expect(got.headers.get("content-disposition")).toBe('attachment; filename="candidate-1.bundle"');
      expect(got.headers.get("x-content-type-options")).toBe("nosniff");
      expect(await expectBigFile(got.body ?? new ReadableStream())).toBe(BIG_SIZE);

      // Done once; every retry answers what was recorded, and the upload is gone.
      expect(await intend(loop.loop_id, { sha256: bigSha, size: BIG_SIZE, content_type: "application/x-git-bundle" })).toEqual({ status: "exists" });
      const retried = await complete(upload, [part1, part2]);
      expect(retried.status).toBe(200);
      expect(ArtifactStored.parse(await retried.json()).artifact).toEqual(artifact);
      expect(await (await call(upload.abort_url, { method: "DELETE" })).json()).toEqual({ status: "aborted" });
      const late = await put(url1, "x");
      expect(late.status).toBe(404);
      expect(await errorOf(late)).toMatchObject({ code: "upload_not_found" });
    },
    BIG_TIMEOUT_MS,
  );

  it(
    "deletes a completed object that does not hash to its sha256 once it is checked after the answer, and one that is not its declared size (400 size_mismatch) before: no row, no object",
    async () => {
      const loop = await createLoop("artifact-big-mismatch", [A]);
      const claimed = sha256Hex("not the big file");
      const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
      try {
        // The right number of bytes, under another file's sha256: answered `verifying`, and the check
        // after the answer deletes it by itself, with no request asking for it.
        const upload = await intend(loop.loop_id, { sha256: claimed, size: BIG_SIZE, content_type: "application/octet-stream" });
        if (upload.status !== "multipart") throw new Error("expected a multipart upload");
        const parts = [await putPart(upload.part_urls[0] ?? "", 0, PART_SIZE), await putPart(upload.part_urls[1] ?? "", PART_SIZE, BIG_SIZE)];
        const refused = await callWith({}, upload.complete_url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ parts }),
        });
        expect(refused.status).toBe(202);
        expect(await rowsOf(loop.loop_id)).toEqual([]);
        expect(await objectsOf(loop.loop_id)).toEqual([]);
        expect(warn).toHaveBeenCalled();
        // An intent for it after the check offers the upload again.
        expect((await intend(loop.loop_id, { sha256: claimed, size: BIG_SIZE, content_type: "application/octet-stream" })).status).toBe("multipart");

        // The right sha256, but parts that add up to less than the declared size.
        const short = await intend(loop.loop_id, { sha256: bigSha, size: BIG_SIZE, content_type: "application/octet-stream" });
        if (short.status !== "multipart") throw new Error("expected a multipart upload");
        const shortRefused = await complete(short, [await putPart(short.part_urls[0] ?? "", 0, MiB)]);
        expect(shortRefused.status).toBe(400);
        expect(await errorOf(shortRefused)).toMatchObject({ code: "size_mismatch", message: expect.stringContaining(`${BIG_SIZE}`) });
        expect(await rowsOf(loop.loop_id)).toEqual([]);
        expect(await objectsOf(loop.loop_id)).toEqual([]);
      } finally {
        warn.mockRestore();
      }
    },
    BIG_TIMEOUT_MS,
  );

  it("refuses parts and completions that cannot be right, before storage sees them", async () => {
    const loop = await createLoop("artifact-big-refusals", [A]);
    const upload = await intend(loop.loop_id, { sha256: bigSha, size: BIG_SIZE, content_type: "application/octet-stream" });
    if (upload.status !== "multipart") throw new Error("expected a multipart upload");
    const [url1 = ""] = upload.part_urls;
    const uploadPath = upload.abort_url;

    const noLength = await call(url1, { method: "PUT", body: bigFile(0, 10), duplex: "half" } as RequestInit);
    expect([noLength.status, (await errorOf(noLength)).code]).toEqual([411, "length_required"]);
    const tooLarge = await put(url1, new FixedLengthStream(PART_SIZE + 1).readable);
    expect([tooLarge.status, (await errorOf(tooLarge)).code]).toEqual([413, "body_too_large"]);
    const short = await put(url1, "01234", { "content-length": "10" });
    expect([short.status, (await errorOf(short)).code]).toEqual([400, "length_mismatch"]);
    for (const part of ["0", "4001", "1.5", "x"]) {
      const response = await put(`${uploadPath}/parts/${part}`, "x");
      expect([response.status, (await errorOf(response)).code], part).toEqual([400, "invalid_parameter"]);
    }
    const unknown = await put(`/v1/loops/${loop.loop_id}/artifacts/${bigSha}/uploads/${encodeURIComponent("no/such+upload=")}/parts/1`, "x");
    expect([unknown.status, (await errorOf(unknown)).code]).toEqual([404, "upload_not_found"]);

    const part = await putPart(url1, 0, 10);
    const unordered = await complete(upload, [part, part]);
    expect([unordered.status, (await errorOf(unordered)).code]).toEqual([400, "invalid_request"]);

    expect(await (await call(uploadPath, { method: "DELETE" })).json()).toEqual({ status: "aborted" });
    // Aborting one that is gone is what the caller wanted too.
    expect(await (await call(uploadPath, { method: "DELETE" })).json()).toEqual({ status: "aborted" });
    const afterAbort = await complete(upload, [part]);
    expect([afterAbort.status, (await errorOf(afterAbort)).code]).toEqual([404, "upload_not_found"]);
    expect(await rowsOf(loop.loop_id)).toEqual([]);
    expect(await objectsOf(loop.loop_id)).toEqual([]);
  });
});

describe("a recorded artifact is immutable", () => {
  const log = encode("FAIL parse.unicode\nexpected é, got e\n");
  const sha = sha256Hex(log);
  /** Bytes of the same length that are not the artifact (one byte changed): what a write after verification leaves. */
  const forged = log.map((byte, index) => (index === 0 ? byte ^ 0x20 : byte));

  async function recordLog(key: string): Promise<{ loopId: string; base: string }> {
    const loop = await createLoop(key, [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    expect((await put(`${base}/${sha}?name=unit.log`, log, { "content-type": "text/plain" })).status).toBe(201);
    return { loopId: loop.loop_id, base };
  }

  it("refuses an intent or a PUT that gives a recorded artifact another size with 409 size_conflict: nothing offered, nothing stored", async () => {
    expect(forged.length).toBe(log.length);
    const { loopId, base } = await recordLog("immutable-size");
    const object = await env.ARTIFACTS.head(artifactKey(loopId, sha));
    const before = { rows: await rowsOf(loopId), usage: await usageOf(loopId) };

    const intent = await postJson(base, { sha256: sha, size: log.length + 1, content_type: "text/plain" });
    expect(intent.status).toBe(409);
    const body = (await intent.json()) as { error: { code: string; message: string }; url?: string };
    expect(body.error).toMatchObject({ code: "size_conflict", message: expect.stringContaining(`${log.length} bytes`) });
    expect(body).not.toHaveProperty("url");
    const longer = await put(`${base}/${sha}`, new Uint8Array([...log, 10]));
    expect([longer.status, (await errorOf(longer)).code]).toEqual([409, "size_conflict"]);

    expect((await env.ARTIFACTS.head(artifactKey(loopId, sha)))?.etag).toBe(object?.etag);
    expect({ rows: await rowsOf(loopId), usage: await usageOf(loopId) }).toEqual(before);
    expect(await intend(loopId, { sha256: sha, size: log.length, content_type: "text/plain" })).toEqual({ status: "exists" });
  });

  it("keeps the ETag of the bytes it verified; an object written since is never served, and a download deletes it as damaged (404 artifact_damaged)", async () => {
    const { loopId, base } = await recordLog("immutable-get");
    const key = artifactKey(loopId, sha);
    expect(await recordedEtag(loopId, sha)).toBe((await env.ARTIFACTS.head(key))?.etag);

    // Same length, other bytes, written straight into storage after the artifact was verified.
    await env.ARTIFACTS.put(key, forged);
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const got = await call(`${base}/${sha}`);
      expect(got.status).toBe(404);
      expect(await errorOf(got)).toMatchObject({ code: "artifact_damaged", message: expect.stringContaining("upload it again") });
      expect(warn).toHaveBeenCalledWith(expect.stringContaining("does not hash to its key"));
    } finally {
      warn.mockRestore();
    }
    expect(await objectsOf(loopId)).toEqual([]);
    const again = await call(`${base}/${sha}`);
    expect([again.status, (await errorOf(again)).code]).toEqual([404, "artifact_damaged"]);
    // Still recorded (the reports that cite it stand), and counted once.
    expect(await rowsOf(loopId)).toEqual([{ sha256: sha, size: log.length, name: "unit.log", content_type: "text/plain" }]);

    // The runner's next upload of it is not answered `exists`: it uploads it again, which repairs it.
    const intent = await intend(loopId, { sha256: sha, size: log.length, content_type: "text/plain", name: "again.log" });
    expect(intent).toMatchObject({ status: "upload" });
    const repaired = await put(intent.status === "upload" ? intent.url : "", log, { "content-type": "text/plain" });
    expect(repaired.status).toBe(200);
    expect(ArtifactStored.parse(await repaired.json()).artifact.name).toBe("unit.log");
    const served = await call(`${base}/${sha}`);
    expect(served.status).toBe(200);
    expect(new Uint8Array(await served.arrayBuffer())).toEqual(log);
    expect(await recordedEtag(loopId, sha)).toBe((await env.ARTIFACTS.head(key))?.etag);
    expect(await usageOf(loopId)).toEqual({ total: log.length, sum: log.length });
  });

  it("answers an intent for an artifact whose object was written since `upload`, not `exists`, and the re-upload is recorded again", async () => {
    const { loopId } = await recordLog("immutable-intent");
    const key = artifactKey(loopId, sha);
    await env.ARTIFACTS.put(key, forged);
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    let intent: ArtifactIntentResponse;
    try {
      intent = await intend(loopId, { sha256: sha, size: log.length, content_type: "text/plain" });
    } finally {
      warn.mockRestore();
    }
    expect(intent).toMatchObject({ status: "upload" });
    expect((await put(intent.status === "upload" ? intent.url : "", log)).status).toBe(200);
    expect(await intend(loopId, { sha256: sha, size: log.length, content_type: "text/plain" })).toEqual({ status: "exists" });
    const object = await env.ARTIFACTS.get(key);
    expect(new Uint8Array((await object?.arrayBuffer()) ?? new ArrayBuffer(0))).toEqual(log);
    expect(await usageOf(loopId)).toEqual({ total: log.length, sum: log.length });
  });

  it("checks a row recorded before ETags were kept once, whole, and pins it; a wrong object under such a row is uploaded again", async () => {
    const { loopId, base } = await recordLog("immutable-legacy");
    const key = artifactKey(loopId, sha);
    const etag = (await env.ARTIFACTS.head(key))?.etag;
    await env.DB.prepare("UPDATE artifacts SET etag = NULL WHERE loop_id = ?").bind(loopId).run();
    expect(await intend(loopId, { sha256: sha, size: log.length, content_type: "text/plain" })).toEqual({ status: "exists" });
    expect(await recordedEtag(loopId, sha)).toBe(etag);

    await env.DB.prepare("UPDATE artifacts SET etag = NULL WHERE loop_id = ?").bind(loopId).run();
    const served = await call(`${base}/${sha}`);
    expect(served.status).toBe(200);
    expect(new Uint8Array(await served.arrayBuffer())).toEqual(log);
    expect(await recordedEtag(loopId, sha)).toBe(etag);

    await env.DB.prepare("UPDATE artifacts SET etag = NULL WHERE loop_id = ?").bind(loopId).run();
    await env.ARTIFACTS.put(key, forged);
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      expect(await intend(loopId, { sha256: sha, size: log.length, content_type: "text/plain" })).toMatchObject({ status: "upload" });
    } finally {
      warn.mockRestore();
    }
  });

  it(
    "completes a multipart upload over a recorded artifact whose object was damaged, rather than answering the damaged one stored",
    async () => {
      const vars = { ARTIFACT_PUT_MAX_BYTES: "5MiB", ARTIFACT_PART_BYTES: "5MiB" };
      const loop = await createLoop("immutable-multipart", [A]);
      const size = MIN_PART_BYTES + 1;
      const digest = await sha256Of(bigFile(0, size));
      const upload = async (): Promise<Response> => {
        const { completeUrl, body } = await uploadParts(vars, loop.loop_id, {
          sha256: digest,
          size,
          content_type: "application/x-git-bundle",
          name: "candidate.bundle",
        });
        return callWith(vars, completeUrl, { method: "POST", headers: { "content-type": "application/json" }, body });
      };
      // 202 `verifying`: `callWith` waits for the check after the answer, which records it.
      expect((await upload()).status).toBe(202);
      expect(await usageOf(loop.loop_id)).toEqual({ total: size, sum: size });
      const key = artifactKey(loop.loop_id, digest);
      // Damaged in storage: the same length, other bytes.
      await env.ARTIFACTS.put(key, sized(bigFile(1, size + 1), size));
      const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
      let completed: Response;
      try {
        completed = await upload();
      } finally {
        warn.mockRestore();
      }
      expect(completed.status).toBe(202);
      expect(ArtifactVerifying.parse(await completed.json()).artifact).toEqual({ sha256: digest, size });
      const object = await env.ARTIFACTS.get(key);
      expect(await sha256Of(object?.body ?? new ReadableStream())).toBe(digest);
      expect(await recordedEtag(loop.loop_id, digest)).toBe((await env.ARTIFACTS.head(key))?.etag);
      expect(await usageOf(loop.loop_id)).toEqual({ total: size, sum: size });
    },
    BIG_TIMEOUT_MS,
  );
});

describe("the quota's running total", () => {
  const quota = { LOOP_ARTIFACT_QUOTA_BYTES: "100" };
  const bytesOf = (label: string, length: number) => encode(label.repeat(length).slice(0, length));

  it("counts each recorded artifact once: new ones, not duplicates, re-uploads or refusals (507, nothing stored)", async () => {
    const loop = await createLoop("quota-total", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    const [a, b, c, d] = [bytesOf("a", 40), bytesOf("b", 40), bytesOf("c", 30), bytesOf("d", 20)] as const;
    const putWith = (bytes: Uint8Array) => callWith(quota, `${base}/${sha256Hex(bytes)}`, { method: "PUT", body: bytes });
    expect(await usageOf(loop.loop_id)).toEqual({ total: null, sum: 0 });

    expect((await putWith(a)).status).toBe(201);
    expect((await putWith(b)).status).toBe(201);
    expect((await putWith(a)).status).toBe(200);
    expect(await usageOf(loop.loop_id)).toEqual({ total: 80, sum: 80 });

    const refused = await putWith(c);
    expect([refused.status, (await errorOf(refused)).code]).toEqual([507, "quota_exceeded"]);
    const intent = await callWith(quota, base, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sha256: sha256Hex(c), size: c.length, content_type: "text/plain" }),
    });
    expect([intent.status, (await errorOf(intent)).code]).toEqual([507, "quota_exceeded"]);
    expect(await objectsOf(loop.loop_id)).not.toContain(artifactKey(loop.loop_id, sha256Hex(c)));

    // A duplicate of a recorded artifact is taken at a full quota: it adds nothing.
    expect((await putWith(d)).status).toBe(201);
    expect(await usageOf(loop.loop_id)).toEqual({ total: 100, sum: 100 });
    expect((await putWith(b)).status).toBe(200);
    // So is the re-upload of one whose object was damaged.
    await env.ARTIFACTS.put(artifactKey(loop.loop_id, sha256Hex(a)), bytesOf("z", 40));
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      expect((await callWith(quota, `${base}/${sha256Hex(a)}`)).status).toBe(404);
    } finally {
      warn.mockRestore();
    }
    expect((await putWith(a)).status).toBe(200);
    expect(await usageOf(loop.loop_id)).toEqual({ total: 100, sum: 100 });
    expect(await rowsOf(loop.loop_id)).toHaveLength(3);
  });

  it("records at most one of two concurrent uploads that together exceed the quota; the other's object is not kept", async () => {
    const loop = await createLoop("quota-race", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    const first = bytesOf("x", 60);
    const second = bytesOf("y", 60);
    // The first upload's body is held back until the second has been answered: both pass the check made
    // before any byte is stored (the loop has recorded nothing yet), so what decides is the recording.
    let streaming: () => void = () => undefined;
    const started = new Promise<void>((resolve) => (streaming = resolve));
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    const held = new ReadableStream<Uint8Array>({
      async pull(controller) {
        streaming();
        await released;
        controller.enqueue(first);
        controller.close();
      },
    });
    const slow = callWith(quota, `${base}/${sha256Hex(first)}`, { method: "PUT", headers: { "content-length": String(first.length) }, body: held });
    await started;
    const fast = await callWith(quota, `${base}/${sha256Hex(second)}`, { method: "PUT", body: second });
    release();
    const responses = [await slow, fast];
    expect(responses.map((response) => response.status)).toEqual([507, 201]);
    expect(await errorOf(responses[0] ?? fast)).toMatchObject({ code: "quota_exceeded" });
    expect(await rowsOf(loop.loop_id)).toEqual([expect.objectContaining({ sha256: sha256Hex(second) })]);
    expect(await usageOf(loop.loop_id)).toEqual({ total: 60, sum: 60 });
    expect(await objectsOf(loop.loop_id)).toEqual([artifactKey(loop.loop_id, sha256Hex(second))]);
  });

  it("decides in the recording batch itself: of two verified artifacts recorded at once past the quota, one is refused", async () => {
    const loop = await createLoop("quota-batch", [A]);
    const db = drizzle(env.DB);
    const artifact = (label: string) => ({
      loopId: loop.loop_id,
      sha256: sha256Hex(label),
      size: 60,
      name: `${label}.bin`,
      contentType: "application/octet-stream",
      etag: label,
    });
    const results = await Promise.all([recordArtifact(db, artifact("one"), 100), recordArtifact(db, artifact("two"), 100)]);
    expect(results.filter((result) => result?.created)).toHaveLength(1);
    expect(results.filter((result) => result === null)).toHaveLength(1);
    expect(await usageOf(loop.loop_id)).toEqual({ total: 60, sum: 60 });
    // Recording one of them again: no new row, nothing counted, and the quota has no say over it.
    const again = await recordArtifact(db, artifact(results[0] ? "one" : "two"), 100);
    expect(again?.created).toBe(false);
    expect(await usageOf(loop.loop_id)).toEqual({ total: 60, sum: 60 });
  });
});

describe("objects without a record", () => {
  it("an object in R2 but not in D1 (a crash between the two) is verified, recorded, and then `exists`; one that does not hash to its key is deleted", async () => {
    const loop = await createLoop("artifact-adopt", [A]);
    const bytes = encode("stored before the row\n");
    const sha256 = sha256Hex(bytes);
    await env.ARTIFACTS.put(artifactKey(loop.loop_id, sha256), bytes, {
      httpMetadata: { contentType: "text/plain; charset=utf-8" },
      customMetadata: { name: "early.log" },
    });
    expect(await intend(loop.loop_id, { sha256, size: bytes.length, content_type: "text/plain" })).toEqual({ status: "exists" });
    expect(await rowsOf(loop.loop_id)).toEqual([{ sha256, size: bytes.length, name: "early.log", content_type: "text/plain; charset=utf-8" }]);

    const forged = encode("these bytes are not the ones the key names\n");
    const forgedSha = sha256Hex("something else");
    await env.ARTIFACTS.put(artifactKey(loop.loop_id, forgedSha), forged);
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      expect(await intend(loop.loop_id, { sha256: forgedSha, size: forged.length, content_type: "text/plain" })).toMatchObject({ status: "upload" });
      expect((await call(`/v1/loops/${loop.loop_id}/artifacts/${forgedSha}`)).status).toBe(404);
    } finally {
      warn.mockRestore();
    }
    expect(await objectsOf(loop.loop_id)).toEqual([artifactKey(loop.loop_id, sha256)]);
    expect(await rowsOf(loop.loop_id)).toHaveLength(1);
  });
});

describe("listing", () => {
  it("pages a loop's artifacts newest first by cursor, each once", async () => {
    const loop = await createLoop("artifact-list", [A]);
    const base = `/v1/loops/${loop.loop_id}/artifacts`;
    const shas: string[] = [];
    for (let index = 0; index < 5; index++) {
      const bytes = encode(`log ${index}\n`);
      shas.push(sha256Hex(bytes));
      expect((await put(`${base}/${sha256Hex(bytes)}?name=log-${index}.txt`, bytes)).status).toBe(201);
    }
    const seen: { sha256: string; created_at: string }[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const response = await call(`${base}?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      expect(response.status).toBe(200);
      const page = ArtifactList.parse(await response.json());
      expect(page.artifacts.length).toBeLessThanOrEqual(2);
      seen.push(...page.artifacts);
      cursor = page.next_cursor;
      pages++;
    } while (cursor && pages < 10);
    expect(pages).toBe(3);
    expect(seen.map((artifact) => artifact.sha256).sort()).toEqual([...shas].sort());
    const order = seen.map((artifact) => `${artifact.created_at}|${artifact.sha256}`);
    expect(order).toEqual([...order].sort().reverse());

    const bad = await call(`${base}?cursor=nonsense`);
    expect([bad.status, (await errorOf(bad)).code]).toEqual([400, "invalid_parameter"]);
  });
});

// Issue 30: `complete` (and an intent `after_upload`) answer before the object's digest is checked. Until
// the check has recorded it, the object is never listed, served, or accepted as a report's evidence.
describe("checked after the answer", () => {
  const vars = { ARTIFACT_PUT_MAX_BYTES: "5MiB", ARTIFACT_PART_BYTES: "5MiB" };
  const size = MIN_PART_BYTES + 1;

  const partsUploaded = (loopId: string, sha256: string, offset = 0) =>
    uploadParts(vars, loopId, { sha256, size, content_type: "application/octet-stream", name: "profile.bin" }, offset);

  /** `complete` sent, its answer read, and the work after the answer still under way (`settled` waits for it). */
  async function completeWithoutWaiting(completeUrl: string, body: string): Promise<{ response: Response; settled: () => Promise<void> }> {
    const ctx = createExecutionContext();
    const headers = { authorization: `Bearer ${env.OWNER_TOKEN}`, "content-type": "application/json" };
    const response = await app.fetch(new Request(`http://lw.test${completeUrl}`, { method: "POST", headers, body }), { ...env, ...vars }, ctx);
    return { response, settled: () => waitOnExecutionContext(ctx) };
  }

  const quotas = { quotaBytes: 1024 * MiB, team: null };

  it(
    "a download asked while the check is under way waits for it: right bytes are served byte-exact, wrong ones never (404, deleted)",
    async () => {
      const loop = await createLoop("verify-after-answer", [A]);
      const digest = await sha256Of(bigFile(0, size));
      const right = await partsUploaded(loop.loop_id, digest);
      const completed = await completeWithoutWaiting(right.completeUrl, right.body);
      expect(completed.response.status).toBe(202);
      const got = await callWith(vars, `/v1/loops/${loop.loop_id}/artifacts/${digest}`);
      expect(got.status).toBe(200);
      expect(await sha256Of(got.body ?? new ReadableStream())).toBe(digest);
      await completed.settled();
      expect(await rowsOf(loop.loop_id)).toEqual([{ sha256: digest, size, name: "profile.bin", content_type: "application/octet-stream" }]);
      expect(await usageOf(loop.loop_id)).toEqual({ total: size, sum: size });

      // Bytes shifted by one under the digest of the right ones' neighbour: the same size, another digest.
      const claimed = sha256Hex("the claimed profile");
      const wrong = await partsUploaded(loop.loop_id, claimed, 1);
      const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
      try {
        const refused = await completeWithoutWaiting(wrong.completeUrl, wrong.body);
        expect(refused.response.status).toBe(202);
        const notServed = await callWith(vars, `/v1/loops/${loop.loop_id}/artifacts/${claimed}`);
        expect([notServed.status, (await errorOf(notServed)).code]).toEqual([404, "not_found"]);
        await refused.settled();
      } finally {
        warn.mockRestore();
      }
      expect(await objectsOf(loop.loop_id)).toEqual([artifactKey(loop.loop_id, digest)]);
      expect(await usageOf(loop.loop_id)).toEqual({ total: size, sum: size });
    },
    BIG_TIMEOUT_MS,
  );

  it(
    "an object whose check never ran (the coordinator stopped after answering) is not listed; a citation or a download checks it first, records right bytes, deletes wrong ones",
    async () => {
      const loop = await createLoop("verify-after-crash", [A]);
      const storage = bindingStorage(env.ARTIFACTS);
      const db = drizzle(env.DB);
      // What `complete` leaves in storage before its check: the object, with the metadata its upload began with.
      const putUnchecked = async (sha256: string, offset: number) => {
        await env.ARTIFACTS.put(artifactKey(loop.loop_id, sha256), sized(bigFile(offset, offset + size), size), {
          httpMetadata: { contentType: "application/octet-stream" },
          customMetadata: { name: "profile.bin", size: String(size), sha256 },
        });
      };
      const digest = await sha256Of(bigFile(0, size));
      await putUnchecked(digest, 0);
      expect(ArtifactList.parse(await (await call(`/v1/loops/${loop.loop_id}/artifacts`)).json()).artifacts).toEqual([]);
      expect(await rowsOf(loop.loop_id)).toEqual([]);
      const ref = { sha256: digest, size, name: "profile.bin", content_type: "application/octet-stream" };
      // The check a report's or a proposal's citation runs (`unverified`): recorded, so accepted.
      expect(await unverified(async () => storage, db, loop.loop_id, quotas, [ref])).toEqual([]);
      expect(await rowsOf(loop.loop_id)).toHaveLength(1);

      const claimed = sha256Hex("another claimed profile");
      await putUnchecked(claimed, 1);
      const claim = { ...ref, sha256: claimed };
      const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
      try {
        expect(await unverified(async () => storage, db, loop.loop_id, quotas, [claim])).toEqual([claim]);
        expect(await objectsOf(loop.loop_id)).toEqual([artifactKey(loop.loop_id, digest)]);
        // And a download of such an object, put back: checked first, never served.
        await putUnchecked(claimed, 1);
        const got = await call(`/v1/loops/${loop.loop_id}/artifacts/${claimed}`);
        expect([got.status, (await errorOf(got)).code]).toEqual([404, "not_found"]);
      } finally {
        warn.mockRestore();
      }
      expect(await objectsOf(loop.loop_id)).toEqual([artifactKey(loop.loop_id, digest)]);
      expect(await rowsOf(loop.loop_id)).toHaveLength(1);
    },
    BIG_TIMEOUT_MS,
  );

  it("an intent `after_upload` for an unrecorded object answers `verifying` and records it after the answer only if it is the artifact", async () => {
    const loop = await createLoop("verify-after-upload", [A]);
    const intentAfterUpload = (sha256: string, length: number) =>
      callWith({}, `/v1/loops/${loop.loop_id}/artifacts`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ sha256, size: length, content_type: "text/plain", after_upload: true }),
      });
    const bytes = encode("put to a presigned URL\n");
    const sha256 = sha256Hex(bytes);
    await env.ARTIFACTS.put(artifactKey(loop.loop_id, sha256), bytes, { customMetadata: { name: "unit.log" } });
    const answered = await intentAfterUpload(sha256, bytes.length);
    expect(await answered.json()).toEqual({ status: "verifying" });
    // `callWith` waited for the work after the answer: recorded.
    expect(await rowsOf(loop.loop_id)).toEqual([{ sha256, size: bytes.length, name: "unit.log", content_type: "text/plain" }]);
    expect(await (await intentAfterUpload(sha256, bytes.length)).json()).toEqual({ status: "exists" });

    const forged = encode("not the bytes the key names\n");
    const forgedSha = sha256Hex("a third thing");
    await env.ARTIFACTS.put(artifactKey(loop.loop_id, forgedSha), forged);
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      expect(await (await intentAfterUpload(forgedSha, forged.length)).json()).toEqual({ status: "verifying" });
    } finally {
      warn.mockRestore();
    }
    expect(await objectsOf(loop.loop_id)).toEqual([artifactKey(loop.loop_id, sha256)]);
    expect(await rowsOf(loop.loop_id)).toHaveLength(1);
  });
});
