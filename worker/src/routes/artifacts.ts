import { drizzle } from "drizzle-orm/d1";
import { Hono, type Context } from "hono";
import * as z from "zod";
import {
  ArtifactIntent,
  CompleteMultipartRequest,
  type ArtifactIntentResponse,
  type ArtifactList,
  type ArtifactStored,
  type ArtifactVerifying,
  type UploadedPart,
} from "#shared/wire/api.js";
import { Sha256 } from "#shared/wire/observation.js";
import { MAX_PARTS, artifactLimits, uploadSizes, type ArtifactLimits } from "../artifacts/artifact-limits.js";
import { downloadHeaders, isSvgDrawing, svgDrawingHeaders, recordedContentType, sanitizeName } from "../artifacts/artifact-names.js";
import { artifactStorage } from "../artifacts/artifact-storage-mode.js";
import { PartsRefused, UploadGone, type ArtifactStorage, type NewUpload, type StoredObject, type ThroughWorker } from "../artifacts/artifact-storage.js";
import {
  adoptObject,
  artifactKey,
  confirmStored,
  damagedArtifact,
  deleteIfUnchanged,
  listArtifacts,
  putThroughWorker,
  quotaRefusal,
  requireQuota,
  storedToServe,
  verifyAfterAnswer,
  type ArtifactScope,
} from "../artifacts/artifact-store.js";
import { findArtifact, requireRecordedSize, viewOf } from "../artifacts/artifact-rows.js";
import { declaredLength, inStorage, storageError, uploadNotFound } from "../artifacts/artifact-upload.js";
import { requireScope, type AuthEnv } from "../http/auth.js";
import type { ArtifactRow } from "../db/schema.js";
import { ApiError } from "../http/http-errors.js";
import { openLoop } from "../http/loop-access.js";
import { teamQuotaOf } from "../team-limits.js";
import { readJson, readParam } from "../http/validate.js";

/**
 * Artifact routes (DESIGN §10), mounted at `/v1/loops`: an upload intent answers `exists`, one PUT (up
 * to ARTIFACT_PUT_MAX_BYTES, default MAX_PUT_BYTES), or a multipart upload (parts of
 * ARTIFACT_PART_BYTES, default PART_SIZE, then `complete`, which checks the object's size and the
 * quota and answers `verifying`: the whole object is hashed after the answer and recorded only if it is
 * the artifact, issue 30). In binding mode the PUTs come through the worker into R2; in S3 mode they go
 * to presigned storage URLs, and a single PUT's object is verified and recorded after an intent asked
 * `after_upload`, or when next asked about (`adoptObject`). Nothing is recorded in D1 before its bytes are confirmed in storage, and a recorded
 * artifact is immutable: an intent that gives it another size is refused (409 `size_conflict`), and its
 * object is answered `exists` or served only while it has the ETag of the bytes verified (`confirmStored`).
 *
 * Abandoned multipart uploads: a client that fails aborts its upload (`DELETE …/uploads/:uploadId`); one
 * that cannot (it crashed) leaves parts that R2's bucket lifecycle aborts after 7 days, R2's default rule
 * for incomplete multipart uploads. Parts never count toward a loop's quota, which counts recorded artifacts.
 */
export const artifactRoutes = new Hono<AuthEnv>();

/** A loop the caller reaches, and its team (whose artifact quota its artifacts count toward). */
interface ReachedLoop {
  loopId: string;
  teamId: string;
}

/**
 * The loop whose artifacts the caller reaches: reading needs `read`; storing needs a scope that writes
 * evidence (`propose` uploads candidates' bundles, `evaluate` gate logs).
 */
async function requireLoop(c: Context<AuthEnv>, access: "read" | "write"): Promise<ReachedLoop> {
  if (access === "write" && !c.get("principal").scopes.some((scope) => scope === "propose" || scope === "evaluate")) {
    requireScope(c, "evaluate");
  }
  const { loopId, teamId } = await openLoop(c, c.req.param("id"), "read");
  return { loopId, teamId };
}

