import type { Context } from "hono";
import { html } from "hono/html";
import { HTTPException } from "hono/http-exception";
import { ApiError } from "../http/http-errors.js";
import { page } from "./layout.js";

/**
 * The dashboard's errors as pages, not the API's JSON: the status and what went wrong in words (a loop of
 * another team is "not found", as in the API); anything unexpected is logged and said generically.
 */
export function dashboardError(error: Error, c: Context): Response | Promise<Response> {
  if (error instanceof HTTPException) {
    const status = error.status;
    const message = error instanceof ApiError || error.message ? error.message : "request refused";
    const headers = error instanceof ApiError ? error.headers : undefined;
    return c.html(
      page(`${status}`, html`<h1>${status === 404 ? "Not found" : `Refused (${status})`}</h1><p>${message}</p><p><a href="/loops">Your loops</a></p>`),
      status,
      headers,
    );
  }
  console.error("loopwarden: unhandled error", error);
  return c.html(page("500", html`<h1>Something went wrong</h1><p>The coordinator logged it.</p>`), 500);
}
