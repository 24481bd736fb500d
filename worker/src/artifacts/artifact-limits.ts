// How large artifacts may be (DESIGN §10): what Workers allow through the worker, and what a deployment
// configures in wrangler.toml's [vars].

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;

/** The largest artifact sent as one PUT through the worker: a Worker's request body must stay under 100 MB. */
export const MAX_PUT_BYTES = 95 * MiB;

/**
 * The part size of a multipart upload through the worker: well above R2's 5 MiB minimum for every part
 * but the last, and well below the 100 MB request body limit. R2 needs every part but the last to be the
 * same size, so one size for every upload.
 */
export const PART_SIZE = 64 * MiB;

/**
 * The most parts one upload may have. R2 allows 10,000, but `complete` lists every part's ETag in a JSON
 * body capped at 1 MiB, and an ETag may be 200 characters: 4,000 of them fit. With PART_SIZE, 250 GiB.
 */
export const MAX_PARTS = 4_000;

/** ARTIFACT_MAX_BYTES unless configured: the largest one artifact may be. */
export const DEFAULT_ARTIFACT_MAX_BYTES = 5 * GiB;

/** LOOP_ARTIFACT_QUOTA_BYTES unless configured: what one loop's recorded artifacts may add up to. */
export const DEFAULT_LOOP_ARTIFACT_QUOTA_BYTES = 20 * GiB;

const UNITS: Record<string, number> = { "": 1, B: 1, KiB, MiB, GiB, TiB: 1024 * GiB };

/** A byte size as wrangler.toml writes it: `5368709120`, `5GiB`, `95 MiB`. Null when it is not one. */
export function parseByteSize(text: string): number | null {
  const match = /^\s*(\d{1,16})\s*(B|KiB|MiB|GiB|TiB)?\s*$/.exec(text);
  if (!match?.[1]) return null;
  const bytes = Number(match[1]) * (UNITS[match[2] ?? ""] ?? Number.NaN);
  return Number.isSafeInteger(bytes) ? bytes : null;
}

/** This deployment's artifact limits, in bytes. */
export interface ArtifactLimits {
  maxBytes: number;
  quotaBytes: number;
}

function configured(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const bytes = parseByteSize(value);
  // A limit that cannot be read is a broken deployment: refuse loudly rather than run without it.
  if (bytes === null) throw new Error(`loopwarden: ${name} = ${JSON.stringify(value)} is not a byte size (write 5368709120 or 5GiB)`);
  return bytes;
}

/** The limits wrangler.toml's [vars] set (ARTIFACT_MAX_BYTES, LOOP_ARTIFACT_QUOTA_BYTES), else the defaults. */
export function artifactLimits(env: { ARTIFACT_MAX_BYTES?: string; LOOP_ARTIFACT_QUOTA_BYTES?: string }): ArtifactLimits {
  return {
    maxBytes: configured("ARTIFACT_MAX_BYTES", env.ARTIFACT_MAX_BYTES, DEFAULT_ARTIFACT_MAX_BYTES),
    quotaBytes: configured("LOOP_ARTIFACT_QUOTA_BYTES", env.LOOP_ARTIFACT_QUOTA_BYTES, DEFAULT_LOOP_ARTIFACT_QUOTA_BYTES),
  };
}

/** The smallest part S3 and R2 take for every part but the last. */
export const MIN_PART_BYTES = 5 * MiB;

/** How this deployment splits uploads: one PUT up to `putMaxBytes`, else parts of `partBytes`. */
export interface UploadSizes {
  putMaxBytes: number;
  partBytes: number;
}

/**
 * ARTIFACT_PUT_MAX_BYTES (default MAX_PUT_BYTES) and ARTIFACT_PART_BYTES (default PART_SIZE): lower
 * values make a small file go up in parts, which tests of multipart uploads use. Neither may exceed
 * MAX_PUT_BYTES (a request body through the worker stays under 100 MB), and a part is at least
 * MIN_PART_BYTES; a value outside that is a broken deployment, refused loudly.
 */
export function uploadSizes(env: { ARTIFACT_PUT_MAX_BYTES?: string; ARTIFACT_PART_BYTES?: string }): UploadSizes {
  const putMaxBytes = configured("ARTIFACT_PUT_MAX_BYTES", env.ARTIFACT_PUT_MAX_BYTES, MAX_PUT_BYTES);
  const partBytes = configured("ARTIFACT_PART_BYTES", env.ARTIFACT_PART_BYTES, PART_SIZE);
  if (putMaxBytes > MAX_PUT_BYTES) throw new Error(`loopwarden: ARTIFACT_PUT_MAX_BYTES may be at most ${MAX_PUT_BYTES} bytes (95MiB)`);
  if (partBytes < MIN_PART_BYTES || partBytes > MAX_PUT_BYTES) {
    throw new Error(`loopwarden: ARTIFACT_PART_BYTES must be between ${MIN_PART_BYTES} (5MiB) and ${MAX_PUT_BYTES} (95MiB) bytes`);
  }
  return { putMaxBytes, partBytes };
}
