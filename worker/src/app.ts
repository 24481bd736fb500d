import { Hono, type Context, type Next } from "hono";
import { bodyLimit } from "hono/body-limit";
import { VERSION } from "#shared/version.js";
import { ApiError, handleError } from "./http/http-errors.js";
import { artifactRoutes } from "./routes/artifacts.js";
import { leaseRoutes } from "./routes/leases.js";
import { loopRoutes } from "./routes/loops.js";
import { receiptRoutes } from "./routes/receipts.js";
import { tenancyRoutes } from "./routes/tenancy.js";
import { requireToken, type AuthEnv } from "./http/auth.js";
import { missingMigrations, notReady, requireSchema } from "./http/schema-ready.js";
import { clientAddress, holdToLimit } from "./http/rate-limits.js";
import { bodyCaps, MAX_JSON_BODY_BYTES, MAX_TEST_SET_BODY_BYTES } from "./http/validate.js";
import { openApiDocument } from "./http/openapi.js";
import { loginLinkRoutes, loginRoutes } from "./dashboard/login-routes.js";
import { dashboardRoutes } from "./dashboard/dashboard-routes.js";

export { MAX_JSON_BODY_BYTES, MAX_TEST_SET_BODY_BYTES };

/** The coordinator's HTTP API. */
export const app = new Hono<AuthEnv>();

const limitTo = (maxSize: number) =>
  bodyLimit({
    maxSize,
    onError: () => {
      throw new ApiError(413, "body_too_large", `request bodies to this route are limited to ${maxSize} bytes (as sent)`);
    },
  });
const jsonBodyLimit = limitTo(MAX_JSON_BODY_BYTES);
const testSetBodyLimit = limitTo(MAX_TEST_SET_BODY_BYTES);

app.use("/v1/*", async (c, next) => {
  // Artifact uploads stream straight into R2 under their own limit; every other body is JSON.
  if (c.req.method === "PUT" && /\/artifacts\/[^/]+(\/uploads\/[^/]+\/parts\/[^/]+)?$/.test(c.req.path)) return next();
  return (bodyCaps(c.req.method, c.req.path).sent === MAX_TEST_SET_BODY_BYTES ? testSetBodyLimit : jsonBodyLimit)(c, next);
});

// The public receipt routes and the key set are limited per client address (DESIGN §11), first: a cached
// answer costs little, but past the limit an address is answered 429 before anything else is done.
const receiptLimit = async (c: Context<AuthEnv>, next: Next) => {
  const address = clientAddress(c.req.raw);
  await holdToLimit(c.env.RECEIPT_RATE_LIMIT, address, () => "too many requests for receipts from this address");
  await next();
};
app.use("/r/*", receiptLimit);
app.use("/.well-known/loopwarden/*", receiptLimit);

// The API's description is public and needs no storage: answered before readiness and the token check.
app.get("/v1/openapi.json", (c) => c.json(openApiDocument()));

// Until every D1 migration the worker needs is applied, the routes that read D1 answer 503 not_ready
// (never a 500): the API before its token is checked (the check reads the tokens table), and the
// receipt routes but the page's script. The key set reads no D1.
const schemaReady = requireSchema<AuthEnv>();
app.use("/v1/*", schemaReady);
app.use("/r/*", (c, next) => (c.req.path.startsWith("/r/assets/") ? next() : schemaReady(c, next)));
// The dashboard's sessions live in D1 too: logging in and every page wait for its schema.
app.use("/login", schemaReady);
app.use("/login/*", schemaReady);
app.use("/logout", schemaReady);
app.use("/loops", schemaReady);
app.use("/loops/*", schemaReady);

// Every API route needs a token (DESIGN §11), checked after the body limit is in place and before any
// body is read; receipts, their keys and /healthz are public.
app.use("/v1/*", requireToken());

// Ready means ready: 200 once D1 answers and has every migration applied, else 503 not_ready.
app.get("/healthz", async (c) => {
  const missing = await missingMigrations(c.env.DB, { fresh: true });
  if (missing.length > 0) throw notReady(missing);
  return c.json({ ok: true as const, version: VERSION });
});

app.route("/v1/loops", loopRoutes);
app.route("/v1/loops", artifactRoutes);
app.route("/v1/leases", leaseRoutes);
app.route("/v1", tenancyRoutes);
app.route("/", receiptRoutes);
app.route("/v1/dashboard", loginLinkRoutes);
app.route("/", loginRoutes);
app.route("/", dashboardRoutes);

app.notFound((c) => c.json({ error: { code: "not_found", message: `no route for ${c.req.method} ${c.req.path}` } }, 404));
app.onError(handleError);
