import type { D1Migration } from "cloudflare:test";

declare global {
  namespace Cloudflare {
    interface Env {
      TEST_MIGRATIONS: D1Migration[];
      /** A rate limit of 3 requests per 10 s, passed in place of a deployment's to reach it quickly. */
      TEST_LOW_RATE_LIMIT: RateLimit;
      /** The private half of the published retired key, to sign a receipt as before a rotation. */
      TEST_RETIRED_SIGNING_KEY: string;
      /** The private half of the published revoked key, to sign a receipt it may no longer vouch for. */
      TEST_REVOKED_SIGNING_KEY: string;
    }
  }
}
