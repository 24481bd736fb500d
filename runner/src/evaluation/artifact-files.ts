import { lstat, readdir } from "node:fs/promises";
import path from "node:path";
import picomatch from "picomatch";
import { INLINE_EVIDENCE_MAX_BYTES, INLINE_EVIDENCE_MAX_FILES, INLINE_EVIDENCE_TOTAL_BYTES, type InlineEvidence } from "#shared/wire/api.js";
import { MAX_ARTIFACT_ERRORS, type ArtifactError, type ArtifactRef } from "#shared/wire/observation.js";
import { CoordinatorError, type Client } from "../coordinator/client.js";
import type { Evaluation } from "./evaluation.js";
import { BodySourceError } from "../coordinator/transfer-watch.js";

// The contract's `artifacts` globs (DESIGN §5, §10): after each evaluation, the files they match in the
// candidate's clone — profiles, flame graphs, benchmark CSVs — are stored with the loop's artifacts by
// digest and named in the observation, so `loopwarden artifacts` and the receipt can point at them.
// The agent controls what the globs match: a file the coordinator refuses (too large, past the loop's
// quota), one that cannot be read or named, or globs that match too many files is noted in the
// observation (`artifact_errors`) and warned about, and the evaluation is reported all the same. A gate's
// log or the metric output refused whole is stored as its last bytes instead, saying so.

/** The most files one evaluation stores; a glob that matches more is a mistake worth a clear limit. */
export const MAX_ARTIFACT_FILES = 1_000;
/** The longest path an observation can name a file by (ArtifactRef's name). */
/** The longest path an artifact is named by (the wire's `ArtifactRef.name`). */
export const MAX_NAME_LENGTH = 200;
/** What is kept of a log refused whole: its last bytes, the most the coordinator takes of these. */
const LOG_TAILS = [1024 * 1024, 64 * 1024, 4 * 1024];
/** Files larger than this get a progress line while they upload. */
const PROGRESS_ABOVE_BYTES = 8 * 1024 * 1024;
/** Uploads at a time. */
const CONCURRENCY = 4;

const CONTENT_TYPES: Record<string, string> = {
  ".json": "application/json",
  ".cpuprofile": "application/json",
  ".heapprofile": "application/json",
  ".svg": "image/svg+xml",
  ".html": "text/html",
  ".csv": "text/csv",
  ".tsv": "text/tab-separated-values",
  ".txt": "text/plain; charset=utf-8",
  ".log": "text/plain; charset=utf-8",
  ".md": "text/markdown",
  ".png": "image/png",
};

/** A file's media type by its extension: a label for listings (the coordinator never renders by it). */
export function contentTypeOf(file: string): string {
  return CONTENT_TYPES[path.extname(file).toLowerCase()] ?? "application/octet-stream";
}

/**
 * The files under `dir` that the globs match, as sorted paths relative to it: regular files only — a
 * symbolic link is never followed (it could point anywhere on the machine) — and nothing under `.git`.
 */
export async function matchArtifacts(dir: string, globs: readonly string[]): Promise<string[]> {
  if (globs.length === 0) return [];
  const matches = picomatch([...globs], { dot: true });
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  const files: string[] = [];
  for (const entry of entries) {
    if (!entry.isFile()) continue;
    const relative = path.relative(dir, path.join(entry.parentPath, entry.name)).split(path.sep).join("/");
    if (relative === ".git" || relative.startsWith(".git/") || !matches(relative)) continue;
    if ((await lstat(path.join(dir, relative))).isSymbolicLink()) continue;
    files.push(relative);
  }
  files.sort();
  if (files.length > MAX_ARTIFACT_FILES) throw new TooManyArtifactFiles(files.length);
  return files;
}

/** Globs that match more files than one evaluation stores. */
export class TooManyArtifactFiles extends Error {
  constructor(readonly count: number) {
    super(`the contract's artifacts globs match ${count} files; at most ${MAX_ARTIFACT_FILES} are stored per evaluation — narrow them`);
    this.name = "TooManyArtifactFiles";
  }
}

