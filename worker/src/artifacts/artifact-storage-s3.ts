import { hexToBytes } from "@noble/hashes/utils.js";
import { base64 } from "@scure/base";
import { AwsClient, AwsV4Signer } from "aws4fetch";
import { PartsRefused, UploadGone, type ArtifactStorage, type NewUpload, type ObjectBody, type StoredObject, type UploadTarget } from "./artifact-storage.js";
import type { S3Settings } from "./artifact-storage-s3-settings.js";
import { S3Failure, errorOfAnswer, refusalIn, uploadIdOf } from "./s3-answers.js";

// S3 mode (DESIGN §10): artifacts in an S3-compatible bucket (R2's S3 API when deployed), reached with
// SigV4-signed `fetch` requests (aws4fetch, made for Workers). Runners upload straight to storage with
// presigned URLs (a single PUT, or one per part) that bind the key, the length and (for a single PUT) the
// content type and SHA-256; the worker creates, completes and aborts multipart uploads and reads objects
// back to verify them. After a single PUT the runner does not come back, so such an object is verified
// and recorded when it is next asked about (an intent, a report or proposal citing it, a download):
// `adoptObject`.
//
// Issue 30: this replaced @aws-sdk/client-s3 and its presigner (with @xmldom/xmldom for the DOMParser its
// browser build needs in workerd), about 0.5 MB of the 1.15 MB worker bundle by esbuild's metafile; the
// local coordinator's start pays for every byte of the bundle (Miniflare copies it into its config,
// workerd parses and compiles it). aws4fetch is 11 KB; the requests are the SDK's, one by one: path-style
// URLs (`<endpoint>/<bucket>/<key>`, as the SDK's `forcePathStyle`), no checksums but the SHA-256 a
// presigned PUT binds (the SDK's `requestChecksumCalculation: "WHEN_REQUIRED"`), up to 3 attempts of a
// request that storage answers 5xx or 429 (the SDK's default).

/** The header a presigned single PUT carries the artifact's SHA-256 in (base64 of the digest), signed. */
const CHECKSUM_HEADER = "x-amz-checksum-sha256";

/** Error codes S3 answers `complete` with when the listed parts are not ones it can put together. */
const REFUSED_PARTS = new Set(["InvalidPart", "InvalidPartOrder", "EntityTooSmall", "MalformedXML"]);

/** Retries of a request storage answered 5xx or 429, or that failed on the network: 3 attempts in all, as the SDK's default. */
const RETRIES = 2;
/** The wait before the first retry of a request that failed on the network, doubled each time. */
const NETWORK_RETRY_MS = 50;

/** A 404 that says the object is not there (a 404 naming the upload or the bucket is a failure). */
function isMissing(error: S3Failure): boolean {
  return error.status === 404 && !["NoSuchUpload", "NoSuchBucket"].includes(error.name);
}

/** Metadata keys come back lower-cased; a number only when it reads as one. */
function declaredSizeOf(size: string | null): number | undefined {
  return size !== null && /^\d{1,16}$/.test(size) ? Number(size) : undefined;
}

/** An object as storage's answer to a HEAD or GET describes it. */
function describe(headers: Headers): StoredObject {
  // Compared unquoted, as the binding answers it: an artifact recorded in one mode is the same object in the other.
  const etag = (headers.get("etag") ?? "").replace(/^"(.*)"$/, "$1");
  const length = headers.get("content-length");
  return {
    size: length !== null && /^\d{1,16}$/.test(length) ? Number(length) : 0,
    etag,
    httpEtag: `"${etag}"`,
    name: headers.get("x-amz-meta-name") ?? undefined,
    contentType: headers.get("content-type") ?? undefined,
    declaredSize: declaredSizeOf(headers.get("x-amz-meta-size")),
  };
}

