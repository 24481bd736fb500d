// `npm run bench:artifacts`: artifact upload throughput (DESIGN §10), the runner's own upload code next to
// `curl -T` of a file of the same size to the same endpoint (the floor), in both storage modes. Binding
// mode: the runner streams the bytes through the worker into the R2 binding, one PUT up to 95 MiB, parts
// of 64 MiB above. S3 mode: the runner PUTs straight to an S3-compatible store (s3rver here) at the
// presigned URLs the coordinator answers, one PUT up to 95 MiB, one presigned UploadPart per 64 MiB part
// above. Files of 10 MiB and 500 MiB of random bytes; each repetition uploads fresh bytes, so the
// content-addressed store never answers "exists"; loopwarden and curl alternate. What is timed for
// loopwarden is `Client.uploadArtifactFile` (runner/src/coordinator/client.ts), the call the runner makes for each of
// a contract's `artifacts` files, on a loop created through the API: the sha256 pass over the file, the
// upload intent, the PUT or parts (PARALLEL_PARTS at a time in S3 mode), `complete`, and in S3 mode the intent asked
// again after a single PUT (the coordinator verifies and records the object then); and the process's peak
// RSS while it runs. Each mode and size's first upload is
// downloaded through the coordinator and its sha256 compared, so the figures are of correct uploads.
// Writes bench/results/artifacts.md. Prints figures; asserts nothing but the uploads' correctness. Goal
// (the artifacts issue): the upload's throughput as a ratio to curl's floor, per mode and size.
import { spawn, spawnSync } from "node:child_process";
import { createHash, randomFillSync } from "node:crypto";
import { closeSync, existsSync, fsyncSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { PARALLEL_PARTS } from "../runner/src/coordinator/artifact-transfers.js";
import { Client } from "../runner/src/coordinator/client.js";
import { freePort } from "../runner/src/coordinator/free-port.js";
import { ArtifactIntentResponse } from "#shared/wire/api.js";
import { Contract } from "#shared/wire/contract.js";
import { api, startCoordinator, TEST_OWNER_TOKEN, type TestCoordinator } from "../test/support/cli.js";
import type { ArtifactStorage } from "../worker/src/artifacts/artifact-storage.js";
import { s3Storage } from "../worker/src/artifacts/artifact-storage-s3.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const MiB = 1024 * 1024;
/** `tsx bench/artifacts.ts --sizes 10 --repetitions 1 --only binding` tries other ones (printed, not written to results). */
const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const SIZES_MIB = option("--sizes")?.split(",").map(Number) ?? [10, 500];
const REPETITIONS = Number(option("--repetitions") ?? 3);
const only = option("--only");
const TRIAL = args.length > 0;
/** The coordinator's split (worker/src/artifacts/artifact-limits.ts, typed for workerd): one PUT up to 95 MiB, else 64 MiB parts. */
const PUT_MAX_BYTES = 95 * MiB;
const CONTENT_TYPE = "application/octet-stream";
const BUCKET = "loopwarden-bench";
// s3rver's built-in account.
const ACCESS_KEY_ID = "S3RVER";
const SECRET_ACCESS_KEY = "S3RVER";

type Mode = "binding" | "s3";

const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;
const seconds = (ms: number) => (ms >= 10_000 ? (ms / 1000).toFixed(1) : (ms / 1000).toFixed(2));
const spread = (values: number[]) => `${seconds(median(values))} s (${seconds(Math.min(...values))}–${seconds(Math.max(...values))})`;
const rate = (bytes: number, ms: number) => `${(bytes / MiB / (ms / 1000)).toFixed(0)} MiB/s`;

// ---- files --------------------------------------------------------------------------------------------

/** Writes `bytes` random bytes to `file` a MiB at a time (never the whole file in memory), flushed to disk; answers their sha256. */
function randomFile(file: string, bytes: number): string {
  const hash = createHash("sha256");
  const chunk = Buffer.allocUnsafe(MiB);
  const fd = openSync(file, "w");
  try {
    for (let written = 0; written < bytes; written += MiB) {
      const length = Math.min(MiB, bytes - written);
      randomFillSync(chunk, 0, length);
      writeSync(fd, chunk, 0, length);
      hash.update(chunk.subarray(0, length));
    }
    // Flushed now, so the kernel's write-back of these pages does not fall inside a timed upload.
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return hash.digest("hex");
}

/**
 * Writes every dirty page back to disk (`sync`), untimed, before each timed upload: what the stores wrote
 * during the uploads before (s3rver keeps parts it was sent and never completed, and copies the parts
 * on `complete`) is otherwise still being written back, and slows the writes of whichever upload comes next.
 */
function settleDisk(): void {
  spawnSync("sync", [], { stdio: "ignore" });
}

/** `file` cut into files of `partSize` bytes (the last shorter), for curl to send part by part. */
function splitFile(file: string, size: number, partSize: number): string[] {
  const parts: string[] = [];
  const chunk = Buffer.allocUnsafe(MiB);
  const input = openSync(file, "r");
  try {
    for (let start = 0; start < size; start += partSize) {
      const part = `${file}.part${parts.length + 1}`;
      const output = openSync(part, "w");
      try {
        for (let offset = start; offset < Math.min(start + partSize, size);) {
          const read = readSync(input, chunk, 0, Math.min(MiB, start + partSize - offset, size - offset), offset);
          writeSync(output, chunk, 0, read);
          offset += read;
        }
        fsyncSync(output);
      } finally {
        closeSync(output);
      }
      parts.push(part);
    }
  } finally {
    closeSync(input);
  }
  return parts;
}

// ---- the store (S3 mode) and curl ---------------------------------------------------------------------

interface Started {
  name: string;
  pid: number;
  stop(): Promise<void>;
}

/** s3rver in a process of its own (its CLI), so the store never shares this process's event loop with the client it measures. */
async function startS3rver(directory: string): Promise<Started & { endpoint: string }> {
  const bin = createRequire(import.meta.url).resolve("s3rver/bin/s3rver.js");
  const port = await freePort();
  const child = spawn(process.execPath, [bin, "-d", directory, "-a", "127.0.0.1", "-p", String(port), "--silent", "--configure-bucket", BUCKET], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const pid = child.pid;
  if (pid === undefined) throw new Error("s3rver did not start");
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    await exited;
  };
  const endpoint = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`s3rver exited with ${child.exitCode}: ${stderr}`);
    const listed = await fetch(`${endpoint}/${BUCKET}?max-keys=1`).then(
      (response) => response.ok,
      () => false,
    );
    if (listed) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`s3rver did not answer within 30 s: ${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { name: "s3rver", pid, endpoint, stop };
}

interface Transfer {
  file: string;
  url: string;
}

/** Runs curl with `argv` and answers its exit code, its output and its wall time. */
async function runCurl(argv: string[]): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  const started = performance.now();
  const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn("curl", argv, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString()));
    child.on("error", reject);
    child.on("close", (exitCode) => resolve({ code: exitCode, stdout: out, stderr: err }));
  });
  return { code, stdout, stderr, ms: performance.now() - started };
}

/**
 * `curl -T` of each file to its URL in one curl process (one after the other on one connection, or
 * `parallel` at once), with the same headers; answers the command's wall time. `Expect: 100-continue`,
 * which curl sends for bodies over 1 MiB and then waits up to a second for an answer to, is turned off:
 * the runner's fetch never sends it.
 */
async function curlUpload(transfers: readonly Transfer[], headers: Record<string, string>, parallel = 1): Promise<number> {
  return (await curlTransfers(transfers, headers, parallel)).ms;
}

/**
 * `curlUpload`, answering each transfer's ETag too (in transfer order): the ETag header storage answered
 * (S3), or the `etag` of the coordinator's JSON answer (a part sent through the worker).
 */
async function curlTransfers(transfers: readonly Transfer[], headers: Record<string, string>, parallel = 1): Promise<{ ms: number; etags: string[] }> {
  const argv = [
    "-sS",
    "-H",
    "Expect:",
    "-w",
    "%{http_code} %{size_upload} %header{etag}\\n",
    ...(parallel > 1 ? ["--parallel", "--parallel-max", String(parallel)] : []),
  ];
  for (const [name, value] of Object.entries(headers)) argv.push("-H", `${name}: ${value}`);
  // Each -T and -o goes with the URL that follows it; an answer is kept to say why, should a transfer fail.
  const answerFiles = transfers.map((transfer, index) => `${transfer.file}.answer${index + 1}`);
  transfers.forEach((transfer, index) => argv.push("-T", transfer.file, "-o", answerFiles[index] ?? "/dev/null", transfer.url));
  const { code, stdout, stderr, ms: elapsed } = await runCurl(argv);
  const answers = stdout.trim().split("\n");
  const bodies = answerFiles.map((file) => (existsSync(file) ? readFileSync(file, "utf8").slice(0, 300) : ""));
  for (const file of answerFiles) rmSync(file, { force: true });
  if (code !== 0 || answers.length !== transfers.length || answers.some((answer) => !/^20[01] \d+ ?/.test(answer))) {
    const failed = answers.flatMap((answer, index) =>
      /^20[01] /.test(answer) ? [] : [`part ${index + 1} of ${transfers.length}: ${answer} ${bodies[index] ?? ""}`],
    );
    throw new Error(`curl exited ${code}${stderr ? ` (${stderr.trim()})` : ""}; ${failed.join("; ")}`);
  }
  // With --parallel, curl writes each -w line as its transfer ends: the ETags are read in that order only
  // when the transfers went one after another (the complete floor's).
  const etags = answers.map((answer, index) => answer.split(" ")[2] || etagOfAnswer(bodies[index] ?? ""));
  return { ms: elapsed, etags };
}

/** The `etag` of a part's JSON answer from the coordinator (`{ part_number, etag }`), or "". */
function etagOfAnswer(body: string): string {
  try {
    const etag = (JSON.parse(body) as { etag?: unknown }).etag;
    return typeof etag === "string" ? etag : "";
  } catch {
    return "";
  }
}

/**
 * `curl -X POST` of a multipart upload's `complete` (its JSON body written to `bodyFile` first), with the
 * owner's token; answers the command's wall time. The coordinator answers 202 `verifying`.
 */
async function curlComplete(url: string, body: string, bodyFile: string): Promise<number> {
  writeFileSync(bodyFile, body);
  const argv = ["-sS", "-X", "POST", "-H", "Expect:", "-H", "Content-Type: application/json", "-H", `Authorization: Bearer ${TEST_OWNER_TOKEN}`];
  argv.push("--data-binary", `@${bodyFile}`, "-o", `${bodyFile}.answer`, "-w", "%{http_code}", url);
  const { code: status, stdout, stderr, ms: elapsed } = await runCurl(argv);
  const answer = existsSync(`${bodyFile}.answer`) ? readFileSync(`${bodyFile}.answer`, "utf8").slice(0, 300) : "";
  rmSync(bodyFile, { force: true });
  rmSync(`${bodyFile}.answer`, { force: true });
  if (status !== 0 || stdout.trim() !== "202")
    throw new Error(`curl's complete exited ${status}${stderr ? ` (${stderr.trim()})` : ""}: HTTP ${stdout.trim()} ${answer}`);
  return elapsed;
}

// ---- the coordinator's side ---------------------------------------------------------------------------

/** A loop made through the API, what uploads are scoped to. */
async function createLoop(client: Client, key: string): Promise<string> {
  const created = await client.createLoop({
    idempotency_key: `bench-artifacts-${key}-${process.pid}-${Date.now()}`,
    contract: Contract.parse({ name: `bench-artifacts-${key}`, mode: "check_fixpoint", gates: [{ name: "check", run: "true" }], agent: { run: "true" } }),
    t0: {
      commit: "0".repeat(40),
      observation: {
        gates: [{ name: "check", exit_code: 1, signal: null, timed_out: false, duration_ms: 1, log: null }],
        tests: { passing: [], failing: [] },
      },
    },
  });
  return created.loop.loop_id;
}

/**
 * One of this bench's own requests (untimed), sent again when its connection was dropped: a pooled
 * keep-alive connection can be found closed by the coordinator after a long curl upload ("other side
 * closed"). The runner's client retries such failures itself (runner/src/coordinator/client.ts `send`).
 */
async function untimed(url: string, init: RequestInit): Promise<Response> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await api(url, init);
    } catch (error) {
      if (attempt >= 3) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** An upload intent, as the runner's client sends it: what the coordinator tells a file of this digest and size to do. */
async function intend(url: string, loopId: string, sha256: string, size: number): Promise<ArtifactIntentResponse> {
  const response = await untimed(`${url}/v1/loops/${loopId}/artifacts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ sha256, size, content_type: CONTENT_TYPE, name: "floor.bin" }),
  });
  if (response.status !== 200) throw new Error(`intent answered ${response.status}: ${await response.text()}`);
  return ArtifactIntentResponse.parse(await response.json());
}

/** Aborts a multipart upload curl sent the parts of (nothing completes it: its bytes were the floor's, never an artifact). */
async function abortUpload(url: string, abortUrl: string): Promise<void> {
  const response = await untimed(`${url}${abortUrl}`, { method: "DELETE" });
  if (!response.ok) throw new Error(`abort answered ${response.status}: ${await response.text()}`);
  await response.body?.cancel();
}

/** One traced request of the runner's client (LOOPWARDEN_TRACE_HTTP=1): what it was for, and its time. */
interface Traced {
  phase: string;
  /** The HTTP status, or the connection error's code when the request got no answer. */
  status: string;
  ms: number;
  /** When the request ended (its trace line was written), on this process's clock. */
  end: number;
}

/** A request that was answered with success, not one the client then sent again. */
const isAnswered = (request: Traced) => /^2\d\d$/.test(request.status);

/** Which step of an upload a traced request was (runner/src/coordinator/client.ts `uploadBlob`). */
function phaseOf(method: string, target: string, earlier: readonly Traced[]): string {
  const where = target.split("?")[0] ?? "";
  if (method === "POST" && where.endsWith("/artifacts"))
    return earlier.some((request) => request.phase === "intent" && isAnswered(request)) ? "intent again" : "intent";
  if (method === "POST" && where.endsWith("/complete")) return "complete";
  if (method === "PUT") return where.includes("/parts/") || target.includes("partNumber=") ? "parts" : "PUT";
  return method;
}

/**
 * Times `Client.uploadArtifactFile` (the runner's upload of a file), with its own per-request trace lines
 * (LOOPWARDEN_TRACE_HTTP=1, which it writes to stderr) taken aside for the breakdown of where the time went.
 */
async function timedUpload(
  client: Client,
  loopId: string,
  file: string,
): Promise<{ ms: number; verifiedMs: number; sha256: string; requests: Traced[]; peakRssMiB: number }> {
  const requests: Traced[] = [];
  // The process's resident memory, sampled while the upload runs: the client's buffers, and whatever else this process holds.
  let peakRss = process.memoryUsage().rss;
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 10);
  const write = process.stderr.write;
  process.env.LOOPWARDEN_TRACE_HTTP = "1";
  process.stderr.write = ((chunk: unknown, ...rest: unknown[]) => {
    const match = typeof chunk === "string" ? /^loopwarden http: (\S+) (\S+) (.+) sent \d+ B(?: gzip)? in (\d+) ms\n$/.exec(chunk) : null;
    if (!match) return (write as (...all: unknown[]) => boolean).call(process.stderr, chunk, ...rest);
    requests.push({ phase: phaseOf(match[1] ?? "", match[2] ?? "", requests), status: match[3] ?? "", ms: Number(match[4]), end: performance.now() });
    return true;
  }) as typeof process.stderr.write;
  const started = performance.now();
  let answered: { ms: number; ref: Awaited<ReturnType<Client["uploadArtifactFile"]>> };
  try {
    const ref = await client.uploadArtifactFile(loopId, file, path.basename(file), CONTENT_TYPE);
    answered = { ms: performance.now() - started, ref };
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
  } finally {
    clearInterval(sampler);
    process.stderr.write = write;
    delete process.env.LOOPWARDEN_TRACE_HTTP;
  }
  // Time to verified: until the coordinator's check of the object after its answer (issue 30) has ended,
  // as the runner waits for it before a report cites the file (`awaitVerified`, runner/src/evaluation/
  // artifact-files.ts). Waited for before the next transfer, so no check runs beside a timed one.
  await client.awaitVerified(loopId, answered.ref);
  const verifiedMs = performance.now() - started;
  return { ms: answered.ms, verifiedMs, sha256: answered.ref.sha256, requests, peakRssMiB: peakRss / MiB };
}

/** The artifact downloaded through the coordinator (streamed, never whole in memory): its size and sha256. */
async function downloaded(client: Client, loopId: string, sha256: string): Promise<{ size: number; sha256: string }> {
  const response = await client.artifactResponse(loopId, sha256);
  const hash = createHash("sha256");
  let size = 0;
  const reader = (response.body ?? new ReadableStream<Uint8Array>()).getReader();
  for (let next = await reader.read(); !next.done; next = await reader.read()) {
    hash.update(next.value);
    size += next.value.byteLength;
  }
  return { size, sha256: hash.digest("hex") };
}

// ---- the measurements ---------------------------------------------------------------------------------

interface Row {
  mode: Mode;
  sizeMiB: number;
  load: number;
  how: string;
  loopwarden: number[];
  /** The floors: the same requests the runner is answered, and for multipart the extra ones. */
  floors: { name: string; ms: number[] }[];
  phases: Map<string, number[]>;
  /** The process's peak RSS during each upload of loopwarden's, MiB. */
  peakRss: number[];
  /** The first floor's `complete` at 500 MiB, curl's POST of it, ms (its parts are the rest of that floor). */
  curlComplete: number[];
  /** From the call to the end of the coordinator's check after its answer (the artifact recorded), ms. */
  toVerified: number[];
  verified: string;
}

const rows: Row[] = [];
/** The runner's requests that failed and that its client sent again (runner/src/coordinator/client.ts `send`). */
const resent: string[] = [];
/** curl floors that failed and were run again. */
const curlFailures: string[] = [];
const SINGLE_FLOOR = "curl -T, the same URL";
const COMPLETE_FLOOR = "curl -T of each part, in sequence, then `complete`";
const PARTS_FLOOR = "curl -T of each part, in sequence";
const PARALLEL_FLOOR = `curl -T of the parts, ${PARALLEL_PARTS} at a time (first repetition only)`;
const WHOLE_FLOOR = "curl -T of the whole file, one presigned PUT";
const FLOOR_ORDER = [SINGLE_FLOOR, COMPLETE_FLOOR, PARTS_FLOOR, PARALLEL_FLOOR, WHOLE_FLOOR];

async function measure(mode: Mode, coordinator: TestCoordinator, files: string, s3: { endpoint: string; storage: ArtifactStorage } | null): Promise<void> {
  const client = new Client(coordinator.url, { token: TEST_OWNER_TOKEN });
  const loopId = await createLoop(client, mode);
  for (const sizeMiB of SIZES_MIB) {
    const size = sizeMiB * MiB;
    const multipart = size > PUT_MAX_BYTES;
    const row: Row = {
      mode,
      sizeMiB,
      load: os.loadavg()[0] ?? Number.NaN,
      how: "",
      loopwarden: [],
      floors: [],
      phases: new Map(),
      peakRss: [],
      curlComplete: [],
      toVerified: [],
      verified: "",
    };
    /** Runs a floor and records its time; one that fails (a dropped connection) is told in the notes and run once more, from a new intent. */
    const floor = async (name: string, run: () => Promise<number>) => {
      for (let attempt = 1; ; attempt++) {
        try {
          settleDisk();
          const ms = await run();
          const found = row.floors.find((entry) => entry.name === name);
          if (found) found.ms.push(ms);
          else row.floors.push({ name, ms: [ms] });
          return;
        } catch (error) {
          curlFailures.push(`${mode} mode, ${sizeMiB} MiB, ${name}: ${(error as Error).message}`);
          console.error(`  ${curlFailures.at(-1)}`);
          if (attempt >= 2) throw error;
        }
      }
    };
    for (let repetition = 0; repetition < REPETITIONS; repetition++) {
      // loopwarden: the runner's upload of a file of fresh bytes.
      const mine = path.join(files, `loopwarden-${mode}-${sizeMiB}-${repetition}.bin`);
      const digest = randomFile(mine, size);
      settleDisk();
      const upload = await timedUpload(client, loopId, mine);
      if (upload.sha256 !== digest) throw new Error(`the client hashed ${mine} as ${upload.sha256}; it was written as ${digest}`);
      row.loopwarden.push(upload.ms);
      row.peakRss.push(upload.peakRssMiB);
      row.toVerified.push(upload.verifiedMs);
      const local = upload.ms - wallTime(upload.requests);
      for (const [phase, ms] of [["outside requests", local] as const, ...summed(upload.requests)])
        row.phases.set(phase, [...(row.phases.get(phase) ?? []), ms]);
      if (repetition === 0) {
        const back = await downloaded(client, loopId, digest);
        row.verified = back.sha256 === digest && back.size === size ? "byte-exact" : `**NOT byte-exact** (${back.size} bytes, sha256 ${back.sha256})`;
        if (back.sha256 !== digest || back.size !== size) process.exitCode = 1;
        const counts = upload.requests.filter(isAnswered).map((request) => request.phase);
        row.how = multipart
          ? `intent, ${counts.filter((phase) => phase === "parts").length} parts ${mode === "s3" ? `${PARALLEL_PARTS} at a time` : "in sequence"}, complete`
          : `intent, one PUT${counts.includes("intent again") ? ", intent again" : ""}`;
      }
      for (const request of upload.requests.filter((request) => !isAnswered(request))) {
        resent.push(`${mode} mode, ${sizeMiB} MiB, repetition ${repetition + 1}: ${request.phase} answered ${request.status} after ${request.ms} ms`);
      }
      rmSync(mine, { force: true });

      // curl: a file of fresh bytes of the same size, to the URLs an intent for it answers (asked beforehand, untimed).
      const theirs = path.join(files, `curl-${mode}-${sizeMiB}-${repetition}.bin`);
      const theirDigest = randomFile(theirs, size);
      const auth = mode === "binding" ? { Authorization: `Bearer ${TEST_OWNER_TOKEN}` } : {};
      const absolute = (url: string) => (url.startsWith("/") ? `${coordinator.url}${url}` : url);
      if (!multipart) {
        await floor(SINGLE_FLOOR, async () => {
          const intent = await intend(coordinator.url, loopId, theirDigest, size);
          if (intent.status !== "upload") throw new Error(`expected one PUT for ${sizeMiB} MiB, the intent answered ${intent.status}`);
          // With the headers the intent names, as the runner sends them (S3 mode's signed x-amz-checksum-sha256).
          return curlUpload([{ file: theirs, url: absolute(intent.url) }], { ...auth, "Content-Type": CONTENT_TYPE, ...intent.headers });
        });
      } else {
        const parts = splitFile(theirs, size, 64 * MiB);
        // The parts a few at a time only in the first repetition: in binding mode each is most of a minute here.
        const ways =
          repetition === 0
            ? ([
                [PARTS_FLOOR, 1],
                [PARALLEL_FLOOR, PARALLEL_PARTS],
              ] as const)
            : ([[PARTS_FLOOR, 1]] as const);
        for (const [name, parallel] of ways) {
          await floor(name, async () => {
            const intent = await intend(coordinator.url, loopId, theirDigest, size);
            if (intent.status !== "multipart") throw new Error(`expected a multipart upload for ${sizeMiB} MiB, the intent answered ${intent.status}`);
            if (intent.part_urls.length !== parts.length) throw new Error(`${intent.part_urls.length} part URLs for ${parts.length} parts`);
            const transfers = intent.part_urls.map((url, index) => ({ file: parts[index] ?? "", url: absolute(url) }));
            try {
              return await curlUpload(transfers, auth, parallel);
            } finally {
              // s3rver 3.7.1 has no AbortMultipartUpload (405): its parts stay in its directory, removed at the end.
              if (mode === "binding") await abortUpload(coordinator.url, intent.abort_url);
            }
          });
        }
        // The runner's requests, by curl: the parts one after another, then `complete`, which the
        // coordinator answers once storage has put the object together and its size and the quota are
        // checked. Last, since curl's file is then an artifact: an intent for it answers "exists".
        await floor(COMPLETE_FLOOR, async () => {
          const intent = await intend(coordinator.url, loopId, theirDigest, size);
          if (intent.status !== "multipart") throw new Error(`expected a multipart upload for ${sizeMiB} MiB, the intent answered ${intent.status}`);
          const sent = await curlTransfers(
            intent.part_urls.map((url, index) => ({ file: parts[index] ?? "", url: absolute(url) })),
            auth,
          );
          const completion = JSON.stringify({ parts: sent.etags.map((etag, index) => ({ part_number: index + 1, etag })) });
          const completing = await curlComplete(absolute(intent.complete_url), completion, path.join(files, "complete.json"));
          row.curlComplete.push(completing);
          return sent.ms + completing;
        });
        // Untimed: the coordinator's check of curl's object after its answer ends before anything else is timed.
        const checked = await intend(coordinator.url, loopId, theirDigest, size);
        if (checked.status !== "exists") throw new Error(`curl's completed upload was not recorded: the intent answered ${checked.status}`);
        for (const part of parts) rmSync(part, { force: true });
        if (s3) {
          // S3 takes one PUT of up to 5 GiB: the whole file to one URL presigned as the worker presigns (length, type and SHA-256 bound).
          const key = `bench-floor/${theirDigest}`;
          const { url, headers } = await s3.storage.uploadUrl({
            key,
            path: key,
            sha256: theirDigest,
            size,
            contentType: CONTENT_TYPE,
            recordedContentType: CONTENT_TYPE,
            name: "floor.bin",
          });
          await floor(WHOLE_FLOOR, () => curlUpload([{ file: theirs, url }], { "Content-Type": CONTENT_TYPE, ...headers }));
          // Only to keep the disk free: s3rver's directory is removed at the end anyway.
          await fetch(`${s3.endpoint}/${BUCKET}/${key}`, { method: "DELETE" }).then(
            (response) => response.body?.cancel(),
            () => undefined,
          );
        }
      }
      rmSync(theirs, { force: true });
      console.error(
        `${mode} ${sizeMiB} MiB #${repetition + 1}: loopwarden ${seconds(upload.ms)} s (verified at ${seconds(upload.verifiedMs)} s); ${row.floors.map((entry) => `${entry.name} ${seconds(entry.ms.at(-1) ?? 0)} s`).join("; ")}`,
      );
    }
    // The first floor is the ratio's: the runner's own requests, by curl.
    row.floors.sort((a, b) => FLOOR_ORDER.indexOf(a.name) - FLOOR_ORDER.indexOf(b.name));
    rows.push(row);
  }
}

