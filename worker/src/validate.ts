import type { Context } from "hono";
import type { z } from "zod";
import { ApiError, issuesOf } from "./http-errors.js";

/** Reads and validates a JSON body; a malformed or invalid body is a 400 that changes nothing. */
export async function readJson<S extends z.ZodType>(c: Context, schema: S): Promise<z.infer<S>> {
  let body: unknown;
  try {
    body = await c.req.json();
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
