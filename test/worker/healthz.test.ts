import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";

describe("GET /healthz", () => {
  it("answers ok with the version once D1 is usable", async () => {
    const response = await exports.default.fetch("http://lw.test/healthz");
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true, version: expect.any(String) });
  });
});
