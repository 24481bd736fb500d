// The DOMParser the SDK parses S3's XML with: installed before anything of the SDK runs.
import "./xml-polyfill.js";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { hexToBytes } from "@noble/hashes/utils.js";
import { base64 } from "@scure/base";
import { PartsRefused, UploadGone, type ArtifactStorage, type NewUpload, type ObjectBody, type StoredObject, type UploadTarget } from "./artifact-storage.js";
import type { S3Settings } from "./artifact-storage-s3-settings.js";

// S3 mode (DESIGN §10): artifacts in an S3-compatible bucket (R2's S3 API when deployed), reached with
// @aws-sdk/client-s3. Runners upload straight to storage with presigned URLs (a single PUT, or one per
// part) that bind the key, the length and (for a single PUT) the content type and SHA-256; the worker creates,
// completes and aborts multipart uploads and reads objects back to verify them. After a single PUT the
// runner does not come back, so such an object is verified and recorded when it is next asked about
// (an intent, a report or proposal citing it, a download): `adoptObject`.

/** The header a presigned single PUT carries the artifact's SHA-256 in (base64 of the digest), signed. */
const CHECKSUM_HEADER = "x-amz-checksum-sha256";

/** Error names S3 answers `complete` with when the listed parts are not ones it can put together. */
const REFUSED_PARTS = new Set(["InvalidPart", "InvalidPartOrder", "EntityTooSmall", "MalformedXML"]);

function statusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

function nameOf(error: unknown): string {
  return error instanceof Error ? error.name : "";
}

function isMissing(error: unknown): boolean {
  return statusOf(error) === 404 && !["NoSuchUpload", "NoSuchBucket"].includes(nameOf(error));
}

/** Metadata keys come back lower-cased; a number only when it reads as one. */
function declaredSizeOf(metadata: Record<string, string> | undefined): number | undefined {
  const size = metadata?.size;
  return size !== undefined && /^\d{1,16}$/.test(size) ? Number(size) : undefined;
}