/**
 * Why an upload failed, when the reason is the file's rather than the runner's or the network's: the
 * coordinator refused to store it (413 `artifact_too_large`, 507 `quota_exceeded`), its bytes changed
 * while it was sent, or it could not be read. Null for anything else (that error is the job's).
 */
export function fileRefusal(error: unknown): Pick<ArtifactError, "code" | "detail"> | null {
  if (error instanceof CoordinatorError) {
    if (error.status === 413 || error.status === 507) return { code: error.code, detail: `the coordinator refused it: ${error.message}` };
    if (error.status === 400 && ["digest_mismatch", "size_mismatch", "length_mismatch"].includes(error.code)) {
      return { code: error.code, detail: `it changed while it was uploaded: ${error.message}` };
    }
  }
  if (error instanceof BodySourceError)
    return { code: "unreadable", detail: `it changed or vanished while it was uploaded: ${(error.cause as Error).message}` };
  // A file system call on the file itself (hashing it, opening it) failed: gone, a directory now, unreadable.
  if (error instanceof Error && "syscall" in error) return { code: "unreadable", detail: `it could not be read: ${error.message}` };
  return null;
}

/** An entry of `artifact_errors`, within the schema's bounds. */
function artifactError(name: string, size: number | undefined, refusal: Pick<ArtifactError, "code" | "detail">): ArtifactError {
  return {
    name: name.length > MAX_NAME_LENGTH ? `…${name.slice(-(MAX_NAME_LENGTH - 1))}` : name,
    ...(size === undefined ? {} : { size }),
    code: refusal.code.slice(0, 64),
    detail: refusal.detail.slice(0, 1_000),
  };
}

/** At most MAX_ARTIFACT_ERRORS entries: past it, the last one counts the rest. */
export function boundedErrors(errors: readonly ArtifactError[]): ArtifactError[] {
  if (errors.length <= MAX_ARTIFACT_ERRORS) return [...errors];
  const rest = errors.length - (MAX_ARTIFACT_ERRORS - 1);
  return [...errors.slice(0, MAX_ARTIFACT_ERRORS - 1), { name: "*", code: "more", detail: `and ${rest} more files were not stored as they were` }];
}

/** A warning line for an entry of `artifact_errors`. */
export function describeArtifactError(error: ArtifactError): string {
  const size = error.size === undefined ? "" : ` (${formatBytes(error.size)})`;
  return `${error.name === "*" ? "the artifacts globs" : error.name}${size}: ${error.detail}`;
}

function formatBytes(bytes: number): string {
  return bytes >= 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(1)} MiB` : bytes >= 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${bytes} B`;
}

/** What an evaluation stored, and what it could not store as it was. */
export interface StoredFiles {
  refs: ArtifactRef[];
  errors: ArtifactError[];
}

/**
 * Stores a log held in memory (a gate's, the metric output). Refused whole for its size or the loop's
 * quota, its last MiB is stored instead (then 64 KiB, then 4 KiB), headed by a line that says so; refused
 * even then, it is not stored (`ref` null). Either way `error` says what happened.
 */
export async function storeLog(
  client: Client,
  loopId: string,
  name: string,
  bytes: Uint8Array,
  contentType: string,
): Promise<{ ref: ArtifactRef | null; error: ArtifactError | null }> {
  let refusal: Pick<ArtifactError, "code" | "detail"> | null;
  try {
    return { ref: await client.uploadArtifact(loopId, name, bytes, contentType), error: null };
  } catch (error) {
    refusal = fileRefusal(error);
    if (!refusal) throw error;
  }
  for (const tail of LOG_TAILS.filter((size) => size < bytes.byteLength)) {
    const header = `[loopwarden] this log is ${bytes.byteLength} bytes, and the coordinator refused to store it whole (${refusal.code}): its last ${tail} bytes follow\n`;
    const cut = Buffer.concat([Buffer.from(header), bytes.subarray(bytes.byteLength - tail)]);
    try {
      const ref = await client.uploadArtifact(loopId, name, cut, contentType);
      return {
        ref,
        error: artifactError(name, bytes.byteLength, { code: refusal.code, detail: `${refusal.detail}; its last ${tail} bytes were stored instead` }),
      };
    } catch (error) {
      if (!fileRefusal(error)) throw error;
    }
  }
  return {
    ref: null,
    error: artifactError(name, bytes.byteLength, {
      code: refusal.code,
      detail: `${refusal.detail}; not even its last ${LOG_TAILS.at(-1)} bytes could be stored`,
    }),
  };
}

