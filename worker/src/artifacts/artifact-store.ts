import { and, desc, eq, lt, or } from "drizzle-orm";
import { drizzle, type DrizzleD1Database } from "drizzle-orm/d1";
import { bytesToHex } from "@noble/hashes/utils.js";
import { artifactLimits } from "./artifact-limits.js";
import { sanitizeName, recordedContentType } from "./artifact-names.js";
import { artifactStorage } from "./artifact-storage-mode.js";
import type { ArtifactStorage, ObjectBody, StoredObject, ThroughWorker } from "./artifact-storage.js";
import { inStorage, storageError } from "./artifact-upload.js";
import { artifacts, type ArtifactRow } from "../db/schema.js";
import { ApiError } from "../http/http-errors.js";
import { teamQuotaOf, type TeamQuota } from "../team-limits.js";
import {
  findArtifact,
  quotaExceeded,
  recordArtifact,
  requireRecordedSize,
  teamQuotaExceeded,
  teamUsedBytes,
  unrecorded,
  usedBytes,
  type VerifiedArtifact,
} from "./artifact-rows.js";

// Artifacts (DESIGN §10): bytes in storage (the R2 binding, or S3) under a content address, and a D1 row
// per artifact written only once the object is confirmed with its size and SHA-256. A row therefore means
// "verified", and it keeps the ETag of the object it verified: storage's object is the artifact only while
// it still has that ETag (`confirmStored`). An object without a row (a crash between the two, a presigned
// upload in S3 mode, or an object from before rows existed) is verified before it is recorded; one whose
// bytes do not hash to its key is deleted. Each loop's recorded bytes are a running total
// (`loop_artifact_usage`), grown in the same D1 batch as the row it counts, so the quota costs one row read.
// A team's loops together are held to the team's quota too (TEAM_ARTIFACT_QUOTA_BYTES, DESIGN §11): the
// sum of the running totals of the loop and of the team's loops in D1 `loops` (a loop reaches `loops`
// when its outbox drains, milliseconds after its creation; the loop being written to is always counted).

/** Storage key of a loop's artifact: content-addressed, scoped to the loop. */
export function artifactKey(loopId: string, sha256: string): string {
  return `loops/${loopId}/sha256/${sha256}`;
}

