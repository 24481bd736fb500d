import { applyD1Migrations } from "cloudflare:test";
import { env } from "cloudflare:workers";

// Storage is isolated per test file; apply the D1 schema before each file's tests.
await applyD1Migrations(env.DB, env.TEST_MIGRATIONS);
