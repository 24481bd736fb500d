import { and, eq, inArray, sql } from "drizzle-orm";
import type { DrizzleD1Database } from "drizzle-orm/d1";
import type { ArtifactView } from "#shared/wire/api.js";
import { artifacts, loopArtifactUsage, loops, type ArtifactRow } from "../db/schema.js";
import { ApiError } from "../http/http-errors.js";
import type { TeamQuota } from "../team-limits.js";

// A loop's artifact rows in D1 (DESIGN §10): one row per verified artifact, and the loop's running
// total of recorded bytes grown in the same batch as the row it counts, so the loop's quota (and its
// team's) is checked where the row is written. artifact-store.ts decides when a row may be written:
// only once storage holds the bytes with their size and digest.

/** The wire view of a recorded artifact. */
export function viewOf(row: ArtifactRow): ArtifactView {
  return { sha256: row.sha256, size: row.size, name: row.name, content_type: row.contentType, created_at: row.createdAt };
}

/** A loop's recorded artifact, if it has one with this digest. */
export async function findArtifact(db: DrizzleD1Database, loopId: string, sha256: string): Promise<ArtifactRow | null> {
  const [row] = await db
    .select()
    .from(artifacts)
    .where(and(eq(artifacts.loopId, loopId), eq(artifacts.sha256, sha256)))
    .limit(1);
  return row ?? null;
}

/** D1 binds at most 100 parameters a query: digests are looked up this many at a time. */
const DIGESTS_PER_QUERY = 90;

/**
 * Of the artifacts an observation or proposal cites, those not recorded (verified) with that size: the
 * evidence a decision may rest on is only what the coordinator checked. One query per 90 digests.
 */
export async function unrecorded<T extends { sha256: string; size: number }>(db: DrizzleD1Database, loopId: string, cited: readonly T[]): Promise<T[]> {
  const sizes = new Map<string, number>();
  const digests = [...new Set(cited.map((ref) => ref.sha256))];
  for (let start = 0; start < digests.length; start += DIGESTS_PER_QUERY) {
    const rows = await db
      .select({ sha256: artifacts.sha256, size: artifacts.size })
      .from(artifacts)
      .where(and(eq(artifacts.loopId, loopId), inArray(artifacts.sha256, digests.slice(start, start + DIGESTS_PER_QUERY))));
    for (const row of rows) sizes.set(row.sha256, row.size);
  }
  return cited.filter((ref) => sizes.get(ref.sha256) !== ref.size);
}

/** The bytes a loop's recorded artifacts take: its running total, one row (0 before its first artifact). */
export async function usedBytes(db: DrizzleD1Database, loopId: string): Promise<number> {
  const [usage] = await db.select({ bytes: loopArtifactUsage.bytes }).from(loopArtifactUsage).where(eq(loopArtifactUsage.loopId, loopId)).limit(1);
  return Number(usage?.bytes ?? 0);
}

/** The 507 for a new artifact of `size` bytes that would take the loop's recorded artifacts past its quota. */
export function quotaExceeded(quotaBytes: number, used: number, size: number): ApiError {
  return new ApiError(507, "quota_exceeded", `this loop's artifacts may take ${quotaBytes} bytes; it has ${used}, and this one is ${size}`);
}

/** The bytes the loop's team's recorded artifacts take: the running totals of the loop and of the team's loops in D1. */
function teamUsage(loopId: string, teamId: string) {
  return sql`(SELECT COALESCE(SUM(${loopArtifactUsage.bytes}), 0) FROM ${loopArtifactUsage}
              WHERE ${loopArtifactUsage.loopId} = ${loopId}
                 OR ${loopArtifactUsage.loopId} IN (SELECT ${loops.id} FROM ${loops} WHERE ${loops.teamId} = ${teamId}))`;
}

/** What a team's loops' recorded artifacts take together, the loop's own included (see `teamUsage`). */
export async function teamUsedBytes(db: DrizzleD1Database, loopId: string, teamId: string): Promise<number> {
  const row = await db.get<{ bytes: number } | undefined>(sql`SELECT ${teamUsage(loopId, teamId)} AS bytes`);
  return Number(row?.bytes ?? 0);
}

