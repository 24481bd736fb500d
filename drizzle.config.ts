import { defineConfig } from "drizzle-kit";

// `npm run db:generate` writes D1 migrations from worker/src/db/schema.ts; wrangler applies them.
export default defineConfig({
  dialect: "sqlite",
  schema: "./worker/src/db/schema.ts",
  out: "./migrations",
});
