import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { ZodError } from "zod";
import type { ErrorBody } from "#shared/wire/api.js";
import type { Refusal } from "../loop/refusal.js";

/** A 4xx with a stable machine-readable code, answered as the JSON error envelope (DESIGN §8). */
export class ApiError extends HTTPException {
  constructor(
    status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    readonly issues?: ErrorBody["error"]["issues"],
    /** Headers the answer carries (`Retry-After`, `WWW-Authenticate`). */
    readonly headers: Record<string, string> = {},
  ) {
    super(status, { message });
  }
}

/** Turns zod issues into `{ path, message }` pairs with dotted paths (`gates.1.timeout`). */
export function issuesOf(error: ZodError): NonNullable<ErrorBody["error"]["issues"]> {
  return error.issues.map((issue) => ({
    path: issue.path.map(String).join(".") || "(body)",
    message: issue.message,
  }));
}

/** HTTP status of each expected refusal the LoopObject returns: every code has one (the compiler checks). */
const REFUSAL_STATUS: Record<Refusal["code"], ContentfulStatusCode> = {
  not_found: 404,
  lease_not_found: 404,
  // Another token's lease (DESIGN §11): the caller may see the loop, but not act on this job.
  lease_not_yours: 403,
  idempotency_conflict: 422,
  loop_halted: 409,
  stale_lease: 409,
  already_reported: 409,
  invalid_observation: 422,
  confirm_inapplicable: 422,
  // The best moved on since the runner measured: measure the new one.
  confirm_stale: 409,
  // Another token claimed this best's confirm measurement: only its readings count.
  confirm_not_yours: 403,
  // The figure is recorded and final (DESIGN §11): nobody replaces it.
  confirm_recorded: 409,
  // A runner the contract's evaluate.labels do not admit measures nothing for the loop.
  labels_unsatisfied: 403,
  // The loop exists, but has no log until a runner with the contract's labels measures its baseline.
  awaiting_baseline: 409,
  // A recheck names a candidate whose outcome is not a best's (neither t0 nor promoted): nothing to compare it with.
  not_a_best: 422,
  candidate_not_found: 404,
  // The candidate asked for no review, or its request was answered already: the answer stands.
  not_awaiting_review: 409,
  // A limit of the loop's storage, not a fault of the request's form, and no retry can help: not a 5xx
  // the runner retries (500, 502-504), but one it reports as it is.
  storage_limit: 507,
  // A team's or a loop's limit (DESIGN §11: TEAM_MAX_LOOPS, LOOP_MAX_CANDIDATES, LOOP_MAX_INTERIM_RECEIPTS):
  // like the storage limit, one no retry helps with, so a 507 the runner reports as it is, not a 429 it waits out.
  limit_reached: 507,
  // The coordinator is not configured to sign receipts: not the request's fault, and no retry helps.
  signing_unconfigured: 501,
};

/** The ApiError for a refusal returned by the LoopObject. */
export function refusalError(refusal: Pick<Refusal, "code" | "message">): ApiError {
  return new ApiError(REFUSAL_STATUS[refusal.code], refusal.code, refusal.message);
}

function envelope(code: string, message: string, issues?: ErrorBody["error"]["issues"]): ErrorBody {
  return { error: issues ? { code, message, issues } : { code, message } };
}

/** `app.onError`: domain errors become the envelope; anything else is logged and answered as a generic 500. */
export function handleError(error: Error, c: Context): Response {
  if (error instanceof ApiError) return c.json(envelope(error.code, error.message, error.issues), error.status, error.headers);
  if (error instanceof HTTPException) {
    const code = error.status === 413 ? "body_too_large" : "http_error";
    return c.json(envelope(code, error.message || "request refused"), error.status);
  }
  console.error("loopwarden: unhandled error", error);
  return c.json(envelope("internal_error", "internal error"), 500);
}
