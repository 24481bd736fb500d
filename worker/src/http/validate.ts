import { gunzipSync } from "node:zlib";
import type { Context } from "hono";
import type { z } from "zod";
import { ApiError, issuesOf } from "./http-errors.js";

/**
 * The most a gzip-encoded JSON body may hold once decompressed, on the two routes that carry a test set
 * (DESIGN §8: test sets travel compactly): t0's collected set of a 250,000-test suite with ids of 100
 * characters. The cap on the bytes sent still applies; this one stops a small body that inflates without end.
 */
export const MAX_DECOMPRESSED_BYTES = 32 * 1024 * 1024;

/** JSON bodies are capped at 1 MiB (DESIGN §8), counted on the streamed bytes, so chunked bodies are capped too. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/**
 * The two bodies that may carry a whole test set have a cap of their own (DESIGN §8, per route): a
 * loop's creation (t0's collected set, sent once) and a report (a difference from it, which is small
 * unless most of the suite changed outcome). Gzip-encoded, a 100,000-test set of real-looking ids is
 * about 0.4 MB; 4 MiB leaves room for ids that compress worse.
 */
export const MAX_TEST_SET_BODY_BYTES = 4 * 1024 * 1024;

/**
 * A JSON route's body caps: on the bytes sent, and once decompressed (a gzip-encoded body). Only the
 * routes that carry a test set inflate past 1 MiB; every other route's cap holds decompressed too, so a
 * small gzip body costs a small route no more than its own limit's worth of work.
 */
export function bodyCaps(method: string, path: string): { sent: number; decompressed: number } {
  // A creation and a baseline lease's report carry t0's whole collected set; a report, a difference from it.
  const carriesTestSet = method === "POST" && (path === "/v1/loops" || /^\/v1\/leases\/[^/]+\/(report|baseline)$/.test(path));
  return carriesTestSet
    ? { sent: MAX_TEST_SET_BODY_BYTES, decompressed: MAX_DECOMPRESSED_BYTES }
    : { sent: MAX_JSON_BODY_BYTES, decompressed: MAX_JSON_BODY_BYTES };
}

/** The request body as text, gunzipped when it says `Content-Encoding: gzip`, within the route's decompressed cap (`bodyCaps`). */
async function bodyText(c: Context): Promise<string> {
  const encoding = (c.req.header("Content-Encoding") ?? "identity").trim().toLowerCase();
  if (encoding === "identity") return c.req.text();
  if (encoding !== "gzip") throw new ApiError(415, "unsupported_encoding", `request bodies may be sent as they are or gzip-encoded, not ${encoding}`);
  // The bytes sent are read whole (their own cap, bodyLimit in app.ts, holds them to a few MiB), then
  // inflated by one native call that stops at the decompressed cap: a DecompressionStream read piece by
  // piece into a string spent 80 ms of a 100,000-test creation in JavaScript (issue 30).
  const compressed = new Uint8Array(await c.req.arrayBuffer());
  if (compressed.byteLength === 0) return "";
  const cap = bodyCaps(c.req.method, c.req.path).decompressed;
  let inflated: Uint8Array;
  try {
    inflated = gunzipSync(compressed, { maxOutputLength: cap });
  } catch (error) {
    // Node says ERR_BUFFER_TOO_LARGE; workerd, a RangeError ("Memory limit exceeded").
    if (error instanceof RangeError || (error as { code?: string }).code === "ERR_BUFFER_TOO_LARGE") {
      throw new ApiError(413, "body_too_large", `a gzip-encoded body to this route may hold at most ${cap} bytes once decompressed`);
    }
    throw new ApiError(400, "invalid_encoding", "the request body is not valid gzip");
  }
  return new TextDecoder().decode(inflated);
}

/**
 * Reads and validates a JSON body (plain or gzip-encoded); a malformed or invalid body is a 4xx that
 * changes nothing. With `empty`, a route whose body is optional takes an empty one as that value.
 */
export async function readJson<S extends z.ZodType>(c: Context, schema: S, options: { empty?: unknown } = {}): Promise<z.infer<S>> {
  const text = await bodyText(c);
  if (text.trim() === "" && "empty" in options) return schema.parse(options.empty) as z.infer<S>;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ApiError(400, "invalid_json", "the request body is not valid JSON");
  }
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw new ApiError(400, "invalid_request", "the request body does not match the schema", issuesOf(parsed.error));
  return parsed.data;
}

/** Validates one path or query parameter. */
export function readParam<S extends z.ZodType>(value: unknown, schema: S, what: string): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new ApiError(400, "invalid_parameter", `${what} is malformed`, issuesOf(parsed.error));
  return parsed.data;
}