/** XML text, escaped (the ETags `complete` lists are quoted). */
function xmlText(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** Storage in an S3-compatible bucket. */
export function s3Storage(settings: S3Settings): ArtifactStorage {
  const credentials = { accessKeyId: settings.accessKeyId, secretAccessKey: settings.secretAccessKey, service: "s3", region: settings.region };
  // The signing key is derived once a day and kept here, for the header-signed requests and the presigned URLs alike.
  const cache = new Map<string, ArrayBuffer>();
  const client = new AwsClient({ ...credentials, cache, retries: RETRIES });
  const expires = String(settings.presignTtlSeconds);

  /** Path-style: `<endpoint>/<bucket>/<key>`, R2 and local servers alike, no bucket subdomains. */
  const urlOf = (key: string, query: Record<string, string> = {}): URL => {
    const url = new URL(`${settings.endpoint}/${encodeURIComponent(settings.bucket)}/${key.split("/").map(encodeURIComponent).join("/")}`);
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
    return url;
  };

  /** A request signed in its Authorization header; a refusal (not 2xx) is thrown as the S3Failure it names. */
  const send = async (method: string, url: URL, init: { headers?: Record<string, string>; body?: string } = {}): Promise<Response> => {
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await client.fetch(url.toString(), { method, ...init });
      } catch (error) {
        // aws4fetch tries again a request storage answered 5xx or 429, not one that failed on the way
        // (a connection lost); the SDK tried both, as many times. Every request here can be sent again.
        if (attempt >= RETRIES) throw error;
        await new Promise((resolve) => setTimeout(resolve, NETWORK_RETRY_MS * 2 ** attempt));
        continue;
      }
      if (!response.ok) throw await errorOfAnswer(response, `${method} ${url.pathname}`);
      return response;
    }
  };

  /** A URL presigned for a PUT that carries exactly `headers` (each one signed, content-length included). */
  const presignPut = async (url: URL, headers: Record<string, string>): Promise<string> => {
    url.searchParams.set("X-Amz-Expires", expires);
    const signer = new AwsV4Signer({ ...credentials, cache, method: "PUT", url: url.toString(), headers, signQuery: true, allHeaders: true });
    return (await signer.sign()).url.toString();
  };

  const head = async (key: string): Promise<StoredObject | null> => {
    try {
      return describe((await send("HEAD", urlOf(key))).headers);
    } catch (error) {
      if (error instanceof S3Failure && isMissing(error)) return null;
      throw error;
    }
  };

  return {
    mode: "s3",
    head,
    async get(key): Promise<ObjectBody | null> {
      let response;
      try {
        response = await send("GET", urlOf(key));
      } catch (error) {
        if (error instanceof S3Failure && isMissing(error)) return null;
        throw error;
      }
      if (!response.body) throw new Error(`storage answered ${key} without a body`);
      return { ...describe(response.headers), body: response.body };
    },
    async delete(key) {
      const response = await send("DELETE", urlOf(key));
      await response.body?.cancel();
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
      const url = await presignPut(urlOf(upload.key, { "x-amz-meta-name": upload.name }), {
        "content-length": String(upload.size),
        ...(bindType ? { "content-type": upload.contentType } : {}),
        [CHECKSUM_HEADER]: checksum,
      });
      return { url, headers: { [CHECKSUM_HEADER]: checksum } };
    },
    async beginMultipart(upload: NewUpload, partBytes: number) {
      const created = await send("POST", urlOf(upload.key, { uploads: "" }), {
        headers: {
          "content-type": upload.recordedContentType,
          // What `complete` checks the finished object against, and records.
          "x-amz-meta-name": upload.name,
          "x-amz-meta-size": String(upload.size),
          "x-amz-meta-sha256": upload.sha256,
        },
      });
      const uploadId = uploadIdOf(await created.text(), upload.key);
      const parts = Math.max(1, Math.ceil(upload.size / partBytes));
      const partUrls = await Promise.all(
        Array.from({ length: parts }, (_, index) =>
          presignPut(urlOf(upload.key, { partNumber: String(index + 1), uploadId }), {
            "content-length": String(Math.min(partBytes, upload.size - index * partBytes)),
          }),
        ),
      );
      return { uploadId, partUrls };
    },
    async completeMultipart(key, uploadId, parts) {
      const body =
        '<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
        parts.map((part) => `<Part><ETag>${xmlText(part.etag)}</ETag><PartNumber>${part.partNumber}</PartNumber></Part>`).join("") +
        "</CompleteMultipartUpload>";
      try {
        const response = await send("POST", urlOf(key, { uploadId }), { headers: { "content-type": "application/xml" }, body });
        // S3 answers 200 before it has put the parts together, and a failure to after it in the body: the
        // whole answer is read, and an <Error> in it fails `complete` as a 4xx would (as the SDK does).
        const refusal = refusalIn(await response.text(), response.status, `POST ${key}`);
        if (refusal) throw refusal;
      } catch (error) {
        if (error instanceof S3Failure && error.name === "NoSuchUpload") throw new UploadGone(String(error));
        if (error instanceof S3Failure && REFUSED_PARTS.has(error.name)) throw new PartsRefused(error.message);
        throw error;
      }
      const object = await head(key);
      if (!object) throw new Error(`storage completed ${key} but does not have it`);
      return object;
    },
    async abortMultipart(key, uploadId) {
      try {
        const response = await send("DELETE", urlOf(key, { uploadId }));
        await response.body?.cancel();
      } catch (error) {
        if (error instanceof S3Failure && error.name === "NoSuchUpload") throw new UploadGone(String(error));
        throw error;
      }
    },
    // Runners send their bytes to storage, never through the worker.
    through: null,
  };
}
