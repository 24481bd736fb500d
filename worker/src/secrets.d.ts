// Secrets are not in wrangler.toml (so not in the generated worker-configuration.d.ts): set them with
// `wrangler secret put` when deployed; the local coordinator passes its own (README, "Receipts").
declare namespace Cloudflare {
  interface Env {
    /** The instance owner's token (DESIGN §11), at least 32 characters: creates teams. Without it no one can. */
    OWNER_TOKEN?: string;
    /** The receipt signing key (Ed25519): a private JWK, or PKCS8 as PEM or base64. Without it no receipt is issued. */
    RECEIPT_SIGNING_KEY?: string;
    /**
     * When the signing key began (an ISO 8601 date-time): published as its `not_before`, so it verifies
     * nothing it says it signed earlier. Unset: the private JWK's own `not_before` member, else no lower bound.
     */
    RECEIPT_KEY_NOT_BEFORE?: string;
    /**
     * Public keys that signed earlier receipts: a JSON key set `{ "keys": [...] }` or an array of public JWKs,
     * each with its `not_after` (when it was retired), or `"status": "revoked"`.
     */
    RECEIPT_RETIRED_KEYS?: string;
    /** Public keys that verify nothing any more (compromised): a JSON key set or an array of public JWKs. */
    RECEIPT_REVOKED_KEYS?: string;
    /** S3 mode (README, "Artifacts in S3 mode"): the access key id of an S3 API token for S3_BUCKET (R2: Object Read & Write). */
    S3_ACCESS_KEY_ID?: string;
    /** S3 mode: that token's secret access key. */
    S3_SECRET_ACCESS_KEY?: string;
  }
}
