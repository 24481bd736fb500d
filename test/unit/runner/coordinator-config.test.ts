import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { envSettings, workerConfigOf } from "../../../runner/src/coordinator/coordinator-config.js";
import { BoundedLog } from "../../../runner/src/coordinator/local-coordinator.js";
import { ROOT } from "../../support/cli.js";

// The local coordinator takes its worker's configuration from wrangler.toml (DESIGN §12): one source, no
// second copy to drift. What it cannot map is refused by name.

describe("workerConfigOf", () => {
  it("maps this project's wrangler.toml: name, compatibility date and flags, the SQLite Durable Object, D1, R2 and the rate limits", () => {
    expect(workerConfigOf(readFileSync(path.join(ROOT, "wrangler.toml"), "utf8"))).toEqual({
      name: "loopwarden",
      compatibilityDate: "2026-04-20",
      compatibilityFlags: ["nodejs_compat"],
      durableObjects: { LOOPS: { className: "LoopObject", useSQLite: true } },
      d1Databases: { DB: "00000000-0000-0000-0000-000000000000" },
      r2Buckets: { ARTIFACTS: "loopwarden-artifacts" },
      ratelimits: {
        TEAM_RATE_LIMIT: { simple: { limit: 500, period: 10 } },
        OWNER_RATE_LIMIT: { simple: { limit: 10_000, period: 10 } },
        AUTH_FAILURE_RATE_LIMIT: { simple: { limit: 300, period: 10 } },
        RECEIPT_RATE_LIMIT: { simple: { limit: 1_000, period: 10 } },
      },
      bindings: {
        LEASE_TTL: "2m",
        ARTIFACT_MAX_BYTES: "5GiB",
        LOOP_ARTIFACT_QUOTA_BYTES: "20GiB",
        TEAM_MAX_LOOPS: "10000",
        LOOP_MAX_CANDIDATES: "10000",
        LOOP_MAX_INTERIM_RECEIPTS: "1000",
        TEAM_ARTIFACT_QUOTA_BYTES: "1TiB",
      },
      d1MigrationsDir: { DB: "migrations" },
    });
  });

  it("uses preview ids and buckets as wrangler dev does, and passes vars", () => {
    const config = workerConfigOf(`name = "x"
compatibility_date = "2026-01-01"
compatibility_flags = ["nodejs_compat"]
vars = { MODE = "local" }
[[d1_databases]]
binding = "DB"
database_name = "x"
database_id = "prod"
preview_database_id = "preview"
[[r2_buckets]]
binding = "BUCKET"
bucket_name = "prod-bucket"
preview_bucket_name = "dev-bucket"
`);
    expect(config).toMatchObject({
      compatibilityFlags: ["nodejs_compat"],
      d1Databases: { DB: "preview" },
      r2Buckets: { BUCKET: "dev-bucket" },
      bindings: { MODE: "local" },
    });
  });

  it("refuses a binding kind it does not map, naming it, rather than run a worker without it", () => {
    expect(() => workerConfigOf('name = "x"\ncompatibility_date = "2026-01-01"\n[[kv_namespaces]]\nbinding = "KV"\nid = "1"\n')).toThrow(
      /declares kv_namespaces, which the local coordinator does not map/,
    );
  });
});

describe("envSettings", () => {
  it("passes LOOPWARDEN_<NAME> through as the worker's <NAME> for the settings it knows, and nothing else", () => {
    expect(
      envSettings({
        LOOPWARDEN_S3_ENDPOINT: "http://127.0.0.1:9000",
        LOOPWARDEN_S3_BUCKET: "artifacts",
        LOOPWARDEN_S3_ACCESS_KEY_ID: "id",
        LOOPWARDEN_S3_SECRET_ACCESS_KEY: "secret",
        LOOPWARDEN_S3_REGION: "",
        LOOPWARDEN_LEASE_TTL: "4s",
        LOOPWARDEN_ARTIFACT_PART_BYTES: "5MiB",
        LOOPWARDEN_ARTIFACT_MAX_BYTES: "32KiB",
        LOOPWARDEN_LOOP_ARTIFACT_QUOTA_BYTES: "1GiB",
        LOOPWARDEN_TEAM_MAX_LOOPS: "20",
        LOOPWARDEN_LOOP_MAX_CANDIDATES: "500",
        LOOPWARDEN_LOOP_MAX_INTERIM_RECEIPTS: "5",
        LOOPWARDEN_TEAM_ARTIFACT_QUOTA_BYTES: "10GiB",
        LOOPWARDEN_OWNER_TOKEN: "not a worker setting",
        S3_BUCKET: "not prefixed",
      }),
    ).toEqual({
      S3_ENDPOINT: "http://127.0.0.1:9000",
      S3_BUCKET: "artifacts",
      S3_ACCESS_KEY_ID: "id",
      S3_SECRET_ACCESS_KEY: "secret",
      LEASE_TTL: "4s",
      ARTIFACT_PART_BYTES: "5MiB",
      ARTIFACT_MAX_BYTES: "32KiB",
      LOOP_ARTIFACT_QUOTA_BYTES: "1GiB",
      TEAM_MAX_LOOPS: "20",
      LOOP_MAX_CANDIDATES: "500",
      LOOP_MAX_INTERIM_RECEIPTS: "5",
      TEAM_ARTIFACT_QUOTA_BYTES: "10GiB",
    });
  });
});

describe("BoundedLog", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lw-log-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("never grows past its limit: a full file moves to .1 (one generation) and a new one starts", () => {
    const file = path.join(dir, "coordinator.log");
    const log = new BoundedLog(file, 1_000);
    for (let line = 0; line < 100; line++) log.write(`${String(line).padStart(3, "0")} ${"x".repeat(60)}\n`);
    const current = readFileSync(file, "utf8");
    const previous = readFileSync(`${file}.1`, "utf8");
    expect(Buffer.byteLength(current)).toBeLessThanOrEqual(1_000);
    expect(Buffer.byteLength(previous)).toBeLessThanOrEqual(1_000);
    expect(current.trimEnd().split("\n").at(-1)).toMatch(/^099 /);
    // A reopened log counts what is already there.
    new BoundedLog(file, 1_000).write("x".repeat(999));
    expect(Buffer.byteLength(readFileSync(file, "utf8"))).toBe(999);
  });
});