/** The 507 for a new artifact of `size` bytes that would take the team's loops' recorded artifacts past the team's quota. */
export function teamQuotaExceeded(team: TeamQuota, used: number, size: number): ApiError {
  return new ApiError(
    507,
    "quota_exceeded",
    `team ${team.teamId}'s artifacts may take ${team.quotaBytes} bytes (TEAM_ARTIFACT_QUOTA_BYTES); its loops have ${used}, and this one is ${size}`,
  );
}

/** A verified object, as it is recorded: its ETag is the one whose bytes were checked. */
export type VerifiedArtifact = Omit<ArtifactRow, "createdAt" | "etag"> & { etag: string };

/**
 * Records a verified artifact, held to the loop's quota, in one D1 batch (one transaction; D1 runs a
 * database's writes one at a time, so no other upload's batch falls between these statements):
 *   1. the loop's usage row exists (0 bytes when new);
 *   2. the artifact row is inserted only if the loop's running total plus its size stays within the
 *      quota (and, for a team's loop, the team's loops' totals plus its size within the team's), and not
 *      if the artifact is recorded already (ON CONFLICT DO NOTHING);
 *   3. the running total grows by its size only if statement 2 inserted the row (`changes() = 1`: the
 *      rows the statement just before changed), so a duplicate or a refusal adds nothing;
 *   4. the row's ETag becomes the verified object's (a row recorded already, whose object was changed
 *      or damaged since, or was recorded before ETags were kept, is pinned to the bytes checked now).
 * The quota check and the growth are thus one step: of two uploads that together exceed the quota, the
 * second batch finds the first's total and records nothing. Answers the row and whether this call
 * created it, or null when the quota refused it (nothing recorded).
 */
export async function recordArtifact(
  db: DrizzleD1Database,
  artifact: VerifiedArtifact,
  quotaBytes: number,
  team: TeamQuota | null = null,
): Promise<{ row: ArtifactRow; created: boolean } | null> {
  const { loopId, sha256, size, name, contentType, etag } = artifact;
  const createdAt = new Date().toISOString();
  const withinTeam = team ? sql`AND ${teamUsage(loopId, team.teamId)} + ${size} <= ${team.quotaBytes}` : sql``;
  const [, inserted, counted, pinned] = await db.batch([
    db.insert(loopArtifactUsage).values({ loopId, bytes: 0 }).onConflictDoNothing(),
    db
      .insert(artifacts)
      .select(
        sql`SELECT ${loopId}, ${sha256}, ${size}, ${name}, ${contentType}, ${createdAt}, ${etag}
            WHERE (SELECT ${loopArtifactUsage.bytes} FROM ${loopArtifactUsage} WHERE ${loopArtifactUsage.loopId} = ${loopId}) + ${size} <= ${quotaBytes}
            ${withinTeam}`,
      )
      .onConflictDoNothing()
      .returning({ sha256: artifacts.sha256 }),
    db
      .update(loopArtifactUsage)
      .set({ bytes: sql`${loopArtifactUsage.bytes} + ${size}` })
      .where(and(eq(loopArtifactUsage.loopId, loopId), sql`changes() = 1`))
      .returning({ bytes: loopArtifactUsage.bytes }),
    db
      .update(artifacts)
      .set({ etag })
      .where(and(eq(artifacts.loopId, loopId), eq(artifacts.sha256, sha256)))
      .returning(),
  ]);
  const created = inserted.length > 0;
  if (created !== counted.length > 0) {
    // Never expected: the running total no longer counts what the rows hold. Said loudly, never silently.
    console.error(`loopwarden: recording ${loopId}/${sha256} ${created ? "inserted a row but did not count it" : "counted a row it did not insert"}`);
  }
  const [row] = pinned;
  return row ? { row, created } : null;
}

/**
 * A recorded artifact's size is its bytes' size: an upload of the same sha256 with another is not those
 * bytes, and is refused before anything is presigned or stored (storage's object is never replaced by it).
 */
export function requireRecordedSize(row: ArtifactRow | null, size: number): void {
  if (row && row.size !== size) {
    throw new ApiError(409, "size_conflict", `artifact ${row.sha256} is recorded with ${row.size} bytes; an upload of it cannot be ${size}`);
  }
}