/** The time during which at least one of `requests` was under way: parts sent at once count once. */
function wallTime(requests: readonly Traced[]): number {
  const spans = requests.map((request) => [request.end - request.ms, request.end] as const).sort((a, b) => a[0] - b[0]);
  let total = 0;
  let reached = Number.NEGATIVE_INFINITY;
  for (const [start, end] of spans) {
    if (end <= reached) continue;
    total += end - Math.max(start, reached);
    reached = end;
  }
  return total;
}

/** A trace's request times by phase, in the order they first came: each phase's wall time (parts sent at once count once). */
function summed(requests: readonly Traced[]): [string, number][] {
  const phases = new Map<string, Traced[]>();
  for (const request of requests) phases.set(request.phase, [...(phases.get(request.phase) ?? []), request]);
  return [...phases].map(([phase, traced]) => [phase, wallTime(traced)]);
}

/** curl's own start and exit, which every floor includes (the runner's client is timed inside this process). */
function curlStartMs(): number {
  return median(
    Array.from({ length: 5 }, () => {
      const started = performance.now();
      spawnSync("curl", ["--version"], { stdio: "ignore" });
      return performance.now() - started;
    }),
  );
}

// ---- the run ------------------------------------------------------------------------------------------

if (spawnSync("curl", ["--version"], { stdio: "ignore" }).status !== 0) throw new Error("this bench needs curl (apt-get install -y curl)");
const work = mkdtempSync(path.join(os.tmpdir(), "lw-bench-artifacts-"));
const files = path.join(work, "files");
mkdirSync(files);
const benchStarted = performance.now();
const running: Started[] = [];
const stopped: string[] = [];
const curlStart = curlStartMs();
try {
  if (only !== "s3") {
    const coordinator = await startCoordinator(path.join(work, "binding-state"));
    running.push({ name: "`loopwarden serve`, binding mode", pid: coordinator.pid, stop: () => coordinator.stop() });
    await measure("binding", coordinator, files, null);
  }
  if (only !== "binding") {
    const store = await startS3rver(path.join(work, "s3rver"));
    running.push(store);
    const coordinator = await startCoordinator(path.join(work, "s3-state"), undefined, {
      LOOPWARDEN_S3_ENDPOINT: store.endpoint,
      LOOPWARDEN_S3_BUCKET: BUCKET,
      LOOPWARDEN_S3_ACCESS_KEY_ID: ACCESS_KEY_ID,
      LOOPWARDEN_S3_SECRET_ACCESS_KEY: SECRET_ACCESS_KEY,
    });
    running.push({ name: "`loopwarden serve`, S3 mode", pid: coordinator.pid, stop: () => coordinator.stop() });
    // The worker's own storage, in this process: the whole-file floor's URL is presigned as the worker presigns.
    const storage = s3Storage({
      endpoint: store.endpoint,
      bucket: BUCKET,
      region: "auto",
      accessKeyId: ACCESS_KEY_ID,
      secretAccessKey: SECRET_ACCESS_KEY,
      presignTtlSeconds: 900,
    });
    await measure("s3", coordinator, files, { endpoint: store.endpoint, storage });
  }
} finally {
  for (const started of running.reverse()) {
    await started.stop();
    stopped.push(`${started.name} (pid ${started.pid})`);
  }
  rmSync(work, { recursive: true, force: true });
}
const benchSeconds = (performance.now() - benchStarted) / 1000;