/**
 * Stores an evaluation's gate and task logs (`storeLog`): a log stored as its tail is cited by that
 * tail's digest, one not stored at all by none (`log: null`). Answers what was not stored as it was.
 */
export async function storeLogs(client: Client, loopId: string, evaluation: Evaluation, warn: (text: string) => void): Promise<ArtifactError[]> {
  const errors: ArtifactError[] = [];
  const results = [...evaluation.observation.gates, ...(evaluation.observation.tasks ?? [])];
  for (const log of evaluation.logs) {
    const stored = await storeLog(client, loopId, log.ref.name, log.bytes, log.ref.content_type);
    if (!stored.error) continue;
    errors.push(stored.error);
    warn(describeArtifactError(stored.error));
    for (const result of results) if (result.log === log.ref) result.log = stored.ref;
  }
  return errors;
}

/**
 * Splits an evaluation's logs into those its report carries inline (`evidence`: small ones, within the
 * wire's limits, each digest once) and those uploaded before it. All are uploaded when the coordinator
 * takes no inline evidence (`Client.acceptsEvidence`).
 */
export function inlineLogs(client: Client, logs: Evaluation["logs"]): { inline: Evaluation["logs"]; uploaded: Evaluation["logs"] } {
  if (!client.acceptsEvidence) return { inline: [], uploaded: [...logs] };
  const inline: Evaluation["logs"] = [];
  const uploaded: Evaluation["logs"] = [];
  const digests = new Set<string>();
  let total = 0;
  for (const log of logs) {
    const size = log.bytes.byteLength;
    const fits = size <= INLINE_EVIDENCE_MAX_BYTES && total + size <= INLINE_EVIDENCE_TOTAL_BYTES && inline.length < INLINE_EVIDENCE_MAX_FILES;
    if (digests.has(log.ref.sha256)) continue; // the same bytes twice (two gates with one log): carried once
    if (!fits) {
      uploaded.push(log);
      continue;
    }
    digests.add(log.ref.sha256);
    total += size;
    inline.push(log);
  }
  return { inline, uploaded };
}

/** A report's `evidence`: the bytes of the logs `inlineLogs` chose. */
export function evidenceOf(logs: Evaluation["logs"]): InlineEvidence[] | undefined {
  return logs.length === 0 ? undefined : logs.map((log) => ({ sha256: log.ref.sha256, base64: Buffer.from(log.bytes).toString("base64") }));
}

/**
 * Whether a report was refused for its inline evidence rather than its observation: files the coordinator
 * will not take that way (S3 mode, an older coordinator's schema) or will not store as they are (too
 * large, past the quota, recorded with another size). The report is then sent again with the files
 * uploaded first, where each refusal is handled as an upload's (`storeLogs`).
 */
export function evidenceRefusal(error: unknown): "not_taken" | "not_stored" | null {
  if (!(error instanceof CoordinatorError)) return null;
  if (error.code === "upload_to_storage" || (error.status === 400 && error.code === "invalid_request")) return "not_taken";
  const storageCodes = ["artifact_too_large", "evidence_too_large", "quota_exceeded", "size_conflict", "digest_mismatch", "size_mismatch", "invalid_evidence"];
  return storageCodes.includes(error.code) ? "not_stored" : null;
}

