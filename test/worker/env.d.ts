import type { D1Migration } from "cloudflare:test";

declare global {
  namespace Cloudflare {
    interface Env {
      TEST_MIGRATIONS: D1Migration[];
      /** The private half of the published retired key, to sign a receipt as before a rotation. */
      TEST_RETIRED_SIGNING_KEY: string;
      /** The private half of the published revoked key, to sign a receipt it may no longer vouch for. */
      TEST_REVOKED_SIGNING_KEY: string;
    }
  }
}