/** Upload ids are storage's, opaque; they travel URL-encoded in a path segment. */
const UploadId = z.string().min(1).max(1_000);
const PartNumber = z
  .string()
  .regex(/^[1-9]\d{0,3}$/, "is not a part number")
  .transform(Number)
  .pipe(z.number().max(MAX_PARTS));

function shaOf(c: Context<AuthEnv>): string {
  return readParam(c.req.param("sha256"), Sha256, "sha256");
}

function uploadIdOf(c: Context<AuthEnv>): string {
  return readParam(c.req.param("uploadId"), UploadId, "upload id");
}

function limitsOf(c: Context<AuthEnv>): ArtifactLimits {
  return artifactLimits(c.env);
}

function storageOf(c: Context<AuthEnv>): Promise<ArtifactStorage> {
  return artifactStorage(c.env);
}

/** The binding's way in through the worker; in S3 mode runners upload to the presigned URLs an intent answers. */
function throughWorker(storage: ArtifactStorage): ThroughWorker {
  if (storage.through) return storage.through;
  throw new ApiError(
    409,
    "upload_to_storage",
    "this coordinator keeps artifacts in S3: send an upload intent (POST /v1/loops/:id/artifacts) and PUT to the presigned URLs it answers",
  );
}

/** The request's execution context, to run work after the answer; null for a request handed to the app without one (a test). */
function executionContextOf(c: Context<AuthEnv>): { waitUntil(promise: Promise<unknown>): void } | null {
  try {
    return c.executionCtx;
  } catch {
    return null;
  }
}

function scopeOf(c: Context<AuthEnv>, storage: ArtifactStorage, loop: ReachedLoop): ArtifactScope {
  return { storage, db: drizzle(c.env.DB), loopId: loop.loopId, quotaBytes: limitsOf(c).quotaBytes, team: teamQuotaOf(c.env, loop.teamId) };
}

function stored(c: Context<AuthEnv>, row: ArtifactRow, created: boolean) {
  const response: ArtifactStored = { status: "stored", artifact: viewOf(row) };
  return c.json(response, created ? 201 : 200);
}

const ListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(50),
  cursor: z
    .string()
    .regex(/^[^|]{1,40}\|[0-9a-f]{64}$/, "is not a cursor this route answered")
    .optional(),
});

artifactRoutes.get("/:id/artifacts", async (c) => {
  const { loopId } = await requireLoop(c, "read");
  const query = readParam(c.req.query(), ListQuery, "query");
  const [createdAt = "", sha256 = ""] = query.cursor?.split("|") ?? [];
  const page = await listArtifacts(drizzle(c.env.DB), loopId, query.limit, query.cursor ? { createdAt, sha256 } : null);
  const response: ArtifactList = { artifacts: page.rows.map(viewOf), next_cursor: page.nextCursor };
  return c.json(response);
});

