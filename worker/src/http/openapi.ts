import * as z from "zod";
import { VERSION } from "#shared/version.js";
import * as api from "#shared/wire/api.js";
import * as auth from "#shared/wire/auth.js";
import * as review from "#shared/wire/review.js";

// The API's OpenAPI 3.1 document (DESIGN §8), served at GET /v1/openapi.json. Its schemas are generated
// from the very zod schemas the worker validates requests with and the runner parses answers with
// (`z.toJSONSchema`, JSON Schema 2020-12, which OpenAPI 3.1 uses as it is), so the document cannot say
// other than the code; test/worker/openapi.test.ts checks that it lists exactly the routes the app serves.

/** What one route takes and answers, as its handler validates and builds them. */
interface Operation {
  method: "get" | "post" | "put" | "delete";
  /** The path as OpenAPI spells it (`{id}`), and as Hono mounts it with `:id`. */
  path: string;
  summary: string;
  /** The token scope it needs; `public` for none. */
  scope: "read" | "propose" | "evaluate" | "review" | "propose or evaluate" | "admin" | "owner" | "any token" | "public";
  request?: z.ZodType;
  /** A body that is not JSON: the bytes of an artifact or a part. */
  binaryRequest?: boolean;
  responses: Record<number, z.ZodType | "binary" | "ndjson" | "empty">;
}

const OPERATIONS: Operation[] = [
  {
    method: "post",
    path: "/v1/loops",
    summary: "create a loop (with t0, or t0_commit for a runner to measure)",
    scope: "propose",
    request: api.CreateLoopRequest,
    responses: { 201: api.CreateLoopResponse, 200: api.CreateLoopResponse, 202: api.CreateLoopResponse },
  },
  { method: "get", path: "/v1/loops", summary: "the loops the token may see, newest first, paged", scope: "read", responses: { 200: api.LoopList } },
  {
    method: "get",
    path: "/v1/loops/{id}",
    summary: "one loop's summary (409 awaiting_baseline before it has a log)",
    scope: "read",
    responses: { 200: api.LoopSummary },
  },
  {
    method: "get",
    path: "/v1/loops/{id}/events",
    summary: "the event log as JSONL from ?after; with Accept: text/event-stream, Server-Sent Events",
    scope: "read",
    responses: { 200: "ndjson" },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/candidates",
    summary: "propose a candidate (and lease the next job, with `lease`)",
    scope: "propose",
    request: api.ProposeCandidateRequest,
    responses: { 201: api.ProposeCandidateResponse, 200: api.ProposeCandidateResponse },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/leases",
    summary: "lease the next job the runner's labels allow; 204 when none (long-poll with wait_ms)",
    scope: "evaluate",
    request: api.LeaseRequest,
    responses: { 200: api.Lease, 204: "empty" },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/receipts",
    summary: "sign an interim receipt over the log as it is",
    scope: "propose",
    request: api.IssueReceiptRequest,
    responses: { 201: api.ReceiptIssued },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/confirm",
    summary: "the confirm measurement's readings of t0 against the best",
    scope: "evaluate",
    request: api.ConfirmRequest,
    responses: { 200: api.ConfirmResponse },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/rechecks",
    summary: "a re-run of the best's gates (on resume, or every determinism.recheck_every iterations), judged against its recorded outcome",
    scope: "evaluate",
    request: api.RecheckRequest,
    responses: { 201: api.RecheckResponse, 200: api.RecheckResponse },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/candidates/{candidateId}/review",
    summary: "a person's answer (ack or reject) to a candidate's request to change protected files; admin or review scope",
    scope: "review",
    request: review.ReviewDecisionRequest,
    responses: { 201: api.ReviewResponse, 200: api.ReviewResponse },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/context-unsatisfiable",
    summary: "the agent's context cannot fit agent.context.budget at its first tier: the loop halts context_budget_unsatisfiable",
    scope: "propose",
    request: api.ContextUnsatisfiableRequest,
    responses: { 201: api.ContextUnsatisfiableResponse },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/cancel",
    summary: "stop a running loop (halt reason cancelled)",
    scope: "propose",
    request: api.CancelRequest,
    responses: { 201: api.CancelResponse, 200: api.CancelResponse },
  },
  {
    method: "post",
    path: "/v1/dashboard/links",
    summary: "a one-time link that logs a browser in to the dashboard as this token (what serve and run print)",
    scope: "read",
    responses: { 201: api.LoginLink },
  },
  { method: "get", path: "/v1/loops/{id}/artifacts", summary: "the loop's recorded artifacts, paged", scope: "read", responses: { 200: api.ArtifactList } },
  {
    method: "post",
    path: "/v1/loops/{id}/artifacts",
    summary: "an upload intent: exists, or where to upload",
    scope: "propose or evaluate",
    request: api.ArtifactIntent,
    responses: { 200: api.ArtifactIntentResponse },
  },
  { method: "get", path: "/v1/loops/{id}/artifacts/{sha256}", summary: "an artifact's bytes", scope: "read", responses: { 200: "binary" } },
  {
    method: "put",
    path: "/v1/loops/{id}/artifacts/{sha256}",
    summary: "an artifact's bytes, through the worker (binding mode)",
    scope: "propose or evaluate",
    binaryRequest: true,
    responses: { 201: api.ArtifactStored, 200: api.ArtifactStored },
  },
  {
    method: "put",
    path: "/v1/loops/{id}/artifacts/{sha256}/uploads/{uploadId}/parts/{part}",
    summary: "one part of a multipart upload (binding mode)",
    scope: "propose or evaluate",
    binaryRequest: true,
    responses: { 200: api.UploadedPart },
  },
  {
    method: "post",
    path: "/v1/loops/{id}/artifacts/{sha256}/uploads/{uploadId}/complete",
    summary: "complete a multipart upload: 202 verifying (its sha256 is checked after the answer), or 200 when recorded already",
    scope: "propose or evaluate",
    request: api.CompleteMultipartRequest,
    responses: { 202: api.ArtifactVerifying, 200: api.ArtifactStored },
  },
  {
    method: "delete",
    path: "/v1/loops/{id}/artifacts/{sha256}/uploads/{uploadId}",
    summary: "abort a multipart upload",
    scope: "propose or evaluate",
    responses: { 200: z.object({ status: z.literal("aborted") }) },
  },
  {
    method: "post",
    path: "/v1/leases/{leaseId}/heartbeat",
    summary: "extend a lease; 409 once it is lost or the loop halted",
    scope: "evaluate",
    request: api.HeartbeatRequest,
    responses: { 200: api.Lease },
  },
  {
    method: "post",
    path: "/v1/leases/{leaseId}/release",
    summary: "give a lease back; its job is queued again at once",
    scope: "evaluate",
    request: api.ReleaseRequest,
    responses: { 200: api.ReleaseResponse },
  },
  {
    method: "post",
    path: "/v1/leases/{leaseId}/report",
    summary: "an observation under a lease → the verdict",
    scope: "evaluate",
    request: api.ReportRequest,
    responses: { 200: api.ReportResponse },
  },
  {
    method: "post",
    path: "/v1/leases/{leaseId}/baseline",
    summary: "t0 measured on a baseline lease → the loop, created from it",
    scope: "evaluate",
    request: api.BaselineReportRequest,
    responses: { 201: api.BaselineReportResponse, 200: api.BaselineReportResponse },
  },
  {
    method: "post",
    path: "/v1/teams",
    summary: "create a team and its first admin token",
    scope: "owner",
    request: auth.CreateTeamRequest,
    responses: { 201: auth.TeamCreated },
  },
  { method: "get", path: "/v1/teams", summary: "every team", scope: "owner", responses: { 200: auth.TeamList } },
  {
    method: "post",
    path: "/v1/tokens",
    summary: "create a token (its secret is shown once)",
    scope: "admin",
    request: auth.CreateTokenRequest,
    responses: { 201: auth.TokenCreated },
  },
  { method: "get", path: "/v1/tokens", summary: "the tokens of the caller's team", scope: "admin", responses: { 200: auth.TokenList } },
  { method: "delete", path: "/v1/tokens/{id}", summary: "revoke a token and what it minted", scope: "admin", responses: { 200: auth.TokenRevoked } },
  { method: "get", path: "/v1/whoami", summary: "the token in use: team, scopes, loop, labels, expiry", scope: "any token", responses: { 200: auth.Identity } },
  { method: "get", path: "/v1/openapi.json", summary: "this document", scope: "public", responses: { 200: z.object({ openapi: z.string() }).loose() } },
];