// ---- the report ---------------------------------------------------------------------------------------

const MODE_NAMES: Record<Mode, string> = { binding: "binding (through the worker into R2)", s3: "S3 (presigned, straight to s3rver)" };
say("# Artifact uploads: the runner's client next to `curl -T`");
say();
say(
  `\`npm run bench:artifacts\` (\`npm run build:worker && npm run build:cli && tsx bench/artifacts.ts\`), ${new Date().toISOString().slice(0, 10)}, node ${process.version}, curl ${(spawnSync("curl", ["--version"], { encoding: "utf8" }).stdout.split(" ")[1] ?? "?").trim()}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? "unknown"}), ${(os.totalmem() / 1024 ** 3).toFixed(0)} GiB; the whole bench took ${benchSeconds.toFixed(0)} s.`,
);
say();
say(
  `Each row uploads files of random bytes, fresh for every upload (content-addressed storage never answers "exists"), ${REPETITIONS} repetitions, loopwarden and curl alternating; median and range of the wall time, throughput at the median. **loopwarden** is \`Client.uploadArtifactFile\` (runner/src/coordinator/client.ts), the runner's upload of one of a contract's \`artifacts\` files, from the call to its answer: the sha256 pass over the file, the upload intent, the PUT or the parts, \`complete\`, and in S3 mode the intent asked again after a single PUT. The coordinator answers \`complete\` and that intent \`verifying\` and checks the object's sha256 after its answer (issue 30): **to verified** is from the same call to the end of that check (the artifact recorded, as \`Client.awaitVerified\` hears it, which the runner waits for before a report cites the file), and its ratio to the same floor is beside it. **curl** is \`curl -T FILE URL\` of another file of the same size to the URLs an intent for that file answered (the intent asked beforehand, untimed): the same endpoint, the same requests, the bytes alone; for a multipart upload, its parts one after another and then \`complete\` (\`curl -X POST\` of the parts' ETags), as the runner sends them, the coordinator's check after curl's \`complete\` waited for, untimed, before anything else is timed. The ratio is loopwarden's median over the floor's median. Both coordinators are \`loopwarden serve\` (the built worker in workerd through Miniflare) in processes of their own, as is the store; the client and curl run on the same 2 cores as they do.`,
);
say();
say("| mode | file | loopwarden's requests | loopwarden | MiB/s | floor | curl | MiB/s | **ratio** | to verified | ratio | download |");
say("|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|");
for (const row of rows) {
  const bytes = row.sizeMiB * MiB;
  const [first, ...others] = row.floors;
  if (!first) continue;
  const ratio = (floor: number[]) => `**${(median(row.loopwarden) / median(floor)).toFixed(2)}×**`;
  say(
    `| ${MODE_NAMES[row.mode]} | ${row.sizeMiB} MiB | ${row.how} | ${spread(row.loopwarden)} | ${rate(bytes, median(row.loopwarden))} | ${first.name} | ${spread(first.ms)} | ${rate(bytes, median(first.ms))} | ${ratio(first.ms)} | ${spread(row.toVerified)} | ${(median(row.toVerified) / median(first.ms)).toFixed(2)}× | ${row.verified} |`,
  );
  for (const other of others) {
    say(
      `| | | | | | ${other.name} | ${spread(other.ms)} | ${rate(bytes, median(other.ms))} | ${(median(row.loopwarden) / median(other.ms)).toFixed(2)}× | | ${(median(row.toVerified) / median(other.ms)).toFixed(2)}× | |`,
    );
  }
}
say();
say(
  `Where loopwarden's time went (median ms over the repetitions; each request as the client's own trace times it, LOOPWARDEN_TRACE_HTTP=1; a phase whose requests overlap, S3 mode's parts sent ${PARALLEL_PARTS} at a time, counts the time during which at least one was under way). \`outside requests\` is the call's time less the time during which a request was under way: the sha256 pass over the file before anything is sent (the intent names the digest), and the client's own work between requests. \`intent again\` is S3 mode's second intent after a single PUT (\`after_upload\`), answered \`verifying\` once the coordinator found the object's size; \`complete\` is where the coordinator completes a multipart upload, checks its size and the quota, and answers \`verifying\`. \`check after\` is the wait for the coordinator's sha256 check of the object after that answer (to verified less the call's time: \`Client.awaitVerified\`). \`peak RSS\` is this process's (the client's) resident memory at its highest while the upload ran, sampled every 10 ms, MiB (the most over the repetitions).`,
);
say();
const PHASES = ["outside requests", "intent", "PUT", "parts", "complete", "intent again"];
say(`| mode | file | load avg | ${PHASES.join(" | ")} | total | check after | peak RSS |`);
say(`|---|---:|---:|${PHASES.map(() => "---:").join("|")}|---:|---:|---:|`);
for (const row of rows) {
  const cells = PHASES.map((phase) => {
    const values = row.phases.get(phase);
    return values ? String(Math.round(median(values))) : "–";
  });
  say(
    `| ${row.mode} | ${row.sizeMiB} MiB | ${row.load.toFixed(1)} | ${cells.join(" | ")} | ${Math.round(median(row.loopwarden))} | ${Math.round(median(row.toVerified.map((ms, index) => ms - (row.loopwarden[index] ?? ms))))} | ${Math.round(Math.max(...row.peakRss))} |`,
  );
}
say();
say("## Where each ratio comes from");
say();
say(
  "Medians of the second table, against the first floor's median (so the parts need not add up to the whole): the bytes' way to storage, the client's against curl's (at 500 MiB, curl's parts without its `complete`); the coordinator's answer once the bytes are there, to the client and to curl, and its check after it; the rest.",
);
say();
for (const row of rows) {
  const phase = (name: string) => median(row.phases.get(name) ?? [Number.NaN]);
  const sending = row.phases.has("parts") ? phase("parts") : phase("PUT");
  const check: [string, number] | null = row.phases.has("complete")
    ? ["`complete`", phase("complete")]
    : row.phases.has("intent again")
      ? ["the intent asked again", phase("intent again")]
      : null;
  const after = median(row.toVerified.map((ms, index) => ms - (row.loopwarden[index] ?? ms)));
  const floorMs = median(row.floors[0]?.ms ?? [Number.NaN]);
  const curlCompleteMs = row.curlComplete.length > 0 ? median(row.curlComplete) : null;
  const curlSending = curlCompleteMs === null ? floorMs : floorMs - curlCompleteMs;
  say(
    `- ${row.mode} mode, ${row.sizeMiB} MiB (${(median(row.loopwarden) / floorMs).toFixed(2)}×): the client sent the bytes in ${seconds(sending)} s against curl's ${seconds(curlSending)} s (${(sending / curlSending).toFixed(2)}×); ${check ? `the coordinator's answer, ${check[0]}, took ${seconds(check[1])} s${curlCompleteMs === null ? "" : ` (to curl's, ${seconds(curlCompleteMs)} s)`}, and its sha256 check after it ${seconds(after)} s more (to verified ${(median(row.toVerified) / floorMs).toFixed(2)}×); ` : "the coordinator checked the bytes as they went into R2 (nothing after them); "}the sha256 pass and the rest outside requests ${seconds(phase("outside requests"))} s; the intent ${seconds(phase("intent"))} s.`,
  );
}
say();
say("## Notes");

/** Each row's ratio to its first floor against the goal's bound, and whether all of them and the peak RSS meet it. */
function goalVerdict(): string {
  let met = true;
  const figures = rows.map((row) => {
    const ratio = median(row.loopwarden) / median(row.floors[0]?.ms ?? [Number.NaN]);
    const bound = row.sizeMiB >= 500 ? 1.2 : 1.5;
    if (!(ratio <= bound)) met = false;
    return `${row.mode} mode ${ratio.toFixed(2)}× at ${row.sizeMiB} MiB`;
  });
  const large = rows.filter((row) => row.sizeMiB >= 500);
  const rss = large.length > 0 ? Math.max(...large.map((row) => Math.max(...row.peakRss))) : null;
  if (rss !== null && !(rss < 200)) met = false;
  return `${figures.join(", ")}${rss === null ? "" : `, peak RSS ${Math.round(rss)} MiB`}: ${met ? "met" : "not met"}`;
}
say();
say(
  `- Goal (issue 30, item 1): in both modes, at most 1.2× \`curl -T\` (the first floor) at 500 MiB and 1.5× at 10 MiB, in one run, and the client's peak RSS under 200 MiB at 500 MiB — ${goalVerdict()}.`,
);
say(
  "- The floor, binding mode: curl PUTs to the coordinator's own upload path, with the owner's token, the URL an intent answered for curl's file (one PUT to `/v1/loops/:id/artifacts/:sha256?name=…` at 10 MiB; at 500 MiB, the eight 64 MiB part URLs `…/uploads/:id/parts/:n`, the coordinator's limit for one request being 95 MiB). A file of other bytes has another digest, so its PUT is stored and checked as the runner's is (R2 refuses bytes that do not hash to the key) rather than answered as a duplicate. The intent is asked before the clock starts: the floor is the bytes' way through the worker into R2, nothing else. The first floor at 500 MiB completes curl's upload as the runner completes its own (`complete` is in both figures; the coordinator's check after it, the whole object read back and hashed, only in loopwarden's time to verified); the other floors send the parts alone, and those uploads are aborted afterwards, never completed.",
);
say(
  `- The floor, S3 mode: the presigned URLs an intent answered for curl's file, straight to s3rver (one PUT at 10 MiB; the eight presigned UploadPart URLs at 500 MiB, then \`complete\` to the coordinator, which completes the upload with s3rver: s3rver puts the object together by copying the parts into a new file and hashing it with MD5, most of the 500 MiB rows' \`complete\`, in both figures; the floor of the parts alone shows the rest). At 500 MiB another floor is one presigned PUT of the whole file (S3 takes up to 5 GiB in one PUT; the coordinator answers multipart above 95 MiB, the same split as binding mode): the ratio to it is the cost of uploading in parts at all, on top of the runner's own. The URL is presigned here by the worker's own S3 storage code (length, content type and SHA-256 bound, the SHA-256 as the signed header curl sends).`,
);
say(
  `- The extra floor "${PARALLEL_PARTS} at a time" (run once per mode, in the first repetition, to keep the bench's time bounded) sends the same parts with \`curl --parallel --parallel-max ${PARALLEL_PARTS}\`: as many at once as the client sends them to presigned storage (runner/src/coordinator/artifact-transfers.ts \`PARALLEL_PARTS\`): the floor for its own way of sending them in S3 mode. Through the coordinator (binding mode) the client sends them one at a time.`,
);
say(
  `- Every curl figure is the \`curl\` command's wall time, its start and exit included (about ${curlStart.toFixed(0)} ms here, \`curl --version\`), with \`-H "Expect:"\`: for a body over 1 MiB curl would otherwise send \`Expect: 100-continue\` and wait for an answer to it before sending, which the runner's fetch never does. The runner's client is timed inside this process, so its figure has no process start.`,
);
say(
  "- Each file is written and flushed to disk (fsync) before its upload, so the kernel's write-back of it does not fall inside a timed upload; both clients then read it from the page cache. Each store writes what it receives to its own disk (the coordinator's R2 under its state directory, s3rver's directory), in both figures alike; every dirty page is written back (`sync`, untimed) before each timed upload, loopwarden's and every floor's, so none starts while an earlier upload's writes are still going to disk.",
);
say(
  "- s3rver is reached directly, without the signature-checking gate test/e2e/artifacts-s3.test.ts puts in front of it (s3rver checks a presigned URL's expiry, not its signature): the gate is a Node proxy every byte would cross, in both figures, and a deployed store has none.",
);
say(
  `- Byte-exactness: the first loopwarden upload of each mode and size was downloaded through the coordinator (streamed from R2 or S3) and its sha256 and size compared with the ones the file was written with: "download" in the table. The client's own digest of every uploaded file was compared too.`,
);
say(
  `- This is a ${os.cpus().length}-core machine shared with other work (the load average as each row started is in the second table); the client, curl, the coordinator's workerd and s3rver run on the same cores, so these figures are this machine's, not a deployment's.`,
);
say(
  resent.length === 0
    ? "- The runner's client sent no request again: every one was answered the first time."
    : `- Requests of the runner's client that failed and that it sent again, as it does (their time is in its figure): ${resent.join("; ")}.`,
);
say(
  curlFailures.length === 0
    ? "- No curl transfer failed."
    : `- curl transfers that failed, each floor then run once more from a new intent (the runner's client would have sent the failed request again itself): ${curlFailures.map((failure) => `\`${failure.replace(/`/g, "'")}\``).join("; ")}.`,
);
say(`- Every process started was stopped by its pid: ${stopped.join(", ")}; the generated files and the stores' directories were deleted.`);

if (!TRIAL) {
  writeFileSync(path.join(root, "bench", "results", "artifacts.md"), `${lines.join("\n")}\n`);
  console.log("\nwritten to bench/results/artifacts.md");
}