/** Storage in an S3-compatible bucket. */
export function s3Storage(settings: S3Settings): ArtifactStorage {
  const client = new S3Client({
    endpoint: settings.endpoint,
    region: settings.region,
    credentials: { accessKeyId: settings.accessKeyId, secretAccessKey: settings.secretAccessKey },
    // Path-style (`<endpoint>/<bucket>/<key>`): R2 and local servers alike, no bucket subdomains.
    forcePathStyle: true,
    // No checksums the SDK computes on its own: with the default, s3rver stored a streamed PutObject 45
    // bytes longer (aws-chunked framing), and a presigned URL would demand a CRC32 header of bytes the
    // worker never sees. The one checksum a presigned PUT carries is the artifact's SHA-256, given
    // explicitly (`uploadUrl`); the worker verifies the bytes by their SHA-256 anyway.
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
  const Bucket = settings.bucket;
  const expiresIn = settings.presignTtlSeconds;

  const describe = (out: {
    ContentLength?: number | undefined;
    ETag?: string | undefined;
    ContentType?: string | undefined;
    Metadata?: Record<string, string> | undefined;
  }): StoredObject => {
    // Compared unquoted, as the binding answers it: an artifact recorded in one mode is the same object in the other.
    const etag = (out.ETag ?? "").replace(/^"(.*)"$/, "$1");
    return {
      size: out.ContentLength ?? 0,
      etag,
      httpEtag: `"${etag}"`,
      name: out.Metadata?.name,
      contentType: out.ContentType,
      declaredSize: declaredSizeOf(out.Metadata),
    };
  };

  const head = async (key: string): Promise<StoredObject | null> => {
    try {
      return describe(await client.send(new HeadObjectCommand({ Bucket, Key: key })));
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  };

  return {
    mode: "s3",
    head,
    async get(key): Promise<ObjectBody | null> {
      let out;
      try {
        out = await client.send(new GetObjectCommand({ Bucket, Key: key }));
      } catch (error) {
        if (isMissing(error)) return null;
        throw error;
      }
      if (!out.Body) throw new Error(`storage answered ${key} without a body`);
      return { ...describe(out), body: out.Body.transformToWebStream() as ReadableStream<Uint8Array> };
    },
    async delete(key) {
      await client.send(new DeleteObjectCommand({ Bucket, Key: key }));
    },
    async uploadUrl(upload: NewUpload): Promise<UploadTarget> {
      // The length is signed (a body of another length is refused by storage); the content type too,
      // when it is one a header can carry as given (the runner sends the intent's content type); the
      // name travels as x-amz-meta-name in the query, which stores that keep it record with the object.
      // The SHA-256 is signed as the x-amz-checksum-sha256 header (kept out of the query, where S3 would
      // ignore it), so the runner must send it and storage (R2, S3) refuses bytes that do not hash to it:
      // the URL cannot be used again, before it expires, to put other bytes under a verified artifact.
      const checksum = base64.encode(hexToBytes(upload.sha256));
      const bindType = upload.contentType === upload.recordedContentType;
      const command = new PutObjectCommand({
        Bucket,
        Key: upload.key,
        ContentLength: upload.size,
        ...(bindType ? { ContentType: upload.contentType } : {}),
        ChecksumSHA256: checksum,
        Metadata: { name: upload.name },
      });
      const url = await getSignedUrl(client, command, {
        expiresIn,
        unhoistableHeaders: new Set([CHECKSUM_HEADER]),
        ...(bindType ? { signableHeaders: new Set(["content-type"]) } : {}),
      });
      return { url, headers: { [CHECKSUM_HEADER]: checksum } };
    },
    async beginMultipart(upload: NewUpload, partBytes: number) {
      const created = await client.send(
        new CreateMultipartUploadCommand({
          Bucket,
          Key: upload.key,
          ContentType: upload.recordedContentType,
          // What `complete` checks the finished object against, and records.
          Metadata: { name: upload.name, size: String(upload.size), sha256: upload.sha256 },
        }),
      );
      const uploadId = created.UploadId;
      if (!uploadId) throw new Error(`storage began a multipart upload of ${upload.key} without an upload id`);
      const parts = Math.max(1, Math.ceil(upload.size / partBytes));
      const partUrls = await Promise.all(
        Array.from({ length: parts }, (_, index) =>
          getSignedUrl(
            client,
            new UploadPartCommand({
              Bucket,
              Key: upload.key,
              UploadId: uploadId,
              PartNumber: index + 1,
              ContentLength: Math.min(partBytes, upload.size - index * partBytes),
            }),
            { expiresIn },
          ),
        ),
      );
      return { uploadId, partUrls };
    },
    async completeMultipart(key, uploadId, parts) {
      try {
        await client.send(
          new CompleteMultipartUploadCommand({
            Bucket,
            Key: key,
            UploadId: uploadId,
            MultipartUpload: { Parts: parts.map((part) => ({ PartNumber: part.partNumber, ETag: part.etag })) },
          }),
        );
      } catch (error) {
        if (nameOf(error) === "NoSuchUpload") throw new UploadGone(String(error));
        if (REFUSED_PARTS.has(nameOf(error))) throw new PartsRefused(error instanceof Error ? error.message : String(error));
        throw error;
      }
      const object = await head(key);
      if (!object) throw new Error(`storage completed ${key} but does not have it`);
      return object;
    },
    async abortMultipart(key, uploadId) {
      try {
        await client.send(new AbortMultipartUploadCommand({ Bucket, Key: key, UploadId: uploadId }));
      } catch (error) {
        if (nameOf(error) === "NoSuchUpload") throw new UploadGone(String(error));
        throw error;
      }
    },
    // Runners send their bytes to storage, never through the worker.
    through: null,
  };
}
