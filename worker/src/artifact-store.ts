import { and, desc, eq, inArray, lt, ne, or, sql } from "drizzle-orm";
import type { DrizzleD1Database } from "drizzle-orm/d1";
import { bytesToHex } from "@noble/hashes/utils.js";
import type { ArtifactView } from "../../shared/wire/api.js";
import { sanitizeName, recordedContentType } from "./artifact-names.js";
import type { ArtifactStorage } from "./artifact-storage.js";
import { inStorage } from "./artifact-upload.js";
import { artifacts, type ArtifactRow } from "./db/schema.js";

// Artifacts (DESIGN §10): bytes in storage (the R2 binding, or S3) under a content address, and a D1 row
// per artifact written only once the object is confirmed with its size and SHA-256. A row therefore means
// "verified"; an object without one (a crash between the two, a presigned upload in S3 mode, or an object
// from before rows existed) is verified before it is recorded, and one whose bytes do not hash to its key
// is deleted.

/** Storage key of a loop's artifact: content-addressed, scoped to the loop. */
export function artifactKey(loopId: string, sha256: string): string {
  return `loops/${loopId}/sha256/${sha256}`;
}

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

/**
 * Records a verified artifact. Recording one already recorded keeps the first row (its name and time):
 * the bytes are the same by construction. Answers the row and whether this call created it.
 */
export async function recordArtifact(db: DrizzleD1Database, artifact: Omit<ArtifactRow, "createdAt">): Promise<{ row: ArtifactRow; created: boolean }> {
  const [inserted] = await db
    .insert(artifacts)
    .values({ ...artifact, createdAt: new Date().toISOString() })
    .onConflictDoNothing()
    .returning();
  if (inserted) return { row: inserted, created: true };
  const existing = await findArtifact(db, artifact.loopId, artifact.sha256);
  if (!existing) throw new Error(`the artifact row ${artifact.loopId}/${artifact.sha256} conflicted but is not there`);
  return { row: existing, created: false };
}

/** The bytes a loop's recorded artifacts take, but for the one with `sha256` (which an upload of it replaces). */
export async function recordedBytes(db: DrizzleD1Database, loopId: string, sha256: string): Promise<number> {
  const [total] = await db
    .select({ bytes: sql<number>`coalesce(sum(${artifacts.size}), 0)` })
    .from(artifacts)
    .where(and(eq(artifacts.loopId, loopId), ne(artifacts.sha256, sha256)));
  return Number(total?.bytes ?? 0);
}

/** A page of a loop's recorded artifacts, newest first, after a `created_at|sha256` cursor. */
export async function listArtifacts(
  db: DrizzleD1Database,
  loopId: string,
  limit: number,
  after: { createdAt: string; sha256: string } | null,
): Promise<{ rows: ArtifactRow[]; nextCursor: string | null }> {
  const rows = await db
    .select()
    .from(artifacts)
    .where(
      and(
        eq(artifacts.loopId, loopId),
        after ? or(lt(artifacts.createdAt, after.createdAt), and(eq(artifacts.createdAt, after.createdAt), lt(artifacts.sha256, after.sha256))) : undefined,
      ),
    )
    .orderBy(desc(artifacts.createdAt), desc(artifacts.sha256))
    .limit(limit + 1);
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return { rows: page, nextCursor: rows.length > limit && last ? `${last.createdAt}|${last.sha256}` : null };
}

/** The SHA-256 (hex) of a stream, computed as it flows: a large object is never held in memory. */
export async function digestOf(stream: ReadableStream): Promise<string> {
  const digest = new crypto.DigestStream("SHA-256");
  await stream.pipeTo(digest);
  return bytesToHex(new Uint8Array(await digest.digest));
}

/**
 * Deletes the object at `key` if it is still the one that was checked (same ETag): a refusal never
 * removes an object another upload has put there since.
 */
export async function deleteIfUnchanged(storage: ArtifactStorage, key: string, etag: string): Promise<void> {
  const head = await storage.head(key);
  if (head?.etag === etag) await storage.delete(key);
}

/** What a caller knows of an artifact it names (an intent, a report's reference), used when storage kept neither. */
export interface ArtifactHint {
  name?: string | undefined;
  content_type?: string | undefined;
}

/**
 * Records an object that is in storage but not in D1, once its bytes are confirmed to hash to its key
 * (and, when given, to be `expectedSize` long). An object whose bytes do not match its key is deleted: it
 * is not the artifact it claims to be. Its name and content type are what storage kept with it, else the
 * caller's `hint`. Answers the row, or null when there is no such verified object.
 *
 * This is how S3 mode records a presigned single PUT, after which the runner never comes back: the next
 * intent, report, proposal or download that asks for it adopts it.
 */
export async function adoptObject(
  storage: ArtifactStorage,
  db: DrizzleD1Database,
  loopId: string,
  sha256: string,
  expectedSize: number | null,
  hint: ArtifactHint = {},
): Promise<ArtifactRow | null> {
  const key = artifactKey(loopId, sha256);
  const object = await storage.get(key);
  if (!object) return null;
  if (expectedSize !== null && object.size !== expectedSize) {
    await object.body.cancel();
    return null;
  }
  if ((await digestOf(object.body)) !== sha256) {
    console.warn(`loopwarden: the object ${key} does not hash to its key; deleting it`);
    await deleteIfUnchanged(storage, key, object.etag);
    return null;
  }
  const { row } = await recordArtifact(db, {
    loopId,
    sha256,
    size: object.size,
    name: sanitizeName(object.name ?? hint.name, sha256),
    contentType: recordedContentType(object.contentType ?? hint.content_type),
  });
  return row;
}

/**
 * Of the artifacts an observation or proposal cites, those neither recorded with that size nor in
 * storage with it (and then verified and recorded now, as `adoptObject` does): the evidence a decision
 * may rest on is only what the coordinator checked. One D1 query per 90 digests; storage is asked only
 * about what D1 does not have (in binding mode, nothing but what a crash left unrecorded). What storage
 * failed at is 502 `storage_error`.
 */
export async function unverified<T extends { sha256: string; size: number; name?: string; content_type?: string }>(
  storage: () => Promise<ArtifactStorage>,
  db: DrizzleD1Database,
  loopId: string,
  cited: readonly T[],
): Promise<T[]> {
  const missing = await unrecorded(db, loopId, cited);
  if (missing.length === 0) return [];
  const store = await inStorage(storage);
  const still: T[] = [];
  const adopted = new Set<string>();
  for (const ref of missing) {
    const key = `${ref.sha256}/${ref.size}`;
    if (adopted.has(key)) continue;
    if (await inStorage(() => adoptObject(store, db, loopId, ref.sha256, ref.size, ref))) adopted.add(key);
    else still.push(ref);
  }
  return still;
}
