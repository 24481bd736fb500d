import { sha256Hex } from "#shared/hash.js";
import { ArtifactIntentResponse, ArtifactStored, CompleteMultipartResponse, UploadedPart, type CompleteMultipartRequest, Health } from "#shared/wire/api.js";
import type { ArtifactRef } from "#shared/wire/observation.js";
import { CoordinatorError } from "../errors.js";
import { hashFile, type Uploadable } from "./file-body.js";
import { UploadRecords, type UploadRecord } from "./upload-records.js";
import { isCoordinatorPath, Transport } from "./transport.js";

// Artifacts to and from the coordinator's storage (DESIGN §10): an upload's intent, then a single PUT or
// multipart parts — presigned straight to storage, or through the coordinator — resumable across runs
// from the records kept on disk, the digest checked; and downloads by digest. Built on the transport;
// the endpoints' client (client.ts) extends it.

/** Storage refused a request to a presigned URL (an expired URL, a wrong length): its status and answer. */
export class StorageRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "StorageRefusal";
  }
}

/**
 * How fast, at the least, the coordinator is taken to read an object back to hash it (after `complete`,
 * or a presigned PUT): waiting for that check may take the idle timeout plus the object's size at this
 * rate. `complete` itself is given as long: storage puts the parts together before it answers, and a
 * coordinator of an earlier version hashed the whole object before answering too.
 */
const VERIFY_BYTES_PER_SECOND = 10 * 1024 * 1024;

/** A byte size as a message says it. */
function describeSize(bytes: number): string {
  return bytes >= 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(1)} MiB` : bytes >= 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${bytes} B`;
}

/** The multipart uploads this process is sending now (by upload id): their records are never taken over. */
const activeUploads = new Set<string>();

/**
 * How many parts of one multipart upload are sent at once to presigned storage URLs (issue 30): one after
 * the other, a part's request and its answer left the connection idle between parts, and one connection's
 * throughput is all a single request gets (S3 mode at 500 MiB: parts 3.5 s four at a time, curl's in
 * sequence 6.2 s); more at once would hold more of the file in flight for little more. Parts through the
 * coordinator (binding mode) go one at a time: there the worker handles every byte, and the local
 * coordinator took four at once no faster (curl's four at a time 47.3 s against 48.9 in sequence, the
 * client's 28.7 and 41.3 s against 23.3 and 38.6) and reset the connections of parts on their way when
 * others were answered, losing what they had sent (.tmp/binding.ts, 2026-12-06).
 */
export const PARALLEL_PARTS = 4;

/** The largest artifact sent without an intent first, once the coordinator is known to store uploads itself. */
const DIRECT_PUT_MAX_BYTES = 256 * 1024;

/** Uploads and downloads of a loop's artifacts, on the transport. */
export class ArtifactTransfers extends Transport {
  /**
   * Whether this coordinator stores uploads itself (an intent answered with one of its own paths, not a
   * presigned URL): a small artifact is then PUT at once, one request rather than an intent and a PUT.
   * Re-sending a few KiB the coordinator may already hold costs less than the round trip that would ask.
   */
  protected storesUploads = false;

  /**
   * Uploads the coordinator answered `verifying` (issue 30: it hashes the object after answering), by
   * `loop/sha256`: `awaitVerified` waits for their check before a report cites them.
   */
  private readonly verifying = new Map<string, ArtifactRef>();

  async uploadArtifact(loopId: string, name: string, bytes: Uint8Array, contentType: string): Promise<ArtifactRef> {
    const ref: ArtifactRef = { sha256: sha256Hex(bytes), size: bytes.byteLength, name, content_type: contentType };
    return this.uploadBlob(loopId, ref, new Blob([bytes]));
  }

  /**
   * Uploads a file as a content-addressed artifact (DESIGN §10), streamed from disk: its digest is
   * computed by reading it once (the intent names it before a byte is sent), then it is sent whole or
   * part by part, as the coordinator answers.
   * `onProgress` hears the bytes sent as they go. With `resumeIn`, a multipart upload is recorded there
   * while it is in progress, and one that a process before this one left unfinished is resumed.
   */
  async uploadArtifactFile(
    loopId: string,
    file: string,
    name: string,
    contentType: string,
    onProgress?: (sent: number, total: number) => void,
    resumeIn?: string,
  ): Promise<ArtifactRef> {
    const { sha256, body } = await hashFile(file);
    const ref: ArtifactRef = { sha256, size: body.size, name, content_type: contentType };
    return this.uploadBlob(loopId, ref, body, onProgress, resumeIn);
  }