/** What the functions that read, verify and record a loop's artifacts work on. */
export interface ArtifactScope {
  storage: ArtifactStorage;
  db: DrizzleD1Database;
  loopId: string;
  /** LOOP_ARTIFACT_QUOTA_BYTES: what the loop's recorded artifacts may take. */
  quotaBytes: number;
  /** TEAM_ARTIFACT_QUOTA_BYTES and the loop's team: what all of the team's loops may take (null: the owner's loops, held to no team's). */
  team: TeamQuota | null;
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

/**
 * Records an object whose bytes were verified (`etag` is the object checked). When the quota refuses it,
 * the object (which nothing records) is deleted and the 507 thrown.
 */
export async function recordVerified(scope: ArtifactScope, artifact: VerifiedArtifact): Promise<{ row: ArtifactRow; created: boolean }> {
  const recorded = await recordArtifact(scope.db, artifact, scope.quotaBytes, scope.team);
  if (recorded) return recorded;
  const refusal = (await quotaRefusal(scope, artifact.size)) ?? quotaExceeded(scope.quotaBytes, await usedBytes(scope.db, scope.loopId), artifact.size);
  await inStorage(() => deleteIfUnchanged(scope.storage, artifactKey(scope.loopId, artifact.sha256), artifact.etag));
  throw refusal;
}

/**
 * The 507 for a new artifact (one not recorded: a recorded one is counted already) of `size` bytes that
 * would take the loop past its quota, or its team's loops past the team's: checked on the running
 * totals before a byte is stored. Recording checks both again in the same D1 batch that counts the
 * artifact (`recordArtifact`), which is what holds when uploads race.
 */
export async function quotaRefusal(scope: ArtifactScope, size: number): Promise<ApiError | null> {
  const used = await usedBytes(scope.db, scope.loopId);
  if (used + size > scope.quotaBytes) return quotaExceeded(scope.quotaBytes, used, size);
  if (!scope.team) return null;
  const teamUsed = await teamUsedBytes(scope.db, scope.loopId, scope.team.teamId);
  return teamUsed + size <= scope.team.quotaBytes ? null : teamQuotaExceeded(scope.team, teamUsed, size);
}

export async function requireQuota(scope: ArtifactScope, size: number): Promise<void> {
  const refusal = await quotaRefusal(scope, size);
  if (refusal) throw refusal;
}

/** An artifact's bytes as they come through the worker (binding mode): its digest, names and length. */
export interface IncomingArtifact {
  sha256: string;
  name: string;
  contentType: string;
  length: number;
  body: ReadableStream<Uint8Array> | null;
}

/**
 * Stores bytes sent through the worker under their digest and records them (the PUT route): refused
 * before a byte is stored when the artifact is recorded with another size or, new, would pass the loop's
 * quota; then `storeThroughWorker`. A recorded artifact sent again replaces its object with the same
 * bytes (repairing a damaged one).
 */
export async function putThroughWorker(
  scope: ArtifactScope,
  through: ThroughWorker,
  artifact: IncomingArtifact,
): Promise<{ row: ArtifactRow; created: boolean }> {
  const recorded = await findArtifact(scope.db, scope.loopId, artifact.sha256);
  requireRecordedSize(recorded, artifact.length);
  if (!recorded) await requireQuota(scope, artifact.length);
  return storeThroughWorker(scope, through, artifact);
}

/**
 * Streams an artifact's bytes into R2 and records them once stored, for a caller that has made the
 * checks (`putThroughWorker`, a request's inline evidence). R2 hashes the bytes itself and refuses any
 * that do not hash to the key, so nothing unverified is stored; recording checks the quota again, in the
 * batch that counts the artifact, which is what holds when uploads race.
 */
export async function storeThroughWorker(
  scope: ArtifactScope,
  through: ThroughWorker,
  artifact: IncomingArtifact,
): Promise<{ row: ArtifactRow; created: boolean }> {
  const { sha256, name, contentType, length } = artifact;
  const object = await inStorage(() =>
    through.put({ key: artifactKey(scope.loopId, sha256), sha256, contentType, recordedContentType: contentType, name }, artifact.body, length),
  );
  if (object?.size !== length) throw storageError(new Error(`R2 stored ${object?.size ?? "no"} bytes of ${length}`));
  return recordVerified(scope, { loopId: scope.loopId, sha256, size: length, name, contentType, etag: object.etag });
}

/** What a caller knows of an artifact it names (an intent, a report's reference), used when storage kept neither. */
export interface ArtifactHint {
  name?: string | undefined;
  content_type?: string | undefined;
}

/**
 * Reads the object at the artifact's key whole and records it if its bytes hash to the key (and, when
 * given, it is `expectedSize` long), pinning the row to the ETag of the bytes read. An object whose bytes
 * do not hash to its key is deleted: it is not the artifact it claims to be. So is one of another size
 * than the artifact's row (`recorded`) says, which cannot be its bytes either; without a row, another size
 * than the caller expects only answers null (the caller may be wrong). Its name and content type are
 * the row's, else what storage kept with it, else the caller's `hint`. Answers the row, or null when
 * there is no such verified object. Storage failures are 502 `storage_error`; a quota refusal is 507.
 */
export async function verifyObject(
  scope: ArtifactScope,
  sha256: string,
  expectedSize: number | null,
  hint: ArtifactHint,
  recorded: ArtifactRow | null,
): Promise<ArtifactRow | null> {
  const { storage, loopId } = scope;
  const key = artifactKey(loopId, sha256);
  const object = await inStorage(() => storage.get(key));
  if (!object) return null;
  const size = recorded?.size ?? expectedSize;
  if (size !== null && object.size !== size) {
    await object.body.cancel();
    if (recorded) {
      console.warn(`loopwarden: the object ${key} is ${object.size} bytes, not the ${size} recorded; deleting it`);
      await inStorage(() => deleteIfUnchanged(storage, key, object.etag));
    }
    return null;
  }
  if ((await inStorage(() => digestOf(object.body))) !== sha256) {
    console.warn(`loopwarden: the object ${key} does not hash to its key; deleting it`);
    await inStorage(() => deleteIfUnchanged(storage, key, object.etag));
    return null;
  }
  const { row } = await recordVerified(scope, {
    loopId,
    sha256,
    size: object.size,
    name: recorded?.name ?? sanitizeName(object.name ?? hint.name, sha256),
    contentType: recorded?.contentType ?? recordedContentType(object.contentType ?? hint.content_type),
    etag: object.etag,
  });
  return row;
}

/**
 * Records an object that is in storage but not in D1, once its bytes are confirmed to hash to its key
 * (`verifyObject`). This is how a completed multipart upload and S3 mode's presigned single PUT are
 * recorded: after the answer (`verifyAfterAnswer`), or by the next intent, report, proposal or download
 * that asks for it, whichever comes first (one check of this isolate at a time per object).
 */
export async function adoptObject(scope: ArtifactScope, sha256: string, expectedSize: number | null, hint: ArtifactHint = {}): Promise<ArtifactRow | null> {
  const key = artifactKey(scope.loopId, sha256);
  if (verifications.has(key)) {
    // Checked by another request of this isolate now (`complete` answered before it, issue 30): its
    // outcome is waited for, never a second read of the same bytes beside it; what it recorded is
    // confirmed by one HEAD. Not recorded (wrong bytes deleted, a refusal, a check that stalled or
    // failed): checked here, as if nobody had.
    await verificationSettled(key);
    const row = await findArtifact(scope.db, scope.loopId, sha256);
    if (row) {
      const confirmed = await confirmStored(scope, row);
      return confirmed && (expectedSize === null || confirmed.size === expectedSize) ? confirmed : null;
    }
  }
  const mine = { heardAt: Date.now() };
  verifications.set(key, mine);
  // Alive while this request's work runs: a request (or its `waitUntil`) the runtime cancels stops the
  // timer with it, and those waiting for this check then check the object themselves. A timer, not a
  // count of the bytes hashed: a stream piped through JavaScript chunk by chunk would lose the native
  // pipe from storage into the digest.
  const alive = setInterval(() => (mine.heardAt = Date.now()), VERIFICATION_ALIVE_MS);
  try {
    return await verifyObject(scope, sha256, expectedSize, hint, null);
  } finally {
    clearInterval(alive);
    if (verifications.get(key) === mine) verifications.delete(key);
  }
}

/**
 * The unrecorded objects this isolate is reading back and hashing now (by storage key), and when their
 * check was last heard to be alive. A request that needs one of them verified (a report citing it, a download, an
 * intent) waits for that check rather than reading the object a second time beside it; one in another
 * isolate (deployed, requests are not bound to one) checks it itself, which is slower but as safe.
 */
const verifications = new Map<string, { heardAt: number }>();

/** How long a verification may go unheard before a request waiting for it checks the object itself. */
const VERIFICATION_STALLED_MS = 10_000;
const VERIFICATION_ALIVE_MS = 1_000;
const VERIFICATION_POLL_MS = 25;

/**
 * Settles when this isolate's verification of `key` has ended, or stalled. Polled rather than awaited:
 * a promise of another request's I/O is that request's to settle, and the runtime may cancel a request's
 * background work (`waitUntil` has a limit once deployed) without running its `finally`.
 */
async function verificationSettled(key: string): Promise<void> {
  for (let under = verifications.get(key); under && Date.now() - under.heardAt < VERIFICATION_STALLED_MS; under = verifications.get(key)) {
    await new Promise((resolve) => setTimeout(resolve, VERIFICATION_POLL_MS));
  }
}

/**
 * Verifies an unrecorded object after the response that said so (`complete`, an intent `after_upload`:
 * issue 30, the check off the uploader's path): `adoptObject` run under `waitUntil`, so a wrong object is
 * still deleted and a right one recorded without anyone asking. Nothing depends on it finishing: until
 * the row exists the object is never listed, served or accepted as evidence, and whatever next asks for
 * it (an intent, a report or proposal citing it, a download) verifies it then, or waits for this check
 * when it is under way in the same isolate. So a crash, a cancelled `waitUntil` or a storage failure
 * here loses nothing. Without an execution context (a request handed to the app directly) it runs before
 * the answer.
 */
export async function verifyAfterAnswer(
  context: { waitUntil(promise: Promise<unknown>): void } | null,
  scope: ArtifactScope,
  sha256: string,
  size: number,
  hint: ArtifactHint = {},
): Promise<void> {
  const check = adoptObject(scope, sha256, size, hint).then(
    (row) => {
      if (!row) console.warn(`loopwarden: ${artifactKey(scope.loopId, sha256)} was not recorded: its bytes are not the artifact, or they are gone`);
    },
    (error: unknown) => console.error(`loopwarden: verifying ${artifactKey(scope.loopId, sha256)} failed; the next request that needs it verifies it`, error),
  );
  if (context) context.waitUntil(check);
  else await check;
}

/**
 * The recorded artifact, when storage still holds the object it verified: the same ETag and size, asked
 * with one HEAD (or `head`, when the caller has one). When storage's object has another ETag (it was
 * written since: changed, damaged, or the same bytes uploaded again) or the row has none (recorded before
 * ETags were kept), its bytes are read whole and checked once (`verifyObject`): right, and the row is
 * pinned to its ETag; wrong, and the object is deleted and null answered, so the artifact is uploaded
 * again. Null too when storage has no object.
 */
export async function confirmStored(scope: ArtifactScope, row: ArtifactRow, head?: StoredObject | null): Promise<ArtifactRow | null> {
  const object = head === undefined ? await inStorage(() => scope.storage.head(artifactKey(scope.loopId, row.sha256))) : head;
  if (!object) return null;
  if (row.etag !== null && object.etag === row.etag && object.size === row.size) return row;
  return verifyObject(scope, row.sha256, row.size, {}, row);
}

/** A quota refusal while verifying an unrecorded object on the way to a download: "no such artifact". */
function unlessQuota(error: unknown): null {
  if (error instanceof ApiError && error.code === "quota_exceeded") return null;
  throw error;
}

/**
 * A recorded artifact and storage's object for it, to serve (the authenticated download, a receipt's
 * files): only bytes verified. An object stored but not yet recorded (S3 mode's presigned PUT) is
 * verified first (one the quota has no room for is deleted, and so not recorded). Served only while
 * storage's object has the ETag of the bytes verified; one written since (or a row from before ETags)
 * is checked whole, once: right bytes re-pin the row and are served, wrong ones are deleted. Answers
 * the row and the object to stream, "not_recorded", or "damaged" (recorded, but storage no longer holds
 * its bytes: upload it again). Storage failures, and an object that changes while it is checked, are
 * 502 `storage_error`.
 */
export async function storedToServe(scope: ArtifactScope, sha256: string): Promise<{ row: ArtifactRow; object: ObjectBody } | "not_recorded" | "damaged"> {
  const key = artifactKey(scope.loopId, sha256);
  const row = (await findArtifact(scope.db, scope.loopId, sha256)) ?? (await adoptObject(scope, sha256, null).catch(unlessQuota));
  if (!row) return "not_recorded";
  const object = await inStorage(() => scope.storage.get(key));
  if (object && row.etag !== null && object.etag === row.etag && object.size === row.size) return { row, object };
  await object?.body.cancel();
  const confirmed = object ? await verifyObject(scope, sha256, row.size, {}, row) : null;
  if (!confirmed) return "damaged";
  const checked = await inStorage(() => scope.storage.get(key));
  if (checked && checked.etag === confirmed.etag && checked.size === confirmed.size) return { row: confirmed, object: checked };
  await checked?.body.cancel();
  throw storageError(new Error(`the object ${key} changed while it was being checked; try again`));
}

/** A recorded artifact whose verified bytes storage no longer holds (gone, or changed and not the artifact's): upload it again. */
export function damagedArtifact(sha256: string): ApiError {
  return new ApiError(
    404,
    "artifact_damaged",
    `artifact ${sha256} is recorded, but storage no longer holds bytes that hash to it: upload it again (the same intent) to repair it`,
  );
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
  quotas: { quotaBytes: number; team: TeamQuota | null },
  cited: readonly T[],
): Promise<T[]> {
  const missing = await unrecorded(db, loopId, cited);
  if (missing.length === 0) return [];
  const scope: ArtifactScope = { storage: await inStorage(storage), db, loopId, ...quotas };
  const still: T[] = [];
  const adopted = new Set<string>();
  for (const ref of missing) {
    const key = `${ref.sha256}/${ref.size}`;
    if (adopted.has(key)) continue;
    if (await adoptObject(scope, ref.sha256, ref.size, ref)) adopted.add(key);
    else still.push(ref);
  }
  return still;
}

/** `unverified` for a request's deployment: its configured storage, D1 and quotas (the loop's, and its team's). */
export function unverifiedIn<T extends { sha256: string; size: number; name?: string; content_type?: string }>(
  env: Env,
  loop: { loopId: string; teamId: string },
  cited: readonly T[],
): Promise<T[]> {
  // Most reports and proposals cite nothing stored (issue 30): no limits to read, no D1 session to open.
  if (cited.length === 0) return Promise.resolve([]);
  const quotas = { quotaBytes: artifactLimits(env).quotaBytes, team: teamQuotaOf(env, loop.teamId) };
  return unverified(() => artifactStorage(env), drizzle(env.DB), loop.loopId, quotas, cited);
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
