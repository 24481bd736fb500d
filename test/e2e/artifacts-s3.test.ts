import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoopEvent } from "#shared/engine/index.js";
import { ArtifactIntentResponse, ArtifactList } from "#shared/wire/api.js";
import { Client } from "../../runner/src/coordinator/client.js";
import { TEST_OWNER_TOKEN, api, makeRepo, recordedLoopId, runCli, startCoordinator, tempDir, type TestCoordinator } from "../support/cli.js";
import { profiledAnswerProject } from "../support/profiled-answer-project.js";

// Artifacts in S3 mode (DESIGN §10) end to end: the local coordinator's worker (in workerd) is given S3
// settings, and runners upload straight to an S3-compatible store (s3rver) through presigned URLs, a
// single PUT or one per part, while the worker creates, completes and verifies with SigV4-signed fetch requests (aws4fetch).
//
// s3rver checks a presigned URL's expiry but not its SigV4 signature (its source says so), so the store
// the coordinator is pointed at is a gate in front of s3rver that recomputes every request's signature
// with the secret, as S3 and R2 do, and refuses a mismatch (403 SignatureDoesNotMatch) before s3rver
// sees it. s3rver ignores x-amz-checksum-sha256 as well; the gate checks it as R2 and S3 do (400
// BadDigest), unless a test turns that off to stand for a store that ignores it.

const MiB = 1024 * 1024;
const BUCKET = "loopwarden-test";
// s3rver's built-in account: the access key it knows, and the secret the gate verifies with.
const ACCESS_KEY_ID = "S3RVER";
const SECRET_ACCESS_KEY = "S3RVER";

const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex");

interface S3rverServer {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
  httpServer?: http.Server;
}
type S3rverClass = new (options: Record<string, unknown>) => S3rverServer;

// ---- a SigV4-checking gate in front of s3rver ---------------------------------------------------------

