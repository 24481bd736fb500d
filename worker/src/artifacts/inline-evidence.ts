import { bytesToHex } from "@noble/hashes/utils.js";
import { drizzle } from "drizzle-orm/d1";
import { INLINE_EVIDENCE_MAX_BYTES, INLINE_EVIDENCE_TOTAL_BYTES, type InlineEvidence } from "#shared/wire/api.js";
import type { ArtifactRef } from "#shared/wire/observation.js";
import { artifactLimits } from "./artifact-limits.js";
import { recordedContentType, sanitizeName } from "./artifact-names.js";
import { artifactStorage, s3Settings } from "./artifact-storage-mode.js";
import { confirmStored, storeThroughWorker, type ArtifactScope } from "./artifact-store.js";
import { findArtifact, quotaExceeded, requireRecordedSize, teamQuotaExceeded, teamUsedBytes, usedBytes } from "./artifact-rows.js";
import type { ArtifactRow } from "../db/schema.js";
import { ApiError } from "../http/http-errors.js";
import { teamQuotaOf } from "../team-limits.js";

// Inline evidence (DESIGN §10): the small files a report's observation cites — a gate's log is
// typically a few KiB — or a proposal's bundle, sent with the request, so it costs one request where an
// upload and the request took two. The coordinator checks each file's bytes against the digest and the
// size the request gives, and stores and records it exactly as an upload through the worker would,
// before the request is decided: a decision still rests only on evidence the coordinator has checked.

/** A file the request cites, as the routes list them (`what` names it in errors). */
export type CitedFile = ArtifactRef & { what: string };

function decodeBase64(text: string, sha256: string): Uint8Array {
  try {
    return Uint8Array.from(atob(text), (char) => char.charCodeAt(0));
  } catch {
    throw new ApiError(400, "invalid_evidence", `the bytes of evidence ${sha256} are not valid base64`);
  }
}

/**
 * Checks every file of a request's `evidence`, then stores each (binding mode; in S3 mode runners upload
 * to storage first, and a request with evidence is refused with 409 `upload_to_storage`). Every refusal
 * that depends only on the request — a file it does not cite, sent twice, bytes that are not its digest's
 * or its size's, over the limits, recorded with another size, past the loop's or its team's quota — comes before
 * anything is stored, so such a request stores nothing. A file recorded already whose bytes storage
 * still holds is not stored again (a retried or duplicated request writes nothing).
 */
export async function storeInlineEvidence(
  env: Env,
  loop: { loopId: string; teamId: string },
  evidence: readonly InlineEvidence[],
  cited: readonly CitedFile[],
): Promise<void> {
  const { loopId } = loop;
  // S3 mode is refused before its storage is set up: the worker holds no bytes there.
  const storage = s3Settings(env) ? null : await artifactStorage(env);
  const through = storage?.through;
  if (!storage || !through) {
    throw new ApiError(
      409,
      "upload_to_storage",
      "this coordinator keeps artifacts in S3: upload the files a request cites to storage first (POST /v1/loops/:id/artifacts), then send it without evidence",
    );
  }
  const { maxBytes, quotaBytes } = artifactLimits(env);
  const byDigest = new Map(cited.map((ref) => [ref.sha256, ref]));
  const files: { ref: CitedFile; bytes: Uint8Array }[] = [];
  let total = 0;
  for (const item of evidence) {
    const ref = byDigest.get(item.sha256);
    if (!ref) throw new ApiError(422, "invalid_evidence", `evidence ${item.sha256} is not a file the request cites`);
    if (files.some((file) => file.ref.sha256 === item.sha256)) throw new ApiError(422, "invalid_evidence", `evidence ${item.sha256} is sent twice`);
    const bytes = decodeBase64(item.base64, item.sha256);
    if (bytes.byteLength !== ref.size) {
      throw new ApiError(400, "size_mismatch", `${ref.what} is ${ref.size} bytes in the request; its evidence is ${bytes.byteLength}`);
    }
    const limit = Math.min(INLINE_EVIDENCE_MAX_BYTES, maxBytes);
    if (bytes.byteLength > limit)
      throw new ApiError(413, "artifact_too_large", `${ref.what} is ${bytes.byteLength} bytes; evidence sent inline is limited to ${limit}`);
    total += bytes.byteLength;
    if (total > INLINE_EVIDENCE_TOTAL_BYTES) {
      throw new ApiError(413, "evidence_too_large", `a request carries at most ${INLINE_EVIDENCE_TOTAL_BYTES} bytes of evidence inline; upload the rest first`);
    }
    const digest = bytesToHex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
    if (digest !== item.sha256) throw new ApiError(400, "digest_mismatch", `the evidence sent for ${ref.what} hashes to ${digest}, not ${item.sha256}`);
    files.push({ ref, bytes });
  }
  const scope: ArtifactScope = { storage, db: drizzle(env.DB), loopId, quotaBytes, team: teamQuotaOf(env, loop.teamId) };
  const [rows, used, teamUsed] = await Promise.all([
    Promise.all(files.map(({ ref }) => findArtifact(scope.db, loopId, ref.sha256))),
    usedBytes(scope.db, loopId),
    scope.team ? teamUsedBytes(scope.db, loopId, scope.team.teamId) : 0,
  ]);
  refuseUnrecordable(files, rows, scope, { used, teamUsed });
  for (const [index, { ref, bytes }] of files.entries()) {
    // Recorded, and storage still holds the bytes verified (a retried or duplicated request): nothing to
    // store, as an upload's intent would answer `exists`. A damaged object is checked, deleted and, below,
    // stored again from these bytes.
    const row = rows[index];
    if (row && (await confirmStored(scope, row))) continue;
    await storeThroughWorker(scope, through, {
      sha256: ref.sha256,
      name: sanitizeName(ref.name, ref.sha256),
      contentType: recordedContentType(ref.content_type),
      length: bytes.byteLength,
      body: new Blob([bytes]).stream(),
    });
  }
}

/**
 * Refuses the files when one is recorded with another size (`requireRecordedSize`, as an upload is
 * refused), or when the new ones together would take the loop past its quota, or its team's loops past theirs.
 */
function refuseUnrecordable(
  files: readonly { ref: CitedFile }[],
  rows: readonly (ArtifactRow | null)[],
  scope: Pick<ArtifactScope, "quotaBytes" | "team">,
  usage: { used: number; teamUsed: number },
): void {
  let added = 0;
  for (const [index, { ref }] of files.entries()) {
    const row = rows[index] ?? null;
    requireRecordedSize(row, ref.size);
    if (!row) added += ref.size;
  }
  if (usage.used + added > scope.quotaBytes) throw quotaExceeded(scope.quotaBytes, usage.used, added);
  if (scope.team && usage.teamUsed + added > scope.team.quotaBytes) throw teamQuotaExceeded(scope.team, usage.teamUsed, added);
}