artifactRoutes.post("/:id/artifacts", async (c) => {
  const loop = await requireLoop(c, "write");
  const { loopId } = loop;
  const intent = await readJson(c, ArtifactIntent);
  const storage = await storageOf(c);
  const { maxBytes } = limitsOf(c);
  const { putMaxBytes, partBytes } = uploadSizes(c.env);
  const ceiling = Math.min(maxBytes, MAX_PARTS * partBytes);
  if (intent.size > ceiling) throw new ApiError(413, "artifact_too_large", `artifacts are limited to ${ceiling} bytes; this one is ${intent.size}`);

  const key = artifactKey(loopId, intent.sha256);
  const scope = scopeOf(c, storage, loop);
  const [row, head] = await Promise.all([findArtifact(scope.db, loopId, intent.sha256), inStorage(() => storage.head(key))]);
  requireRecordedSize(row, intent.size);
  // Recorded, and storage still holds the object verified (its ETag; else it is checked again whole);
  // or in storage with that size but not recorded (a crash between the two, or a presigned PUT in S3
  // mode), which is verified and recorded now. Otherwise it is uploaded (again: a damaged object is
  // replaced under the same key, and verified before the row is pinned to it).
  // Asked again right after the caller's own presigned PUT (`after_upload`), such an object is checked
  // after the answer instead (issue 30), and recorded only if it is the artifact.
  if (!row && head?.size === intent.size && intent.after_upload) {
    await verifyAfterAnswer(executionContextOf(c), scope, intent.sha256, intent.size, intent);
    return c.json({ status: "verifying" } satisfies ArtifactIntentResponse);
  }
  const exists = row
    ? (await confirmStored(scope, row, head)) !== null
    : head?.size === intent.size && (await adoptObject(scope, intent.sha256, intent.size, intent)) !== null;
  if (exists) return c.json({ status: "exists" } satisfies ArtifactIntentResponse);
  if (!row) await requireQuota(scope, intent.size);

  const upload: NewUpload = {
    key,
    path: `/v1/loops/${loopId}/artifacts/${intent.sha256}`,
    sha256: intent.sha256,
    size: intent.size,
    contentType: intent.content_type,
    recordedContentType: recordedContentType(intent.content_type),
    name: sanitizeName(intent.name, intent.sha256),
  };
  if (intent.size <= putMaxBytes) {
    const target = await inStorage(() => storage.uploadUrl(upload));
    return c.json({ status: "upload", method: "PUT", ...target } satisfies ArtifactIntentResponse);
  }
  const { uploadId, partUrls } = await inStorage(() => storage.beginMultipart(upload, partBytes));
  // `complete` and `abort` are always the coordinator's: it completes with storage, then verifies.
  const uploadBase = `${upload.path}/uploads/${encodeURIComponent(uploadId)}`;
  const response: ArtifactIntentResponse = {
    status: "multipart",
    upload_id: uploadId,
    part_size: partBytes,
    part_urls: partUrls,
    complete_url: `${uploadBase}/complete`,
    abort_url: uploadBase,
  };
  return c.json(response);
});

artifactRoutes.put("/:id/artifacts/:sha256", async (c) => {
  const loop = await requireLoop(c, "write");
  const sha256 = shaOf(c);
  const storage = await storageOf(c);
  const through = throughWorker(storage);
  const name = sanitizeName(c.req.query("name"), sha256);
  const contentType = recordedContentType(c.req.header("content-type"));
  const length = declaredLength(c, Math.min(uploadSizes(c.env).putMaxBytes, limitsOf(c).maxBytes), "artifact");
  const { row, created } = await putThroughWorker(scopeOf(c, storage, loop), through, { sha256, name, contentType, length, body: c.req.raw.body });
  return stored(c, row, created);
});

/**
 * Serves one of the loop's recorded artifacts (`:id`, `:sha256`) to a caller with `read`: the API's
 * download, and the dashboard's. With `drawing`, an SVG is served as an image (`svgDrawingHeaders`) for
 * the dashboard to show inline; anything else is a download as ever.
 */
export async function serveArtifact(c: Context<AuthEnv>, options: { drawing?: boolean } = {}): Promise<Response> {
  const loop = await requireLoop(c, "read");
  const sha256 = shaOf(c);
  // Only what is recorded (verified) is served, and only while storage holds the bytes verified.
  const served = await storedToServe(scopeOf(c, await storageOf(c), loop), sha256);
  if (served === "not_recorded") throw new ApiError(404, "not_found", "no such artifact");
  if (served === "damaged") throw damagedArtifact(sha256);
  const { row, object } = served;
  const headers = options.drawing && isSvgDrawing(row) ? svgDrawingHeaders(row) : downloadHeaders(row);
  return c.body(object.body, 200, { ...headers, "Content-Length": String(object.size), ETag: object.httpEtag });
}

artifactRoutes.get("/:id/artifacts/:sha256", (c) => serveArtifact(c));

artifactRoutes.put("/:id/artifacts/:sha256/uploads/:uploadId/parts/:part", async (c) => {
  const { loopId } = await requireLoop(c, "write");
  const key = artifactKey(loopId, shaOf(c));
  const through = throughWorker(await storageOf(c));
  const uploadId = uploadIdOf(c);
  const partNumber = readParam(c.req.param("part"), PartNumber, "part number");
  const length = declaredLength(c, uploadSizes(c.env).partBytes, "part");
  if (length === 0) throw new ApiError(400, "invalid_request", "a part carries at least one byte");
  // A part sent again replaces the one sent before (R2 keeps the last): a retry needs nothing else.
  const part = await inStorage(() => through.uploadPart(key, uploadId, partNumber, c.req.raw.body, length));
  const response: UploadedPart = { part_number: part.partNumber, etag: part.etag };
  return c.json(response);
});

