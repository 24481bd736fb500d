import { Hono, type Context } from "hono";
import { ArtifactIntent, type ArtifactIntentResponse } from "../../../shared/wire/api.js";
import { Sha256 } from "../../../shared/wire/observation.js";
import { ApiError, refusalError } from "../http-errors.js";
import { requireScope, type AuthEnv } from "../auth.js";
import { openLoop } from "../loops.js";
import { readJson, readParam } from "../validate.js";

/** The largest artifact accepted through the worker (local mode's streamed PUT, DESIGN §10). */
export const MAX_ARTIFACT_BYTES = 256 * 1024 * 1024;

/** R2 key of a loop's artifact: content-addressed, scoped to the loop. */
export function artifactKey(loopId: string, sha256: string): string {
  return `loops/${loopId}/sha256/${sha256}`;
}

/** Artifact routes (DESIGN §10), mounted at `/v1/loops`. */
export const artifactRoutes = new Hono<AuthEnv>();

/**
 * The loop whose artifacts the caller reaches: reading needs `read`; storing needs a scope that writes
 * evidence (`propose` uploads candidates' bundles, `evaluate` gate logs).
 */
async function requireLoop(c: Context<AuthEnv>, access: "read" | "write"): Promise<string> {
  if (access === "write" && !c.get("principal").scopes.some((scope) => scope === "propose" || scope === "evaluate")) {
    requireScope(c, "evaluate");
  }
  const { stub, caller } = openLoop(c, c.req.param("id"), "read");
  const answer = await stub.get(caller);
  if (!answer.ok) throw refusalError(answer);
  return answer.loop.loop_id;
}

artifactRoutes.post("/:id/artifacts", async (c) => {
  const loopId = await requireLoop(c, "write");
  const intent = await readJson(c, ArtifactIntent);
  if (intent.size > MAX_ARTIFACT_BYTES) {
    throw new ApiError(413, "body_too_large", `artifacts are limited to ${MAX_ARTIFACT_BYTES} bytes`);
  }
  const head = await c.env.ARTIFACTS.head(artifactKey(loopId, intent.sha256));
  const response: ArtifactIntentResponse =
    head && head.size === intent.size ? { status: "exists" } : { status: "upload", method: "PUT", url: `/v1/loops/${loopId}/artifacts/${intent.sha256}` };
  return c.json(response);
});

artifactRoutes.put("/:id/artifacts/:sha256", async (c) => {
  const loopId = await requireLoop(c, "write");
  const sha256 = readParam(c.req.param("sha256"), Sha256, "sha256");
  const length = Number(c.req.header("content-length") ?? Number.NaN);
  if (!Number.isSafeInteger(length) || length < 0) {
    throw new ApiError(411, "length_required", "send the artifact with a Content-Length header");
  }
  if (length > MAX_ARTIFACT_BYTES) throw new ApiError(413, "body_too_large", `artifacts are limited to ${MAX_ARTIFACT_BYTES} bytes`);
  const body = c.req.raw.body;
  if (!body && length > 0) throw new ApiError(400, "invalid_request", "the artifact body is missing");
  // R2 checks the sha256 itself and refuses a body that does not hash to the key: nothing unverified is stored.
  const stream = new FixedLengthStream(length);
  const piping = (body ?? new ReadableStream({ start: (controller) => controller.close() })).pipeTo(stream.writable);
  try {
    await c.env.ARTIFACTS.put(artifactKey(loopId, sha256), stream.readable, {
      sha256,
      httpMetadata: { contentType: c.req.header("content-type") ?? "application/octet-stream" },
    });
    await piping;
  } catch (error) {
    await piping.catch(() => undefined);
    console.warn("loopwarden: artifact upload refused", error);
    throw new ApiError(400, "digest_mismatch", "the uploaded bytes do not match the declared sha256 and length");
  }
  return c.json({ status: "stored", sha256, size: length }, 201);
});

artifactRoutes.get("/:id/artifacts/:sha256", async (c) => {
  const loopId = await requireLoop(c, "read");
  const sha256 = readParam(c.req.param("sha256"), Sha256, "sha256");
  const object = await c.env.ARTIFACTS.get(artifactKey(loopId, sha256));
  if (!object) throw new ApiError(404, "not_found", "no such artifact");
  return c.body(object.body, 200, {
    "Content-Type": object.httpMetadata?.contentType ?? "application/octet-stream",
    "Content-Length": String(object.size),
    ETag: object.httpEtag,
  });
});
