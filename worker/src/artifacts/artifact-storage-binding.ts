import { R2_ERROR, r2ErrorCode, streamInto } from "./artifact-upload.js";
import { PartsRefused, UploadGone, type ArtifactStorage, type ObjectBody, type StoredObject } from "./artifact-storage.js";

// Binding mode (DESIGN §10): artifacts in the R2 binding, every byte through the worker. A single PUT and
// each part are the coordinator's own paths; R2 hashes a single PUT itself and refuses bytes that do not
// hash to the key.

function describe(object: R2Object): StoredObject {
  const declared = object.customMetadata?.size;
  return {
    size: object.size,
    etag: object.etag,
    httpEtag: object.httpEtag,
    name: object.customMetadata?.name,
    contentType: object.httpMetadata?.contentType,
    declaredSize: declared === undefined ? undefined : Number(declared),
  };
}

/** Storage in the R2 binding `bucket`. */
export function bindingStorage(bucket: R2Bucket): ArtifactStorage {
  return {
    mode: "binding",
    async head(key) {
      const object = await bucket.head(key);
      return object ? describe(object) : null;
    },
    async get(key): Promise<ObjectBody | null> {
      const object = await bucket.get(key);
      return object ? { ...describe(object), body: object.body } : null;
    },
    async delete(key) {
      await bucket.delete(key);
    },
    async uploadUrl(upload) {
      return { url: `${upload.path}?name=${encodeURIComponent(upload.name)}` };
    },
    async beginMultipart(upload, partBytes) {
      const created = await bucket.createMultipartUpload(upload.key, {
        httpMetadata: { contentType: upload.recordedContentType },
        // What `complete` checks the finished object against, and records.
        customMetadata: { name: upload.name, size: String(upload.size), sha256: upload.sha256 },
      });
      const base = `${upload.path}/uploads/${encodeURIComponent(created.uploadId)}`;
      const parts = Math.max(1, Math.ceil(upload.size / partBytes));
      return { uploadId: created.uploadId, partUrls: Array.from({ length: parts }, (_, index) => `${base}/parts/${index + 1}`) };
    },
    async completeMultipart(key, uploadId, parts) {
      try {
        return describe(await bucket.resumeMultipartUpload(key, uploadId).complete(parts.map((part) => ({ ...part }))));
      } catch (error) {
        const code = r2ErrorCode(error);
        if (code === R2_ERROR.NO_SUCH_UPLOAD) throw new UploadGone(String(error));
        if (code === R2_ERROR.INVALID_PART || code === R2_ERROR.ENTITY_TOO_SMALL || code === R2_ERROR.BAD_UPLOAD) {
          throw new PartsRefused(error instanceof Error ? error.message : String(error));
        }
        throw error;
      }
    },
    async abortMultipart(key, uploadId) {
      try {
        await bucket.resumeMultipartUpload(key, uploadId).abort();
      } catch (error) {
        if (r2ErrorCode(error) === R2_ERROR.NO_SUCH_UPLOAD) throw new UploadGone(String(error));
        throw error;
      }
    },
    through: {
      async put(upload, body, length) {
        const object = await streamInto(body, length, (stream) =>
          bucket.put(upload.key, stream, {
            sha256: upload.sha256,
            httpMetadata: { contentType: upload.recordedContentType },
            customMetadata: { name: upload.name },
          }),
        );
        return object ? describe(object) : null;
      },
      async uploadPart(key, uploadId, partNumber, body, length) {
        const part = await streamInto(body, length, (stream) => bucket.resumeMultipartUpload(key, uploadId).uploadPart(partNumber, stream));
        return { partNumber: part.partNumber, etag: part.etag };
      },
    },
  };
}
