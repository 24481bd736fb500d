import { readFile } from "node:fs/promises";
import path from "node:path";
import { parse as parseToml } from "smol-toml";
import * as z from "zod";
import { PACKAGE_ROOT } from "../paths.js";

// The local coordinator's configuration comes from wrangler.toml, the file `wrangler deploy` reads:
// the worker's name, compatibility settings and bindings. There is no second copy to drift. A binding
// kind this mapping does not know is refused by name rather than silently left out of the local worker.

/** The worker as wrangler.toml declares it, in the terms Miniflare takes. */
export interface WorkerConfig {
  name: string;
  compatibilityDate: string;
  compatibilityFlags: string[];
  /** Durable Object bindings: binding → class, with SQLite storage when a migration made it so. */
  durableObjects: Record<string, { className: string; useSQLite: boolean }>;
  /** D1 bindings: binding → database id (the preview id when there is one, as `wrangler dev` uses). */
  d1Databases: Record<string, string>;
  /** R2 bindings: binding → bucket name (the preview bucket when there is one). */
  r2Buckets: Record<string, string>;
  /** Rate limiting bindings: binding → limit per period (seconds). */
  ratelimits: Record<string, { simple: { limit: number; period: number } }>;
  /** Plain-text and JSON variables. */
  bindings: Record<string, unknown>;
  /** D1 migrations directory of each D1 binding, relative to the package root. */
  d1MigrationsDir: Record<string, string>;
}

const WranglerToml = z.looseObject({
  name: z.string().min(1),
  compatibility_date: z.string().min(1),
  compatibility_flags: z.array(z.string()).default([]),
  durable_objects: z
    .strictObject({ bindings: z.array(z.looseObject({ name: z.string(), class_name: z.string(), script_name: z.string().optional() })) })
    .optional(),
  migrations: z.array(z.looseObject({ tag: z.string(), new_sqlite_classes: z.array(z.string()).optional() })).default([]),
  d1_databases: z
    .array(
      z.looseObject({
        binding: z.string(),
        database_id: z.string(),
        preview_database_id: z.string().optional(),
        migrations_dir: z.string().default("migrations"),
      }),
    )
    .default([]),
  r2_buckets: z.array(z.looseObject({ binding: z.string(), bucket_name: z.string(), preview_bucket_name: z.string().optional() })).default([]),
  ratelimits: z
    .array(
      z.looseObject({
        name: z.string(),
        namespace_id: z.string(),
        simple: z.strictObject({ limit: z.number().int().min(1), period: z.union([z.literal(10), z.literal(60)]) }),
      }),
    )
    .default([]),
  vars: z.record(z.string(), z.unknown()).default({}),
});

// Keys of wrangler.toml that configure deployment or tooling, not what the worker sees at run time.
const NOT_BINDINGS = new Set([
  "name",
  "main",
  "compatibility_date",
  "compatibility_flags",
  "workers_dev",
  "routes",
  "route",
  "observability",
  "rules",
  "build",
  "minify",
  "keep_vars",
  "send_metrics",
  "account_id",
  "preview_urls",
  "upload_source_maps",
  "durable_objects",
  "migrations",
  "d1_databases",
  "r2_buckets",
  "ratelimits",
  "vars",
]);

/** The worker configuration of wrangler.toml's text; refuses what the local coordinator cannot run. */
export function workerConfigOf(text: string, file = "wrangler.toml"): WorkerConfig {
  const raw = parseToml(text);
  const unknown = Object.keys(raw).filter((key) => !NOT_BINDINGS.has(key));
  if (unknown.length > 0) {
    throw new Error(
      `${file} declares ${unknown.join(", ")}, which the local coordinator does not map to its worker; add the mapping in runner/src/coordinator/coordinator-config.ts`,
    );
  }
  const parsed = WranglerToml.safeParse(raw);
  if (!parsed.success) throw new Error(`${file} is not a worker configuration the local coordinator can run: ${z.prettifyError(parsed.error)}`);
  const config = parsed.data;
  const sqlite = new Set(config.migrations.flatMap((migration) => migration.new_sqlite_classes ?? []));
  const foreign = config.durable_objects?.bindings.filter((binding) => binding.script_name !== undefined) ?? [];
  if (foreign.length > 0)
    throw new Error(`${file}: Durable Object bindings to other scripts (${foreign.map((binding) => binding.name).join(", ")}) cannot run locally`);
  return {
    name: config.name,
    compatibilityDate: config.compatibility_date,
    compatibilityFlags: config.compatibility_flags,
    durableObjects: Object.fromEntries(
      (config.durable_objects?.bindings ?? []).map((binding) => [binding.name, { className: binding.class_name, useSQLite: sqlite.has(binding.class_name) }]),
    ),
    d1Databases: Object.fromEntries(config.d1_databases.map((database) => [database.binding, database.preview_database_id ?? database.database_id])),
    r2Buckets: Object.fromEntries(config.r2_buckets.map((bucket) => [bucket.binding, bucket.preview_bucket_name ?? bucket.bucket_name])),
    ratelimits: Object.fromEntries(config.ratelimits.map((limit) => [limit.name, { simple: limit.simple }])),
    bindings: config.vars,
    d1MigrationsDir: Object.fromEntries(config.d1_databases.map((database) => [database.binding, database.migrations_dir])),
  };
}

/**
 * Settings the local coordinator takes from its environment: `LOOPWARDEN_<NAME>` becomes its worker's
 * `<NAME>`, over wrangler.toml's. LEASE_TTL (a shorter lease for tests that kill runners); S3 mode
 * (docs/deploy.md, "Artifacts in S3 mode": the S3 vars, and the two secrets, which never belong in a file); and
 * where uploads split into parts (ARTIFACT_PUT_MAX_BYTES, ARTIFACT_PART_BYTES), so a test can make a
 * small file go up in parts; the artifact limits (ARTIFACT_MAX_BYTES, LOOP_ARTIFACT_QUOTA_BYTES); and the
 * limits that hold per team and per loop (TEAM_MAX_LOOPS, LOOP_MAX_CANDIDATES, LOOP_MAX_INTERIM_RECEIPTS,
 * TEAM_ARTIFACT_QUOTA_BYTES).
 */
export const ENV_SETTINGS = [
  "LEASE_TTL",
  "S3_ENDPOINT",
  "S3_BUCKET",
  "S3_REGION",
  "S3_ACCESS_KEY_ID",
  "S3_SECRET_ACCESS_KEY",
  "S3_PRESIGN_TTL",
  "ARTIFACT_PUT_MAX_BYTES",
  "ARTIFACT_PART_BYTES",
  "ARTIFACT_MAX_BYTES",
  "LOOP_ARTIFACT_QUOTA_BYTES",
  "TEAM_MAX_LOOPS",
  "LOOP_MAX_CANDIDATES",
  "LOOP_MAX_INTERIM_RECEIPTS",
  "TEAM_ARTIFACT_QUOTA_BYTES",
] as const;

/** The worker settings `env` gives (its non-empty `LOOPWARDEN_<NAME>` of ENV_SETTINGS), by their worker names. */
export function envSettings(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(ENV_SETTINGS.flatMap((name) => (env[`LOOPWARDEN_${name}`] ? [[name, env[`LOOPWARDEN_${name}`] as string]] : [])));
}

/** The package's own wrangler.toml, as the local coordinator runs it. */
export async function loadWorkerConfig(): Promise<WorkerConfig> {
  const file = path.join(PACKAGE_ROOT, "wrangler.toml");
  return workerConfigOf(await readFile(file, "utf8"), file);
}