/** RFC 3986 encoding, as SigV4 canonicalises query strings. */
function rfc3986(text: string): string {
  return encodeURIComponent(text).replace(/[!'()*]/g, (char) => `%${char.charCodeAt(0).toString(16).toUpperCase()}`);
}

const hmac = (key: Buffer | string, text: string) => createHmac("sha256", key).update(text).digest();

/**
 * Why a request's SigV4 signature (presigned query, or Authorization header) is not the one `secret`
 * makes for it; null when it is. Unsigned requests are not this gate's business (s3rver serves them).
 */
function signatureProblem(req: http.IncomingMessage, secret: string): string | null {
  const [pathname = "/", rawQuery = ""] = (req.url ?? "/").split("?", 2) as [string, string?];
  const params = rawQuery
    .split("&")
    .filter(Boolean)
    .map((pair): [string, string] => {
      const [key = "", value = ""] = pair.split("=", 2) as [string, string?];
      return [decodeURIComponent(key), decodeURIComponent(value)];
    });
  const query = new Map(params);
  let credential: string, signedHeaders: string, signature: string, amzDate: string, payloadHash: string;
  if (query.has("X-Amz-Signature")) {
    credential = query.get("X-Amz-Credential") ?? "";
    signedHeaders = query.get("X-Amz-SignedHeaders") ?? "";
    signature = query.get("X-Amz-Signature") ?? "";
    amzDate = query.get("X-Amz-Date") ?? "";
    payloadHash = query.get("X-Amz-Content-Sha256") ?? "UNSIGNED-PAYLOAD";
  } else if (req.headers.authorization?.startsWith("AWS4-HMAC-SHA256 ")) {
    const fields = Object.fromEntries(
      req.headers.authorization
        .slice("AWS4-HMAC-SHA256 ".length)
        .split(",")
        .map((field) => field.trim().split("=", 2) as [string, string]),
    );
    credential = fields.Credential ?? "";
    signedHeaders = fields.SignedHeaders ?? "";
    signature = fields.Signature ?? "";
    amzDate = String(req.headers["x-amz-date"] ?? "");
    payloadHash = String(req.headers["x-amz-content-sha256"] ?? "");
  } else {
    return null;
  }
  const [, date = "", region = "", service = ""] = credential.split("/");
  const canonicalQuery = params
    .filter(([key]) => key !== "X-Amz-Signature")
    .map(([key, value]) => [rfc3986(key), rfc3986(value)] as const)
    .sort(([a, x], [b, y]) => (a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0))
    .map(([key, value]) => `${key}=${value}`)
    .join("&");
  const names = signedHeaders.split(";");
  const canonicalHeaders = names
    .map(
      (name) =>
        `${name}:${String(req.headers[name] ?? "")
          .trim()
          .replace(/\s+/g, " ")}\n`,
    )
    .join("");
  const canonicalRequest = [req.method, pathname, canonicalQuery, canonicalHeaders, signedHeaders, payloadHash].join("\n");
  const scope = `${date}/${region}/${service}/aws4_request`;
  const stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256(canonicalRequest)].join("\n");
  const key = hmac(hmac(hmac(hmac(`AWS4${secret}`, date), region), service), "aws4_request");
  const expected = hmac(key, stringToSign);
  const given = Buffer.from(signature, "hex");
  return given.length === expected.length && timingSafeEqual(given, expected) ? null : `the signature does not match (signed headers: ${signedHeaders})`;
}

interface GateRequest {
  method: string;
  path: string;
  /** How the request was signed: a presigned URL (a runner), an Authorization header (the worker's own requests), or not at all. */
  auth: "presigned" | "header" | "none";
  refused: boolean;
}

interface Store {
  /** The gate's origin: what the coordinator is given as S3_ENDPOINT. */
  endpoint: string;
  /** Whether the gate refuses a PUT whose body does not hash to its x-amz-checksum-sha256 (as R2 does); on unless turned off. */
  verifyChecksums: boolean;
  /** s3rver's own origin, for the test to look at what is stored (unsigned reads). */
  direct: string;
  requests: GateRequest[];
  close(): Promise<void>;
}

async function startStore(directory: string): Promise<Store> {
  const S3rver = createRequire(import.meta.url)("s3rver") as S3rverClass;
  const s3rver = new S3rver({ address: "127.0.0.1", port: 0, directory, silent: true, configureBuckets: [{ name: BUCKET }] });
  const { port: s3Port } = await s3rver.run();
  const requests: GateRequest[] = [];
  const refuse = (res: http.ServerResponse, status: number, code: string, message: string) => {
    res.writeHead(status, { "content-type": "application/xml" });
    res.end(`<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message></Error>`);
  };
  const gate = http.createServer((req, res) => {
    const auth = new URL(req.url ?? "/", "http://gate").searchParams.has("X-Amz-Signature") ? "presigned" : req.headers.authorization ? "header" : "none";
    const problem = signatureProblem(req, SECRET_ACCESS_KEY);
    const record: GateRequest = { method: req.method ?? "", path: (req.url ?? "").split("?")[0] ?? "", auth, refused: problem !== null };
    requests.push(record);
    if (problem) {
      req.resume();
      refuse(res, 403, "SignatureDoesNotMatch", problem);
      return;
    }
    const forward = (body: Buffer | null) => {
      const upstream = http.request({ host: "127.0.0.1", port: s3Port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      upstream.on("error", (error) => res.destroy(error));
      if (body) upstream.end(body);
      else req.pipe(upstream);
    };
    const checksum = req.headers["x-amz-checksum-sha256"];
    if (req.method !== "PUT" || typeof checksum !== "string" || !store.verifyChecksums) return forward(null);
    // As R2 and S3 do: the body must hash to the SHA-256 the request carries, or nothing is stored.
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      if (createHash("sha256").update(body).digest("base64") === checksum) return forward(body);
      record.refused = true;
      refuse(res, 400, "BadDigest", "The SHA256 you specified did not match the calculated checksum.");
    });
  });
  await new Promise<void>((resolve) => gate.listen(0, "127.0.0.1", resolve));
  const gatePort = (gate.address() as { port: number }).port;
  const store: Store = {
    endpoint: `http://127.0.0.1:${gatePort}`,
    verifyChecksums: true,
    direct: `http://127.0.0.1:${s3Port}`,
    requests,
    async close() {
      gate.closeAllConnections();
      await new Promise<void>((resolve) => gate.close(() => resolve()));
      s3rver.httpServer?.closeAllConnections();
      await s3rver.close();
    },
  };
  return store;
}

/** The keys s3rver holds under `prefix` (an unsigned ListObjects straight to s3rver). */
async function storedKeys(store: Store, prefix: string): Promise<string[]> {
  const xml = await (await fetch(`${store.direct}/${BUCKET}?prefix=${encodeURIComponent(prefix)}`)).text();
  return [...xml.matchAll(/<Key>([^<]+)<\/Key>/g)].map((match) => match[1] ?? "").sort();
}

/** The local coordinator's own R2 object bodies (binding mode's storage, `…/r2/<bucket>/blobs/`), which S3 mode leaves empty. */
function bindingObjects(stateDir: string): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
      entry.isDirectory() ? walk(path.join(dir, entry.name)) : path.basename(dir) === "blobs" ? [path.join(dir, entry.name)] : [],
    );
  try {
    return walk(path.join(stateDir, "data", "v3", "r2"));
  } catch {
    return [];
  }
}

