// Variables wrangler.toml leaves unset (they are there commented out), so the generated
// worker-configuration.d.ts does not declare them: set them in [vars] (or, for the local coordinator,
// with the LOOPWARDEN_* environment variables runner/src/coordinator/coordinator-config.ts passes through).
declare namespace Cloudflare {
  interface Env {
    /** S3 mode (README, "Artifacts in S3 mode"): the S3 API's origin, e.g. https://<account id>.r2.cloudflarestorage.com. */
    S3_ENDPOINT?: string;
    /** S3 mode: the bucket artifacts are kept in. */
    S3_BUCKET?: string;
    /** S3 mode: the signing region; "auto" (R2's) unless set. */
    S3_REGION?: string;
    /** S3 mode: how long a presigned upload URL stays valid, a duration from 1s to 7d; 15m unless set. */
    S3_PRESIGN_TTL?: string;
    /** Files up to this size go up in one PUT, larger ones in parts (a byte size, at most 95MiB; 95MiB unless set). */
    ARTIFACT_PUT_MAX_BYTES?: string;
    /** The part size of a multipart upload (a byte size from 5MiB to 95MiB; 64MiB unless set). */
    ARTIFACT_PART_BYTES?: string;
  }
}
