import { parseDuration } from "#shared/duration.js";
import { bindingStorage } from "./artifact-storage-binding.js";
import type { ArtifactStorage } from "./artifact-storage.js";
import { ApiError } from "../http/http-errors.js";
import type { S3Settings } from "./artifact-storage-s3-settings.js";

// Which artifact storage a deployment uses (DESIGN §10): S3 mode when its S3 settings are configured
// (vars S3_ENDPOINT, S3_BUCKET, S3_REGION, S3_PRESIGN_TTL; secrets S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY),
// else the R2 binding. Some S3 settings without the others is an error, never a silent fallback.

/** S3_PRESIGN_TTL unless configured: 15 minutes. */
export const DEFAULT_PRESIGN_TTL_SECONDS = 15 * 60;
/** SigV4 presigned URLs live at most a week. */
const MAX_PRESIGN_TTL_SECONDS = 7 * 24 * 3600;

/** What S3 mode needs: without every one of these, no S3 mode (and some but not all is an error). */
const REQUIRED = ["S3_ENDPOINT", "S3_BUCKET", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"] as const;
const OPTIONAL = ["S3_REGION", "S3_PRESIGN_TTL"] as const;

type S3Env = Partial<Record<(typeof REQUIRED)[number] | (typeof OPTIONAL)[number], string>>;

/**
 * A deployment whose S3 settings cannot be used: answered as a 501 that says which, never a fallback.
 * Not a 500: a runner retries those, and no retry fixes a configuration (as with an unset signing key).
 */
function misconfigured(message: string): ApiError {
  const error = new ApiError(501, "storage_misconfigured", `artifact storage is misconfigured: ${message}`);
  console.error(`loopwarden: ${error.message}`);
  return error;
}

/**
 * The S3 settings, when S3 mode is configured; null when no S3 setting is. Some settings without the
 * others is a mistake, refused with a 500 naming what is missing rather than silently storing artifacts
 * in the R2 binding instead.
 */
export function s3Settings(env: S3Env): S3Settings | null {
  const isSet = (name: keyof S3Env) => (env[name] ?? "").trim() !== "";
  const given = [...REQUIRED, ...OPTIONAL].filter(isSet);
  if (given.length === 0) return null;
  const missing = REQUIRED.filter((name) => !isSet(name));
  if (missing.length > 0) {
    throw misconfigured(
      `S3 mode is half configured (${given.join(", ")} set): set ${missing.join(", ")} as well, or unset the S3_* settings for the R2 binding`,
    );
  }
  const endpoint = (env.S3_ENDPOINT ?? "").trim();
  if (!/^https?:\/\/[^/?#\s]+\/?$/.test(endpoint)) {
    throw misconfigured(`S3_ENDPOINT = ${JSON.stringify(endpoint)} is not an http(s) origin such as https://<account>.r2.cloudflarestorage.com`);
  }
  let presignTtlSeconds = DEFAULT_PRESIGN_TTL_SECONDS;
  if (isSet("S3_PRESIGN_TTL")) {
    const ms = parseDuration(env.S3_PRESIGN_TTL ?? "");
    if (ms === null || ms < 1_000 || ms > MAX_PRESIGN_TTL_SECONDS * 1_000) {
      throw misconfigured(`S3_PRESIGN_TTL = ${JSON.stringify(env.S3_PRESIGN_TTL)} is not a duration from 1s to 7d (write 15m)`);
    }
    presignTtlSeconds = Math.floor(ms / 1_000);
  }
  return {
    endpoint: endpoint.replace(/\/$/, ""),
    bucket: (env.S3_BUCKET ?? "").trim(),
    region: isSet("S3_REGION") ? (env.S3_REGION ?? "").trim() : "auto",
    accessKeyId: (env.S3_ACCESS_KEY_ID ?? "").trim(),
    secretAccessKey: (env.S3_SECRET_ACCESS_KEY ?? "").trim(),
    presignTtlSeconds,
  };
}

/** One S3 storage per isolate and settings: its client (and the signing key it keeps) is set up once. */
let cachedS3: { settings: string; storage: Promise<ArtifactStorage> } | null = null;

/**
 * The artifact storage this deployment configures: S3 mode when the S3 settings are there, else the R2
 * binding. S3 mode's code (its signing and XML parsing) is loaded only here, only in S3 mode.
 */
export async function artifactStorage(env: Env): Promise<ArtifactStorage> {
  const settings = s3Settings(env);
  if (!settings) return bindingStorage(env.ARTIFACTS);
  const signature = JSON.stringify(settings);
  if (cachedS3?.settings !== signature) {
    const storage = import("./artifact-storage-s3.js").then(({ s3Storage }) => s3Storage(settings));
    cachedS3 = { settings: signature, storage };
    storage.catch(() => {
      if (cachedS3?.storage === storage) cachedS3 = null;
    });
  }
  return cachedS3.storage;
}
