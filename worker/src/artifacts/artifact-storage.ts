// Where artifact bytes live (DESIGN §10), behind one interface the artifact routes use:
// - binding mode (the default): the R2 binding `ARTIFACTS`; every byte goes through the worker, which
//   streams uploads into R2 (`through`);
// - S3 mode, on when S3 settings are configured: any S3-compatible store (R2's S3 API, s3rver in tests)
//   through SigV4-signed fetch requests (aws4fetch); runners upload straight to storage with presigned
//   URLs, and the worker only creates, completes and verifies.
// Either way, D1 records an artifact only once its bytes are confirmed (a row means "verified").

/** An object as storage describes it. */
export interface StoredObject {
  size: number;
  /**
   * Storage's ETag as it compares it (unquoted): whether the object is still the one that was checked. Any
   * write of other bytes changes it, so the artifact row keeps the ETag of the bytes it verified.
   */
  etag: string;
  /** The ETag as an HTTP header carries it (quoted). */
  httpEtag: string;
  /** What the upload said it is, when storage kept it: its sanitised name and content type. */
  name: string | undefined;
  contentType: string | undefined;
  /** The size a multipart upload declared when it began (metadata), for `complete` to check. */
  declaredSize: number | undefined;
}

/** An object and its bytes, to stream. */
export interface ObjectBody extends StoredObject {
  body: ReadableStream<Uint8Array>;
}

/** An upload the coordinator agreed to take: where it goes and what it is. */
export interface NewUpload {
  key: string;
  /** The coordinator's own path of the artifact (`/v1/loops/:id/artifacts/:sha256`). */
  path: string;
  sha256: string;
  size: number;
  /** The content type as the intent gave it (and the runner sends it), and as it is recorded. */
  contentType: string;
  recordedContentType: string;
  /** The sanitised name. */
  name: string;
}

/** A part of a multipart upload, as `complete` lists it. */
export interface UploadedPartRef {
  partNumber: number;
  etag: string;
}

/** The multipart upload is not in progress: completed, aborted, or never begun. */
export class UploadGone extends Error {}

/** Storage refused the parts `complete` listed (a wrong ETag, a part too small, parts that do not fit). */
export class PartsRefused extends Error {}

/** Where the runner sends a whole file in one PUT, and the headers it sends with it besides its Content-Type. */
export interface UploadTarget {
  url: string;
  /** Signed into a presigned URL (S3 mode's `x-amz-checksum-sha256`): a PUT without them is refused. */
  headers?: Record<string, string>;
}

/** Storage that takes uploads through the worker (binding mode): bodies streamed in with their length. */
export interface ThroughWorker {
  /** Streams a whole artifact in; R2 refuses bytes that do not hash to `sha256`. Answers the stored object (null: nothing stored). */
  put(upload: Omit<NewUpload, "size" | "path">, body: ReadableStream<Uint8Array> | null, length: number): Promise<StoredObject | null>;
  /** Streams one part in (a part sent again replaces the earlier one). */
  uploadPart(key: string, uploadId: string, partNumber: number, body: ReadableStream<Uint8Array> | null, length: number): Promise<UploadedPartRef>;
}

/** Artifact storage, as the routes use it: the same calls in binding mode and in S3 mode. */
export interface ArtifactStorage {
  readonly mode: "binding" | "s3";
  head(key: string): Promise<StoredObject | null>;
  get(key: string): Promise<ObjectBody | null>;
  delete(key: string): Promise<void>;
  /**
   * Where the runner sends the whole file in one PUT: a coordinator path, or a presigned storage URL that
   * binds the length, the content type and the SHA-256 (storage refuses other bytes).
   */
  uploadUrl(upload: NewUpload): Promise<UploadTarget>;
  /** Begins a multipart upload of parts of `partBytes`; answers its id and where each part goes. */
  beginMultipart(upload: NewUpload, partBytes: number): Promise<{ uploadId: string; partUrls: string[] }>;
  /** Completes a multipart upload (throws UploadGone or PartsRefused); answers the object, not yet verified. */
  completeMultipart(key: string, uploadId: string, parts: readonly UploadedPartRef[]): Promise<StoredObject>;
  /** Aborts a multipart upload (throws UploadGone when there is none). */
  abortMultipart(key: string, uploadId: string): Promise<void>;
  /** Bodies through the worker (binding mode), or null when runners upload straight to storage (S3 mode). */
  readonly through: ThroughWorker | null;
}