/** The routes this document describes, as Hono mounts them (`POST /v1/loops/:id/cancel`). */
export function documentedRoutes(): string[] {
  return OPERATIONS.map((operation) => `${operation.method.toUpperCase()} ${operation.path.replace(/\{(\w+)\}/g, ":$1")}`);
}

/** A zod schema as JSON Schema; a request as its input (defaults optional), an answer as its output. */
function jsonSchema(schema: z.ZodType, io: "input" | "output"): unknown {
  return z.toJSONSchema(schema, { io, unrepresentable: "any" });
}

function contentOf(body: z.ZodType | "binary" | "ndjson", io: "input" | "output"): Record<string, unknown> {
  if (body === "binary") return { "application/octet-stream": { schema: { type: "string", contentMediaType: "application/octet-stream" } } };
  if (body === "ndjson") {
    return { "application/x-ndjson": { schema: { type: "string" } }, "text/event-stream": { schema: { type: "string" } } };
  }
  return { "application/json": { schema: jsonSchema(body, io) } };
}

let built: unknown = null;

/** The document, built once per isolate. */
export function openApiDocument(): unknown {
  if (built) return built;
  const paths: Record<string, Record<string, unknown>> = {};
  const error = { description: "a refusal (the JSON error envelope)", content: contentOf(api.ErrorBody, "output") };
  for (const operation of OPERATIONS) {
    const parameters = [...operation.path.matchAll(/\{(\w+)\}/g)].map((match) => ({ name: match[1], in: "path", required: true, schema: { type: "string" } }));
    const responses: Record<string, unknown> = { "4XX": error };
    for (const [status, body] of Object.entries(operation.responses)) {
      responses[status] = body === "empty" ? { description: "no content" } : { description: operation.summary, content: contentOf(body, "output") };
    }
    (paths[operation.path] ??= {})[operation.method] = {
      summary: operation.summary,
      "x-loopwarden-scope": operation.scope,
      ...(operation.scope === "public" ? { security: [] } : {}),
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(operation.request ? { requestBody: { required: true, content: contentOf(operation.request, "input") } } : {}),
      ...(operation.binaryRequest ? { requestBody: { required: true, content: contentOf("binary", "input") } } : {}),
      responses,
    };
  }
  built = {
    openapi: "3.1.0",
    info: {
      title: "loopwarden coordinator",
      version: VERSION,
      description: "The loop coordinator's HTTP API (v1): every request and answer is validated with these schemas.",
    },
    components: { securitySchemes: { token: { type: "http", scheme: "bearer" } } },
    security: [{ token: [] }],
    paths,
  };
  return built;
}
