import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { REQUIRED_MIGRATIONS } from "../../worker/src/http/schema-ready.js";
import { call, postJson } from "./fixtures.js";

// Ready means ready: until D1 has every migration the worker needs, /healthz, the API and the receipt
// routes answer 503 not_ready with Retry-After, never a 500, and nothing is written. This file's D1 is
// its own (storage is isolated per test file), and the isolate has answered no request before this one:
// the newest migration is taken off the record before the first request, as on a database where it was
// never applied, then recorded again.

const NEWEST = env.TEST_MIGRATIONS.at(-1)?.name ?? "(none)";

async function teamRows(): Promise<number> {
  return (await env.DB.prepare("SELECT COUNT(*) AS n FROM teams").first<{ n: number }>())?.n ?? 0;
}

describe("schema readiness", () => {
  it("the worker requires exactly the migrations in migrations/ (add a new one to REQUIRED_MIGRATIONS in worker/src/http/schema-ready.ts)", () => {
    // TEST_MIGRATIONS is what readD1Migrations read from migrations/ (test/worker/vitest.config.ts).
    expect([...REQUIRED_MIGRATIONS]).toEqual(env.TEST_MIGRATIONS.map((migration) => migration.name));
  });

  it("answers 503 not_ready until the newest migration is recorded, writes nothing meanwhile, and serves once it is", async () => {
    await env.DB.prepare("DELETE FROM d1_migrations WHERE name = ?").bind(NEWEST).run();

    const health = await call("/healthz", {}, null);
    expect(health.status).toBe(503);
    expect(health.headers.get("retry-after")).toBe("1");
    const body = (await health.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("not_ready");
    expect(body.error.message).toContain(NEWEST);
    expect(body.error.message).toContain("wrangler d1 migrations apply DB --remote");

    // The API, before its token is checked: the owner's and a team token's request alike, and no token at all.
    const refused = await postJson("/v1/teams", { name: "too-early" });
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(await refused.json()).toMatchObject({ error: { code: "not_ready", message: expect.stringContaining(NEWEST) } });
    expect(await teamRows()).toBe(0);
    expect((await call("/v1/loops", {}, `lwt_0123456789abcdef_${"A".repeat(43)}`)).status).toBe(503);
    expect((await call("/v1/loops", {}, null)).status).toBe(503);
    // Receipts read D1 too; the page's script and the key set do not.
    expect((await call("/r/rc_0123456789abcdef0123456789abcdef", {}, null)).status).toBe(503);
    expect((await call("/r/rc_0123456789abcdef0123456789abcdef.json", {}, null)).status).toBe(503);
    expect((await call("/r/assets/verify.js", {}, null)).status).toBe(200);
    expect((await call("/.well-known/loopwarden/keys.json", {}, null)).status).toBe(200);

    // Not ready is asked again on every request: once recorded, it serves.
    await env.DB.prepare("INSERT INTO d1_migrations (name) VALUES (?)").bind(NEWEST).run();
    const ready = await call("/healthz", {}, null);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ ok: true, version: expect.any(String) });
    const created = await postJson("/v1/teams", { name: "in-time" });
    expect(created.status, await created.clone().text()).toBe(201);
    expect(await teamRows()).toBe(1);
    expect((await call("/r/rc_0123456789abcdef0123456789abcdef", {}, null)).status).toBe(404);
  });

  it("once ready, an isolate asks D1 no more for the API; /healthz still answers for D1 as it is", async () => {
    // Taken off the record again (never so in practice: migrations are not un-applied), only to show
    // the API's check is cached while /healthz asks each time.
    await env.DB.prepare("DELETE FROM d1_migrations WHERE name = ?").bind(NEWEST).run();
    try {
      expect((await call("/v1/teams")).status).toBe(200);
      expect((await call("/healthz", {}, null)).status).toBe(503);
    } finally {
      await env.DB.prepare("INSERT INTO d1_migrations (name) VALUES (?)").bind(NEWEST).run();
    }
  });
});