  private async uploadBlob(
    loopId: string,
    ref: ArtifactRef,
    blob: Uploadable,
    onProgress?: (sent: number, total: number) => void,
    resumeIn?: string,
  ): Promise<ArtifactRef> {
    const what = `uploading ${ref.name} (${describeSize(ref.size)})`;
    const onSent = (sent: number) => onProgress?.(sent, ref.size);
    const askIntent = (afterUpload = false) =>
      this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/artifacts`, ArtifactIntentResponse, {
        sha256: ref.sha256,
        size: ref.size,
        content_type: ref.content_type,
        name: ref.name,
        ...(afterUpload ? { after_upload: true } : {}),
      });
    if (this.storesUploads && ref.size <= DIRECT_PUT_MAX_BYTES) {
      const direct = await this.send(
        "PUT",
        `/v1/loops/${encodeURIComponent(loopId)}/artifacts/${ref.sha256}?name=${encodeURIComponent(ref.name)}`,
        blob,
        { "Content-Type": ref.content_type },
        { what, onSent },
      );
      await direct.body?.cancel();
      if (direct.ok) {
        onProgress?.(ref.size, ref.size);
        return ref;
      }
      // Refused (a limit, or storage configured otherwise since): the intent says what to do.
    }
    const records = resumeIn !== undefined && ref.size > DIRECT_PUT_MAX_BYTES ? new UploadRecords(resumeIn) : null;
    if (records) {
      const { resume, stale } = await records.claim(
        this.baseUrl,
        (record) => record.loop_id === loopId && record.sha256 === ref.sha256 && record.size === ref.size,
        activeUploads,
      );
      // Left by runners that are gone, untouched for a day: nobody will resume them.
      for (const record of stale) await this.abortUpload(record.abort_url);
      if (resume && (await this.resumeParts(ref, blob, resume, records, onProgress))) return ref;
    }
    const intent = await askIntent();
    if (intent.status === "exists") return ref;
    if (intent.status === "verifying") {
      this.verifying.set(`${loopId}/${ref.sha256}`, ref);
      return ref;
    }
    if (intent.status === "upload") {
      if (isCoordinatorPath(intent.url)) this.storesUploads = true;
      // Headers the intent names are signed into a presigned URL (S3 mode's checksum): sent as given.
      const response = await this.send("PUT", intent.url, blob, { "Content-Type": ref.content_type, ...intent.headers }, { what, onSent });
      if (!response.ok) await this.refusal(response, intent.url, what);
      await response.body?.cancel();
      onProgress?.(ref.size, ref.size);
      // Storage reached by a presigned URL does not tell the coordinator: asking again has it verify and
      // record the object, one file a request (not all of a report's files inside the report), after it
      // answers (`after_upload`, issue 30); `awaitVerified` waits for that check.
      if (!isCoordinatorPath(intent.url)) {
        const recorded = await askIntent(true);
        if (recorded.status === "verifying") this.verifying.set(`${loopId}/${ref.sha256}`, ref);
        else if (recorded.status !== "exists")
          throw new Error(`storage did not keep ${ref.name} (${ref.sha256}): the coordinator finds no such object after the upload`);
      }
      return ref;
    }
    await this.sendParts({ ...ref, loop_id: loopId, ...intent, parts: [] }, blob, records, onProgress);
    return ref;
  }

  /**
   * Resumes a multipart upload a process before this one left unfinished: only the parts it did not
   * record are sent. False when the upload cannot be finished as recorded (storage no longer has it, a
   * presigned URL expired, a recorded part was not what storage kept): the caller starts afresh.
   */
  private async resumeParts(
    ref: ArtifactRef,
    blob: Uploadable,
    record: UploadRecord,
    records: UploadRecords,
    onProgress?: (sent: number, total: number) => void,
  ) {
    try {
      await this.sendParts({ ...ref, ...record }, blob, records, onProgress);
      return true;
    } catch (error) {
      const gone =
        (error instanceof CoordinatorError && ["upload_not_found", "invalid_parts", "size_mismatch", "digest_mismatch"].includes(error.code)) ||
        (error instanceof StorageRefusal && error.status >= 400 && error.status < 500);
      if (gone) return false;
      throw error;
    }
  }

  /**
   * Sends a multipart upload's parts not yet in `upload.parts`, PARALLEL_PARTS at a time to presigned
   * storage (one at a time through the coordinator), then completes it. Each part is sent (and on
   * failure re-sent, by `send`'s retries) on its own: a part storage took is never sent again. A part that fails for good starts no other; the parts already on their way are
   * finished (and recorded), so a runner that resumes the upload need not send them. With `records`, the
   * upload and each part taken are recorded as they happen. Anything that fails aborts the upload, so no
   * parts linger; when even the abort fails, the record stays for a later runner.
   */
  private async sendParts(
    upload: Omit<UploadRecord, "version" | "pid" | "updated_at" | "server"> & { content_type?: string },
    blob: Uploadable,
    records: UploadRecords | null,
    onProgress?: (sent: number, total: number) => void,
  ): Promise<void> {
    const { name, size, part_size: partSize, part_urls: partUrls } = upload;
    const done = new Map(upload.parts.map((part) => [part.part_number, part]));
    const key = { server: this.baseUrl, loop_id: upload.loop_id, sha256: upload.sha256, upload_id: upload.upload_id };
    const save = async () =>
      records?.save({
        ...key,
        size,
        name,
        part_size: partSize,
        part_urls: partUrls,
        complete_url: upload.complete_url,
        abort_url: upload.abort_url,
        parts: [...done.values()].sort((a, b) => a.part_number - b.part_number),
      });
    // One save after another, each writing the parts taken by then: saves at once could land out of order.
    let saved: Promise<void> = Promise.resolve();
    const record = () => (saved = saved.then(save, save));
    // Progress: the bytes of the parts taken, and of those on their way, heard only as it grows (a part
    // sent again starts from nothing).
    const partLength = (index: number) => Math.min(partSize, size - index * partSize);
    let taken = [...done.keys()].reduce((sum, number) => sum + Math.max(0, partLength(number - 1)), 0);
    const sending = new Map<number, number>();
    let heard = 0;
    const hear = () => {
      const sent = taken + [...sending.values()].reduce((sum, bytes) => sum + bytes, 0);
      if (sent <= heard) return;
      heard = sent;
      onProgress?.(sent, size);
    };
    const sendPart = async (index: number, url: string) => {
      const start = index * partSize;
      const end = Math.min(start + partSize, size);
      const what = `uploading part ${index + 1} of ${partUrls.length} of ${name} (${describeSize(size)})`;
      const onSent = (sent: number) => {
        sending.set(index, sent);
        hear();
      };
      const response = await this.send("PUT", url, blob.slice(start, end), {}, { what, onSent });
      if (!response.ok) await this.refusal(response, url, what);
      // The coordinator answers the part's ETag as JSON; presigned storage in the ETag header.
      const etag = isCoordinatorPath(url) ? (await this.parse(response, UploadedPart)).etag : (response.headers.get("ETag") ?? "");
      if (!isCoordinatorPath(url)) await response.body?.cancel();
      if (!etag) throw new Error(`storage answered part ${index + 1} of ${name} without an ETag`);
      done.set(index + 1, { part_number: index + 1, etag });
      sending.delete(index);
      taken += end - start;
      hear();
      await record();
    };
    activeUploads.add(upload.upload_id);
    try {
      await record();
      const waiting = [...partUrls.entries()].filter(([index]) => !done.has(index + 1));
      let failure: { error: unknown } | null = null;
      // Senders, each taking the next part waiting until none is left or one has failed.
      const sender = async () => {
        for (let next = waiting.shift(); next && !failure; next = waiting.shift()) {
          try {
            await sendPart(...next);
          } catch (error) {
            failure ??= { error };
          }
        }
      };
      const atOnce = partUrls.some(isCoordinatorPath) ? 1 : PARALLEL_PARTS;
      await Promise.all(Array.from({ length: Math.min(atOnce, waiting.length) }, sender));
      if (failure) throw (failure as { error: unknown }).error;
      const parts = [...done.values()].sort((a, b) => a.part_number - b.part_number);
      // Storage puts the parts together before the coordinator answers (it hashes them after: `verifying`).
      const complete = await this.send(
        "POST",
        upload.complete_url,
        JSON.stringify({ parts } satisfies CompleteMultipartRequest),
        {
          "Content-Type": "application/json",
        },
        {
          what: `completing the upload of ${name} (${describeSize(size)})`,
          extraWaitMs: Math.ceil((size / VERIFY_BYTES_PER_SECOND) * 1_000),
        },
      );
      const completed = await this.parse(complete, CompleteMultipartResponse);
      if (completed.status === "verifying") {
        this.verifying.set(`${upload.loop_id}/${upload.sha256}`, {
          sha256: upload.sha256,
          size,
          name,
          content_type: upload.content_type ?? "application/octet-stream",
        });
      }
      await records?.remove(key);
    } catch (error) {
      if (await this.abortUpload(upload.abort_url)) await records?.remove(key);
      throw error;
    } finally {
      activeUploads.delete(upload.upload_id);
    }
  }

  /**
   * Waits until an artifact this client uploaded and the coordinator answered `verifying` is verified and
   * recorded (at once for any other): the intent asked again, which the coordinator answers once its check
   * of the object has ended (`exists`). An object that was not the artifact (its bytes changed in storage,
   * or on the way) has been deleted: thrown as 400 `digest_mismatch`, as an upload refused for it is.
   * A report citing the artifact before would be held by the same check on the coordinator's side.
   */
  async awaitVerified(loopId: string, ref: ArtifactRef): Promise<void> {
    const key = `${loopId}/${ref.sha256}`;
    if (!this.verifying.has(key)) return;
    const answer = await this.json(
      "POST",
      `/v1/loops/${encodeURIComponent(loopId)}/artifacts`,
      ArtifactIntentResponse,
      { sha256: ref.sha256, size: ref.size, content_type: ref.content_type, name: ref.name },
      undefined,
      Math.ceil((ref.size / VERIFY_BYTES_PER_SECOND) * 1_000),
    );
    this.verifying.delete(key);
    // Not the artifact: the intent offers the upload again, and a large one is a multipart upload begun
    // for this answer. Nothing sends its parts (the file's error is the report's), so it is aborted now
    // rather than left to storage's lifecycle rule.
    if (answer.status === "multipart") await this.abortUpload(answer.abort_url);
    if (answer.status !== "exists") {
      throw new CoordinatorError(400, "digest_mismatch", `the coordinator found that the stored ${ref.name} does not hash to ${ref.sha256}, and deleted it`);
    }
  }

  /** Aborts a multipart upload (`DELETE <abort_url>`); false when the coordinator could not be told. */
  private async abortUpload(abortUrl: string): Promise<boolean> {
    try {
      const response = await this.send("DELETE", abortUrl, undefined, {}, { what: "aborting an unfinished upload", limitTotal: true });
      await response.body?.cancel();
      return response.ok;
    } catch {
      return false;
    }
  }

  /** Throws what refused an upload: the coordinator's error, or storage's answer to a presigned URL. */
  private async refusal(response: Response, url: string, what: string): Promise<never> {
    if (isCoordinatorPath(url)) await this.parse(response, ArtifactStored);
    const text = await response.text().catch(() => "");
    throw new StorageRefusal(response.status, `storage at ${new URL(url).host} refused ${what}: HTTP ${response.status} ${text.slice(0, 200)}`);
  }

  /** An artifact's bytes (`GET /v1/loops/:id/artifacts/:sha256`); the caller checks the digest. */
  async downloadArtifact(loopId: string, sha256: string): Promise<Uint8Array> {
    const response = await this.artifactResponse(loopId, sha256);
    return new Uint8Array(await response.arrayBuffer());
  }

  /** An artifact as a response, to stream (`logs`, `artifacts --download`); a refusal is thrown as the coordinator's error. */
  async artifactResponse(loopId: string, sha256: string): Promise<Response> {
    const response = await this.send(
      "GET",
      `/v1/loops/${encodeURIComponent(loopId)}/artifacts/${sha256}`,
      undefined,
      {},
      {
        what: `downloading artifact ${sha256.slice(0, 12)}`,
      },
    );
    if (!response.ok) await this.parse(response, Health);
    return response;
  }

  /** One page of a loop's recorded artifacts, newest first. */
}