/**
 * What one report stores besides gate logs: the files the globs match in `dir` and the metric output
 * (`metric.log`, when there is one). Refusals are answered as `errors`, and each is warned about.
 */
export async function storeReportFiles(
  client: Client,
  loopId: string,
  options: {
    dir: string;
    globs: readonly string[];
    metricLog: Uint8Array | null;
    /** Where multipart uploads in progress are recorded, to be resumed by a later runner. */
    resumeIn?: string;
    note: (text: string) => void;
    warn: (text: string) => void;
  },
): Promise<StoredFiles> {
  const stored: StoredFiles = { refs: [], errors: [] };
  try {
    const files = await matchArtifacts(options.dir, options.globs);
    const uploaded = await uploadArtifactFiles(client, loopId, options.dir, files, options.note, options.resumeIn);
    stored.refs.push(...uploaded.refs);
    stored.errors.push(...uploaded.errors);
  } catch (error) {
    if (!(error instanceof TooManyArtifactFiles)) throw error;
    stored.errors.push(artifactError("*", undefined, { code: "too_many_files", detail: `${error.message}; none was stored` }));
  }
  if (options.metricLog) {
    const metric = await storeLog(client, loopId, "metric.log", options.metricLog, "text/plain; charset=utf-8");
    if (metric.ref) stored.refs.push(metric.ref);
    if (metric.error) stored.errors.push(metric.error);
  }
  for (const error of stored.errors) options.warn(describeArtifactError(error));
  return stored;
}

/**
 * Uploads the matched files (a few at a time; a progress line for large ones) and answers their
 * references, and what was not stored and why: a file refused for its size or the loop's quota, one that
 * could not be read, one whose path is too long to name.
 */
export async function uploadArtifactFiles(
  client: Client,
  loopId: string,
  dir: string,
  files: readonly string[],
  note: (text: string) => void,
  resumeIn?: string,
): Promise<StoredFiles> {
  const results: (ArtifactRef | ArtifactError)[] = new Array<ArtifactRef | ArtifactError>(files.length);
  let next = 0;
  const worker = async () => {
    for (let index = next++; index < files.length; index = next++) {
      const file = files[index] ?? "";
      if (file.length > MAX_NAME_LENGTH) {
        results[index] = artifactError(file, undefined, {
          code: "name_too_long",
          detail: `its path is longer than the ${MAX_NAME_LENGTH} characters a file is named by`,
        });
        continue;
      }
      let shown = 0;
      const onProgress = (sent: number, total: number) => {
        // Every tenth of a large file, and its end, once each.
        if (total <= PROGRESS_ABOVE_BYTES || (sent < total ? sent - shown < total / 10 : shown === total)) return;
        shown = sent;
        note(`uploading ${file}: ${Math.round((sent / total) * 100)}% of ${formatBytes(total)}`);
      };
      try {
        results[index] = await client.uploadArtifactFile(loopId, path.join(dir, file), file, contentTypeOf(file), onProgress, resumeIn);
      } catch (error) {
        const refusal = fileRefusal(error);
        if (!refusal) throw error;
        const size = await lstat(path.join(dir, file)).then(
          (stat) => stat.size,
          () => undefined,
        );
        results[index] = artifactError(file, size, refusal);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, files.length) }, worker));
  // The coordinator checks a large file's digest after answering its upload (issue 30), so the next
  // files' transfers overlap that check; the report that cites them goes once every check has ended,
  // and a file whose stored bytes were not its own is an error of the report's, as a refused upload is.
  await Promise.all(
    results.map(async (result, index) => {
      if (!("sha256" in result)) return;
      try {
        await client.awaitVerified(loopId, result);
      } catch (error) {
        const refusal = fileRefusal(error);
        if (!refusal) throw error;
        results[index] = artifactError(files[index] ?? result.name, result.size, refusal);
      }
    }),
  );
  const refs = results.filter((result): result is ArtifactRef => "sha256" in result);
  const errors = results.filter((result): result is ArtifactError => !("sha256" in result));
  return { refs, errors };
}
