import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { VERSION } from "../../shared/version.js";
import { ApiError, handleError } from "./http-errors.js";
import { artifactRoutes } from "./routes/artifacts.js";
import { leaseRoutes } from "./routes/leases.js";
import { loopRoutes } from "./routes/loops.js";

/** JSON bodies are capped at 1 MiB (DESIGN §8), counted on the streamed bytes, so chunked bodies are capped too. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/** The coordinator's HTTP API. */
export const app = new Hono<{ Bindings: Env }>();

const jsonBodyLimit = bodyLimit({
  maxSize: MAX_JSON_BODY_BYTES,
  onError: () => {
    throw new ApiError(413, "body_too_large", `request bodies are limited to ${MAX_JSON_BODY_BYTES} bytes`);
  },
});

app.use("/v1/*", async (c, next) => {
  // Artifact uploads stream straight into R2 under their own limit; every other body is JSON.
  if (c.req.method === "PUT" && /\/artifacts\/[^/]+$/.test(c.req.path)) return next();
  return jsonBodyLimit(c, next);
});

app.get("/healthz", async (c) => {
  await c.env.DB.prepare("SELECT 1").first();
  return c.json({ ok: true as const, version: VERSION });
});

app.route("/v1/loops", loopRoutes);
app.route("/v1/loops", artifactRoutes);
app.route("/v1/leases", leaseRoutes);

app.notFound((c) => c.json({ error: { code: "not_found", message: `no route for ${c.req.method} ${c.req.path}` } }, 404));
app.onError(handleError);