function s3Env(store: Store, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    LOOPWARDEN_S3_ENDPOINT: store.endpoint,
    LOOPWARDEN_S3_BUCKET: BUCKET,
    LOOPWARDEN_S3_ACCESS_KEY_ID: ACCESS_KEY_ID,
    LOOPWARDEN_S3_SECRET_ACCESS_KEY: SECRET_ACCESS_KEY,
    ...extra,
  };
}

async function intend(
  url: string,
  loopId: string,
  body: { sha256: string; size: number; content_type: string; name?: string },
): Promise<ArtifactIntentResponse> {
  const response = await api(`${url}/v1/loops/${loopId}/artifacts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(response.status, await response.clone().text()).toBe(200);
  return ArtifactIntentResponse.parse(await response.json());
}

async function listed(url: string, loopId: string): Promise<ArtifactList["artifacts"]> {
  return ArtifactList.parse(await (await api(`${url}/v1/loops/${loopId}/artifacts?limit=100`)).json()).artifacts;
}

/** A loop made over the API (no runner needed): what an upload intent is scoped to. */
async function createLoop(url: string, key: string): Promise<string> {
  const observation = {
    gates: [{ name: "unit", exit_code: 1, signal: null, timed_out: false, duration_ms: 10, log: null }],
    tests: { passing: [], failing: ["t"] },
  };
  const response = await api(`${url}/v1/loops`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      idempotency_key: `s3-loop-${key}`,
      contract: { name: `s3-${key}`, mode: "check_fixpoint", gates: [{ name: "unit", run: "true" }], agent: { run: "true" } },
      t0: { commit: sha256(key).slice(0, 40), observation },
    }),
  });
  expect(response.status, await response.clone().text()).toBe(201);
  return ((await response.json()) as { loop: { loop_id: string } }).loop.loop_id;
}

/** A PUT to a presigned storage URL, as a runner sends it: no token, the content type, and the headers the intent named. */
function putToStorage(url: string, body: Uint8Array, contentType?: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: "PUT", body, headers: { ...(contentType ? { "content-type": contentType } : {}), ...headers } });
}

/** The SHA-256 of what s3rver holds under `key` (an unsigned GET straight to s3rver), or null when it holds nothing. */
async function storedDigest(store: Store, key: string): Promise<string | null> {
  const response = await fetch(`${store.direct}/${BUCKET}/${key}`);
  if (response.status === 404) return null;
  expect(response.status).toBe(200);
  return sha256(new Uint8Array(await response.arrayBuffer()));
}

describe("artifacts in S3 mode, against s3rver", () => {
  const tmp = tempDir("artifacts-s3");
  let store: Store;
  let coordinator: TestCoordinator;
  let loopId = "";

  beforeAll(async () => {
    store = await startStore(path.join(tmp.dir, "s3rver"));
    // Files over 5 MiB go up in 5 MiB parts (S3's smallest), so a multipart upload takes a 12 MiB file.
    coordinator = await startCoordinator(
      path.join(tmp.dir, "state"),
      undefined,
      s3Env(store, { LOOPWARDEN_ARTIFACT_PUT_MAX_BYTES: "5MiB", LOOPWARDEN_ARTIFACT_PART_BYTES: "5MiB" }),
    );
  });
  afterAll(async () => {
    await coordinator?.stop();
    await store?.close();
    tmp.cleanup();
  });

  it("a run uploads its logs, files and bundles straight to storage; reports and proposals citing them have them verified and recorded", async () => {
    const repo = makeRepo(
      path.join(tmp.dir, "repo"),
      profiledAnswerProject(
        "import { writeFileSync } from 'node:fs';\nwriteFileSync('src/answer.js', 'export function answer() {\\n  return 42;\\n}\\n');\n",
        2,
      ),
    );
    const run = await runCli(["--server", coordinator.url, "run"], { cwd: repo });
    expect(run.code, run.stderr).toBe(10);
    loopId = recordedLoopId(repo, "loop.yaml");

    const events = (await (await api(`${coordinator.url}/v1/loops/${loopId}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)));
    const report = events.find((event) => event.type === "observation_reported");
    if (report?.type !== "observation_reported") throw new Error("the run reported nothing");
    const profile = report.data.observation.artifacts?.find((artifact) => artifact.name === "profile/unit.cpuprofile");
    const log = report.data.observation.gates[0]?.log;
    if (!profile || !log) throw new Error(`the report cites no profile or log: ${JSON.stringify(report.data.observation)}`);

    const proposal = events.find((event) => event.type === "candidate_proposed");
    const bundle = proposal?.type === "candidate_proposed" ? proposal.data.bundle : undefined;
    if (!bundle) throw new Error("the candidate was proposed without its bundle");

    // Recorded (the proposal and the report were accepted only once what they cite was verified), with
    // their names, and in s3rver.
    const artifacts = await listed(coordinator.url, loopId);
    expect(artifacts).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ sha256: profile.sha256, size: profile.size, name: "unit.cpuprofile" }),
        expect.objectContaining({ sha256: log.sha256, size: log.size, name: "gate-unit.log" }),
        expect.objectContaining({ sha256: bundle.sha256, size: bundle.size }),
      ]),
    );
    const keys = await storedKeys(store, `loops/${loopId}/`);
    for (const artifact of artifacts) expect(keys).toContain(`loops/${loopId}/sha256/${artifact.sha256}`);
    // The runner's bytes went to storage through presigned URLs, every one signed right; nothing into the binding.
    const uploads = store.requests.filter((request) => request.method === "PUT" && request.path.includes(`/loops/${loopId}/`));
    expect(uploads.length).toBeGreaterThanOrEqual(artifacts.length);
    expect(uploads.every((request) => request.auth === "presigned" && !request.refused)).toBe(true);
    // The worker's own calls (HeadObject, GetObject, …) are signed right too.
    expect(store.requests.some((request) => request.auth === "header")).toBe(true);
    expect(store.requests.filter((request) => request.refused)).toEqual([]);
    expect(bindingObjects(coordinator.stateDir)).toEqual([]);

    // A download streams from S3, byte-exact, with binding mode's safe headers.
    const response = await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${profile.sha256}`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/octet-stream");
    expect(response.headers.get("content-disposition")).toBe('attachment; filename="unit.cpuprofile"');
    expect(response.headers.get("x-content-type-options")).toBe("nosniff");
    expect(response.headers.get("content-security-policy")).toBe("default-src 'none'; sandbox");
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(sha256(bytes)).toBe(profile.sha256);
    expect(JSON.parse(new TextDecoder().decode(bytes))).toHaveProperty("nodes");
    const shown = await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${log.sha256}`);
    expect(shown.headers.get("content-type")).toBe("text/plain; charset=utf-8");
    expect(await shown.text()).toContain("node --cpu-prof");
  });

  it("one presigned PUT is recorded when next asked about; a multipart upload goes up in presigned parts and is verified on complete; both download byte-exact", async () => {
    const client = new Client(coordinator.url, { token: TEST_OWNER_TOKEN, retryForMs: 5_000 });
    const files = path.join(tmp.dir, "files");
    mkdirSync(files, { recursive: true });

    // One PUT (3 MiB): the intent answers a presigned URL that binds the length, content type and SHA-256.
    const small = randomBytes(3 * MiB);
    writeFileSync(path.join(files, "small.bin"), small);
    const smallIntent = await intend(coordinator.url, loopId, {
      sha256: sha256(small),
      size: small.length,
      content_type: "application/x-test",
      name: "small.bin",
    });
    if (smallIntent.status !== "upload") throw new Error(`expected an upload, got ${smallIntent.status}`);
    const signed = new URL(smallIntent.url);
    expect(signed.origin).toBe(store.endpoint);
    expect(signed.pathname).toBe(`/${BUCKET}/loops/${loopId}/sha256/${sha256(small)}`);
    expect(signed.searchParams.get("X-Amz-SignedHeaders")).toBe("content-length;content-type;host;x-amz-checksum-sha256");
    expect(signed.searchParams.get("X-Amz-Expires")).toBe("900");
    expect(smallIntent.headers).toEqual({ "x-amz-checksum-sha256": createHash("sha256").update(small).digest("base64") });
    // A PUT straight to storage is not confirmed to the coordinator: nothing is recorded until the object is asked about …
    const put = await fetch(smallIntent.url, { method: "PUT", headers: { "Content-Type": "application/x-test", ...smallIntent.headers }, body: small });
    expect(put.status).toBe(200);
    const smallRef = { sha256: sha256(small), size: small.length };
    expect((await listed(coordinator.url, loopId)).map((artifact) => artifact.sha256)).not.toContain(smallRef.sha256);
    // … and then it is verified and recorded: the next intent for it finds it.
    expect(await intend(coordinator.url, loopId, { sha256: smallRef.sha256, size: smallRef.size, content_type: "application/x-test" })).toEqual({
      status: "exists",
    });
    expect(await listed(coordinator.url, loopId)).toContainEqual(
      expect.objectContaining({ sha256: smallRef.sha256, size: small.length, name: "small.bin", content_type: "application/x-test" }),
    );
    // The runner asks again after its PUT (`after_upload`), so what it uploads is verified and recorded
    // file by file, after that answer (issue 30): recorded once the check has ended, which the runner
    // waits for (`awaitVerified`) before a report cites the file.
    const other = randomBytes(2 * MiB);
    writeFileSync(path.join(files, "other.bin"), other);
    const otherRef = await client.uploadArtifactFile(loopId, path.join(files, "other.bin"), "other.bin", "application/x-test");
    await client.awaitVerified(loopId, otherRef);
    expect((await listed(coordinator.url, loopId)).map((artifact) => artifact.sha256)).toContain(otherRef.sha256);

    // Multipart (12 MiB + 3 bytes: parts of 5, 5 and 2 MiB + 3), each part to its own presigned URL;
    // `complete` is the coordinator's, which completes it in storage and verifies the whole object after its answer.
    const big = randomBytes(12 * MiB + 3);
    writeFileSync(path.join(files, "big.bin"), big);
    const before = store.requests.length;
    const bigRef = await client.uploadArtifactFile(loopId, path.join(files, "big.bin"), "big.bin", "application/octet-stream");
    const partPuts = store.requests.slice(before).filter((request) => request.method === "PUT");
    expect(partPuts).toHaveLength(3);
    expect(partPuts.every((request) => request.auth === "presigned" && !request.refused)).toBe(true);
    // Recorded once the check after `complete`'s answer has ended.
    await client.awaitVerified(loopId, bigRef);
    expect(await listed(coordinator.url, loopId)).toContainEqual(expect.objectContaining({ sha256: bigRef.sha256, size: big.length, name: "big.bin" }));

    for (const [ref, bytes] of [
      [smallRef, small],
      [bigRef, big],
    ] as const) {
      const downloaded = await client.downloadArtifact(loopId, ref.sha256);
      expect(downloaded.byteLength).toBe(bytes.length);
      expect(sha256(downloaded)).toBe(ref.sha256);
    }
    expect(bindingObjects(coordinator.stateDir)).toEqual([]);
  });

  it("storage refuses a tampered signature, another length, a dropped checksum or other bytes; bytes that do not hash to their key are deleted, never recorded", async () => {
    const bytes = randomBytes(64 * 1024);
    const digest = sha256(bytes);
    const key = `loops/${loopId}/sha256/${digest}`;
    const intent = await intend(coordinator.url, loopId, { sha256: digest, size: bytes.length, content_type: "application/octet-stream" });
    if (intent.status !== "upload") throw new Error(`expected an upload, got ${intent.status}`);
    const headers = intent.headers ?? {};

    const tampered = new URL(intent.url);
    const signature = tampered.searchParams.get("X-Amz-Signature") ?? "";
    tampered.searchParams.set("X-Amz-Signature", `${signature.slice(0, -1)}${signature.endsWith("0") ? "1" : "0"}`);
    const forged = await putToStorage(tampered.toString(), bytes, "application/octet-stream", headers);
    expect(forged.status).toBe(403);
    expect(await forged.text()).toContain("SignatureDoesNotMatch");
    // The signed length: a longer body under the same URL is refused too.
    const longer = await putToStorage(intent.url, new Uint8Array([...bytes, 0]), "application/octet-stream", headers);
    expect(longer.status).toBe(403);
    // The signed checksum: a PUT that drops it (or names another digest) does not match the signature.
    const unchecked = await putToStorage(intent.url, bytes, "application/octet-stream");
    expect([unchecked.status, await unchecked.text()]).toEqual([403, expect.stringContaining("x-amz-checksum-sha256")]);
    const otherDigest = await putToStorage(intent.url, bytes, "application/octet-stream", {
      "x-amz-checksum-sha256": createHash("sha256").update("other").digest("base64"),
    });
    expect(otherDigest.status).toBe(403);
    // Other bytes of the right length, under the signed checksum: a store that checks it (R2, S3) refuses them.
    const wrong = randomBytes(bytes.length);
    const refused = await putToStorage(intent.url, wrong, "application/octet-stream", headers);
    expect([refused.status, await refused.text()]).toEqual([400, expect.stringContaining("BadDigest")]);
    expect(await storedKeys(store, key)).toEqual([]);

    // A store that ignores the checksum takes them, but they never count: verified when asked about, and deleted.
    store.verifyChecksums = false;
    try {
      expect((await putToStorage(intent.url, wrong, "application/octet-stream", headers)).status).toBe(200);
    } finally {
      store.verifyChecksums = true;
    }
    expect(await storedKeys(store, key)).toHaveLength(1);
    expect((await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${digest}`)).status).toBe(404);
    expect(await storedKeys(store, key)).toEqual([]);
    expect((await intend(coordinator.url, loopId, { sha256: digest, size: bytes.length, content_type: "application/octet-stream" })).status).toBe("upload");
    expect((await listed(coordinator.url, loopId)).map((artifact) => artifact.sha256)).not.toContain(digest);
  });

  it("a recorded artifact stays what was verified: a presigned URL used again, or an intent with another size, never replaces it", async () => {
    const client = new Client(coordinator.url, { token: TEST_OWNER_TOKEN, retryForMs: 5_000 });
    const bytes = randomBytes(48 * 1024);
    const digest = sha256(bytes);
    const key = `loops/${loopId}/sha256/${digest}`;
    const intent = await intend(coordinator.url, loopId, { sha256: digest, size: bytes.length, content_type: "application/octet-stream", name: "kept.bin" });
    if (intent.status !== "upload") throw new Error(`expected an upload, got ${intent.status}`);
    expect((await putToStorage(intent.url, bytes, "application/octet-stream", intent.headers)).status).toBe(200);
    expect(await intend(coordinator.url, loopId, { sha256: digest, size: bytes.length, content_type: "application/octet-stream" })).toEqual({
      status: "exists",
    });
    expect(await listed(coordinator.url, loopId)).toContainEqual(expect.objectContaining({ sha256: digest, name: "kept.bin" }));

    // An intent that gives it another size is refused, and nothing is presigned for it.
    const resized = await api(`${coordinator.url}/v1/loops/${loopId}/artifacts`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sha256: digest, size: bytes.length + 1, content_type: "application/octet-stream" }),
    });
    expect(resized.status).toBe(409);
    const refusal = (await resized.json()) as { error: { code: string }; url?: string };
    expect(refusal.error.code).toBe("size_conflict");
    expect(refusal).not.toHaveProperty("url");

    // The URL used again before it expires, with other bytes of the same length: a store that checks the
    // signed checksum refuses them, and the recorded object is untouched.
    const other = randomBytes(bytes.length);
    const again = await putToStorage(intent.url, other, "application/octet-stream", intent.headers);
    expect(again.status).toBe(400);
    expect(await storedDigest(store, key)).toBe(digest);

    // A store that ignores the checksum takes them: the worker sees the object's ETag is not the one it
    // verified, never serves those bytes or answers `exists`, and the runner's next upload repairs it.
    store.verifyChecksums = false;
    try {
      expect((await putToStorage(intent.url, other, "application/octet-stream", intent.headers)).status).toBe(200);
    } finally {
      store.verifyChecksums = true;
    }
    expect(await storedDigest(store, key)).toBe(sha256(other));
    const download = await api(`${coordinator.url}/v1/loops/${loopId}/artifacts/${digest}`);
    expect(download.status).toBe(404);
    expect(((await download.json()) as { error: { code: string } }).error.code).toBe("artifact_damaged");
    expect(await storedDigest(store, key)).toBeNull();
    expect(await listed(coordinator.url, loopId)).toContainEqual(expect.objectContaining({ sha256: digest, name: "kept.bin" }));

    const files = path.join(tmp.dir, "kept");
    mkdirSync(files, { recursive: true });
    writeFileSync(path.join(files, "kept.bin"), bytes);
    await client.uploadArtifactFile(loopId, path.join(files, "kept.bin"), "kept.bin", "application/octet-stream");
    expect(await storedDigest(store, key)).toBe(digest);
    expect(sha256(await client.downloadArtifact(loopId, digest))).toBe(digest);
    expect(store.requests.filter((request) => request.refused && request.auth === "header")).toEqual([]);
  });

  it("refuses a presigned URL once it has expired (S3_PRESIGN_TTL)", async () => {
    const shortLived = await startCoordinator(path.join(tmp.dir, "state-ttl"), undefined, s3Env(store, { LOOPWARDEN_S3_PRESIGN_TTL: "1s" }));
    try {
      const loop = await createLoop(shortLived.url, "ttl");
      const bytes = randomBytes(1024);
      const intent = await intend(shortLived.url, loop, { sha256: sha256(bytes), size: bytes.length, content_type: "application/octet-stream" });
      if (intent.status !== "upload") throw new Error(`expected an upload, got ${intent.status}`);
      expect(new URL(intent.url).searchParams.get("X-Amz-Expires")).toBe("1");
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      const late = await putToStorage(intent.url, bytes, "application/octet-stream", intent.headers);
      expect(late.status).toBe(403);
      expect(await late.text()).toMatch(/Request has expired/);
      expect(await storedKeys(store, `loops/${loop}/`)).toEqual([]);
    } finally {
      await shortLived.stop();
    }
  });
});
