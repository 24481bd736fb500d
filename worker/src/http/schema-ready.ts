import type { MiddlewareHandler } from "hono";
import { ApiError } from "./http-errors.js";

// Ready means ready: a worker whose D1 lacks a migration it needs would answer the routes that read D1
// with a 500 (`no such table`), which is what a client sees when it reaches a local coordinator before
// it has applied the migrations it applies at start, or a worker deployed before `wrangler d1
// migrations apply --remote`. Until every one is applied, /healthz, the API and the receipt routes that
// read D1 answer 503 `not_ready` with Retry-After instead.

/**
 * Every D1 migration (file in migrations/) this worker's code needs, by the name wrangler, the worker
 * tests' `applyD1Migrations` and the local coordinator record in `d1_migrations`. A new migration goes
 * here too: a worker test fails while this list and migrations/ differ.
 */
export const REQUIRED_MIGRATIONS: readonly string[] = [
  "0000_init.sql",
  "0001_receipts.sql",
  "0002_auth.sql",
  "0003_artifacts.sql",
  "0004_artifact_integrity.sql",
  "0005_token_labels.sql",
  "0006_dashboard.sql",
];

/** Set once every required migration is seen applied: migrations are never un-applied, so this isolate asks no more. */
let ready = false;

/**
 * The required migrations D1 has not recorded as applied (none once ready). `fresh` asks D1 even when
 * this isolate already saw them all, for /healthz, which answers for D1 as it is now.
 */
export async function missingMigrations(db: D1Database, options: { fresh?: boolean } = {}): Promise<string[]> {
  if (ready && !options.fresh) return [];
  let applied: Set<string>;
  try {
    const { results } = await db.prepare("SELECT name FROM d1_migrations").all<{ name: string }>();
    applied = new Set(results.map((row) => row.name));
  } catch (error) {
    // No migration was ever applied here: wrangler (or the local coordinator) creates the table with the first.
    if (!/no such table/i.test((error as Error).message)) throw error;
    applied = new Set();
  }
  const missing = REQUIRED_MIGRATIONS.filter((name) => !applied.has(name));
  if (missing.length === 0) ready = true;
  return missing;
}

/** The 503 answered while migrations are missing: the client retries after a second. */
export function notReady(missing: readonly string[]): ApiError {
  return new ApiError(
    503,
    "not_ready",
    `the coordinator's D1 migrations ${missing.join(", ")} are not applied yet: a local coordinator applies them as it starts ` +
      "(retry in a moment); for a deployed worker, `wrangler d1 migrations apply DB --remote` applies them",
    undefined,
    { "Retry-After": "1" },
  );
}

/** Answers 503 `not_ready` until every required migration is applied; after that, a per-isolate flag. */
export function requireSchema<E extends { Bindings: Env }>(): MiddlewareHandler<E> {
  return async (c, next) => {
    const missing = await missingMigrations(c.env.DB);
    if (missing.length > 0) throw notReady(missing);
    await next();
  };
}
