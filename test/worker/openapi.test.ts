import { describe, expect, it } from "vitest";
import { app } from "../../worker/src/app.js";
import { documentedRoutes } from "../../worker/src/http/openapi.js";
import { call } from "./fixtures.js";

// GET /v1/openapi.json (DESIGN §8): the API described by the zod schemas it validates with, public, and
// listing exactly the routes the app serves — a route added without its description fails here.

interface Document {
  openapi: string;
  paths: Record<
    string,
    Record<
      string,
      { "x-loopwarden-scope": string; requestBody?: { content: Record<string, { schema: Record<string, unknown> }> }; responses: Record<string, unknown> }
    >
  >;
}

describe("the OpenAPI document", () => {
  it("is public, OpenAPI 3.1, and its request schemas are the validators' (a creation's required keys, its strictness)", async () => {
    const response = await call("/v1/openapi.json", {}, null);
    expect(response.status).toBe(200);
    const document = (await response.json()) as Document;
    expect(document.openapi).toBe("3.1.0");
    const create = document.paths["/v1/loops"]?.post;
    expect(create?.["x-loopwarden-scope"]).toBe("propose");
    const schema = create?.requestBody?.content["application/json"]?.schema;
    expect(schema).toMatchObject({ type: "object", additionalProperties: false, required: expect.arrayContaining(["idempotency_key", "contract"]) });
    expect(Object.keys((schema?.properties as Record<string, unknown> | undefined) ?? {})).toEqual(
      expect.arrayContaining(["idempotency_key", "contract", "t0", "t0_commit", "repository"]),
    );
    expect(document.paths["/v1/loops/{id}/cancel"]?.post?.responses).toHaveProperty("201");
  });

  it("describes exactly the routes the app serves under /v1", async () => {
    const mounted = new Set(
      app.routes.filter((route) => route.method !== "ALL" && route.path.startsWith("/v1/")).map((route) => `${route.method} ${route.path}`),
    );
    expect(new Set(documentedRoutes())).toEqual(mounted);
    const document = (await (await call("/v1/openapi.json", {}, null)).json()) as Document;
    const described = Object.entries(document.paths).flatMap(([path, operations]) =>
      Object.keys(operations).map((method) => `${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
    );
    expect(new Set(described)).toEqual(mounted);
  });
});