artifactRoutes.post("/:id/artifacts/:sha256/uploads/:uploadId/complete", async (c) => {
  const loop = await requireLoop(c, "write");
  const { loopId } = loop;
  const sha256 = shaOf(c);
  const uploadId = uploadIdOf(c);
  const storage = await storageOf(c);
  const body = await readJson(c, CompleteMultipartRequest);
  if (body.parts.some((part, index) => index > 0 && part.part_number <= (body.parts[index - 1]?.part_number ?? 0))) {
    throw new ApiError(400, "invalid_request", "list the parts in ascending order of part number, each once");
  }
  const scope = scopeOf(c, storage, loop);
  const key = artifactKey(loopId, sha256);

  // Recorded already, and storage still holds its verified bytes (another upload of the same bytes won):
  // completing would only overwrite it. A recorded artifact whose object was damaged is replaced.
  const recorded = await findArtifact(scope.db, loopId, sha256);
  const existing = recorded ? await confirmStored(scope, recorded) : null;
  if (existing) {
    await storage.abortMultipart(key, uploadId).catch(() => undefined);
    return stored(c, existing, false);
  }
  let object: StoredObject;
  try {
    object = await storage.completeMultipart(
      key,
      uploadId,
      body.parts.map((part) => ({ partNumber: part.part_number, etag: part.etag })),
    );
  } catch (error) {
    if (error instanceof UploadGone) {
      // A retry of a complete that went through but whose verification never finished: verify it now.
      const adopted = await adoptObject(scope, sha256, null);
      if (adopted) return stored(c, adopted, false);
      throw uploadNotFound();
    }
    if (error instanceof PartsRefused) throw new ApiError(400, "invalid_parts", `storage refused the parts: ${error.message}`);
    throw storageError(error);
  }

  // The object now exists but is not yet verified. What is cheap is checked before answering: the parts
  // are the client's, and parts that add up to another size than the intent declared are an incomplete
  // (or overlong) upload; a new artifact must fit the quota. Either way the object is deleted.
  const refuse = async (error: ApiError): Promise<never> => {
    await inStorage(() => deleteIfUnchanged(storage, key, object.etag));
    throw error;
  };
  const declared = recorded?.size ?? object.declaredSize ?? object.size;
  if (object.size !== declared) {
    await refuse(new ApiError(400, "size_mismatch", `the parts add up to ${object.size} bytes; the artifact is ${declared}`));
  }
  const overQuota = recorded ? null : await quotaRefusal(scope, object.size);
  if (overQuota) await refuse(overQuota);
  // Its digest is checked after the answer (issue 30: reading the object back took 10-12 s of a 500 MiB
  // upload's 14-32 s while the client waited): recorded if it hashes to its key, deleted if not, and
  // until then never listed, served or accepted as evidence (`verifyAfterAnswer`).
  await verifyAfterAnswer(executionContextOf(c), scope, sha256, object.size);
  const response: ArtifactVerifying = { status: "verifying", artifact: { sha256, size: object.size } };
  return c.json(response, 202);
});

/** `DELETE <abort_url>` takes no fields (an empty body is taken as `{}`). */
const AbortUploadRequest = z.strictObject({});

artifactRoutes.delete("/:id/artifacts/:sha256/uploads/:uploadId", async (c) => {
  const { loopId } = await requireLoop(c, "write");
  const key = artifactKey(loopId, shaOf(c));
  const uploadId = uploadIdOf(c);
  const storage = await storageOf(c);
  await readJson(c, AbortUploadRequest, { empty: {} });
  try {
    await storage.abortMultipart(key, uploadId);
  } catch (error) {
    // Gone already (completed or aborted): what the caller wanted.
    if (!(error instanceof UploadGone)) throw storageError(error);
  }
  return c.json({ status: "aborted" as const });
});
