import { webcrypto } from "node:crypto";
import path from "node:path";
import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";
import { quietRuntimeNoise } from "../support/runtime-noise.js";

const root = path.resolve(import.meta.dirname, "../..");

// The pool writes workerd's logs to this process's stderr and stdout: what a passing run prints there
// is only what concerns the tests (test/support/runtime-noise.ts lists what is dropped, and why).
quietRuntimeNoise(process.stderr);
quietRuntimeNoise(process.stdout);

export default defineConfig(async () => {
  const migrations = await readD1Migrations(path.join(root, "migrations"));
  // Receipt keys for the tests (never committed): the active signing key, one retired key whose public
  // half is still published, as after a rotation an hour ago (docs/receipts.md), and one revoked key.
  const privateJwk = async () => {
    const pair = (await webcrypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
    return webcrypto.subtle.exportKey("jwk", pair.privateKey);
  };
  const active = await privateJwk();
  const retired = await privateJwk();
  const revoked = await privateJwk();
  const rotated = new Date(Date.now() - 3_600_000).toISOString();
  return {
    plugins: [
      cloudflareTest({
        wrangler: { configPath: path.join(root, "wrangler.toml") },
        miniflare: {
          bindings: {
            TEST_MIGRATIONS: migrations,
            RECEIPT_SIGNING_KEY: JSON.stringify(active),
            RECEIPT_KEY_NOT_BEFORE: rotated,
            RECEIPT_RETIRED_KEYS: JSON.stringify([
              { kty: retired.kty, crv: retired.crv, x: retired.x, not_before: "2025-01-01T00:00:00.000Z", not_after: rotated },
            ]),
            RECEIPT_REVOKED_KEYS: JSON.stringify([{ kty: revoked.kty, crv: revoked.crv, x: revoked.x }]),
            TEST_RETIRED_SIGNING_KEY: JSON.stringify(retired),
            TEST_REVOKED_SIGNING_KEY: JSON.stringify(revoked),
            OWNER_TOKEN: `lwo_test_${Buffer.from(webcrypto.getRandomValues(new Uint8Array(24))).toString("base64url")}`,
          },
          // wrangler.toml's limits, but for these; a test that reaches a limit passes TEST_LOW_RATE_LIMIT
          // to the app in its place.
          ratelimits: {
            // The tests' own requests carry no CF-Connecting-IP, so they all count as one address
            // ("local"), and the 401 sweeps of auth.test.ts send over a hundred in a few seconds.
            AUTH_FAILURE_RATE_LIMIT: { simple: { limit: 10_000, period: 10 } },
            // 3 requests per 10 s, passed as any of the limits (an env override to app.fetch), so a test
            // reaches it in four requests (auth.test.ts, limits-per-team.test.ts).
            TEST_LOW_RATE_LIMIT: { simple: { limit: 3, period: 10 } },
          },
        },
      }),
    ],
    test: {
      name: "worker",
      root,
      include: ["test/worker/**/*.test.ts"],
      setupFiles: ["test/worker/apply-migrations.ts"],
      // In one group with the unit layer, three files at a time (why: vitest.config.ts, the unit project).
      sequence: { groupOrder: 0 },
      maxWorkers: 3,
    },
  };
});
