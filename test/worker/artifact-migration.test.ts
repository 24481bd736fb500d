import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import { artifactKey } from "../../worker/src/artifacts/artifact-store.js";
import { TEST_IDS, call, createLoop, postJson } from "./fixtures.js";

// Migration 0004 (DESIGN §10, invariant 9): each loop's artifacts get a running total, backfilled once
// from the rows recorded before it, and rows gain the ETag of the object they verified (none on older rows).
// This file's D1 is its own: it is taken back to the schema before 0004, given rows as an older coordinator
// recorded them, and migrated again.

const [A] = TEST_IDS;
const MIGRATION = "0004_artifact_integrity.sql";

async function usage(): Promise<Record<string, number>> {
  const { results } = await env.DB.prepare("SELECT loop_id, bytes FROM loop_artifact_usage ORDER BY loop_id").all<{ loop_id: string; bytes: number }>();
  return Object.fromEntries(results.map((row) => [row.loop_id, row.bytes]));
}

describe(`migration ${MIGRATION}`, () => {
  it("backfills each loop's running total from its rows once, and leaves their ETags unknown until first needed", async () => {
    const migration = env.TEST_MIGRATIONS.find((candidate) => candidate.name === MIGRATION);
    if (!migration) throw new Error(`${MIGRATION} is not among the migrations: ${env.TEST_MIGRATIONS.map((candidate) => candidate.name).join(", ")}`);
    // The schema as 0003 left it.
    await env.DB.batch([env.DB.prepare("DROP TABLE loop_artifact_usage"), env.DB.prepare("ALTER TABLE artifacts DROP COLUMN etag")]);

    // Rows an older coordinator recorded: two loops' artifacts, and an object for one of them.
    const loop = await createLoop("migration", [A]);
    const bytes = new TextEncoder().encode("recorded before the migration\n");
    const sha256 = sha256Hex(bytes);
    await env.ARTIFACTS.put(artifactKey(loop.loop_id, sha256), bytes);
    const rows: [string, string, number][] = [
      [loop.loop_id, sha256, bytes.length],
      [loop.loop_id, sha256Hex("other"), 1_000],
      ["another-loop", sha256Hex("elsewhere"), 7],
    ];
    await env.DB.batch(
      rows.map(([loopId, digest, size]) =>
        env.DB.prepare(
          "INSERT INTO artifacts (loop_id, sha256, size, name, content_type, created_at) VALUES (?, ?, ?, 'old.bin', 'application/octet-stream', ?)",
        ).bind(loopId, digest, size, new Date().toISOString()),
      ),
    );

    await env.DB.batch(migration.queries.map((query) => env.DB.prepare(query)));
    expect(await usage()).toEqual({ [loop.loop_id]: bytes.length + 1_000, "another-loop": 7 });
    const { results } = await env.DB.prepare("SELECT DISTINCT etag FROM artifacts").all<{ etag: string | null }>();
    expect(results).toEqual([{ etag: null }]);

    // The migrated loop goes on from its total: an intent for the old artifact checks its object once and
    // pins its ETag; a new artifact adds its size; the old one adds nothing again.
    const intent = await postJson(`/v1/loops/${loop.loop_id}/artifacts`, { sha256, size: bytes.length, content_type: "application/octet-stream" });
    expect(await intent.json()).toEqual({ status: "exists" });
    const pinned = await env.DB.prepare("SELECT etag FROM artifacts WHERE loop_id = ? AND sha256 = ?").bind(loop.loop_id, sha256).first<{ etag: string }>();
    expect(pinned?.etag).toBe((await env.ARTIFACTS.head(artifactKey(loop.loop_id, sha256)))?.etag);
    const fresh = new TextEncoder().encode("recorded after it\n");
    expect((await call(`/v1/loops/${loop.loop_id}/artifacts/${sha256Hex(fresh)}`, { method: "PUT", body: fresh })).status).toBe(201);
    expect(await usage()).toEqual({ [loop.loop_id]: bytes.length + 1_000 + fresh.length, "another-loop": 7 });
  });
});
