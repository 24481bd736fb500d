import { index, integer, primaryKey, real, sqliteTable, text } from "drizzle-orm/sqlite-core";

// The D1 projection: a queryable copy of what the LoopObjects decided, written only by their alarms
// from the outbox. It is never read to make a decision. Every row carries `updated_seq`, the event
// sequence it reflects, so a re-delivered older row can never overwrite a newer one.

/** One row per loop. */
export const loops = sqliteTable(
  "loops",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    mode: text("mode").notNull(),
    status: text("status").notNull(),
    contractHash: text("contract_hash").notNull(),
    iteration: integer("iteration").notNull(),
    bestCandidateId: text("best_candidate_id").notNull(),
    bestCommit: text("best_commit").notNull(),
    haltReason: text("halt_reason"),
    exitClass: integer("exit_class"),
    headSeq: integer("head_seq").notNull(),
    headHash: text("head_hash").notNull(),
    createdAt: text("created_at").notNull(),
    updatedAt: text("updated_at").notNull(),
    updatedSeq: integer("updated_seq").notNull(),
    /** The team that owns the loop (DESIGN §11); loops from before teams belong to the instance owner's. */
    teamId: text("team_id").notNull().default("owner"),
    /** What t0 scored: its failing count, or in optimize mode its metric's median (null when not measured): what the dashboard lists the best against. */
    t0Score: real("t0_score"),
    /** What the best-so-far scored, the same way. */
    bestScore: real("best_score"),
    /** How many runners hold a lease on one of its candidates now. */
    runners: integer("runners").notNull().default(0),
  },
  (table) => [index("loops_created_at").on(table.createdAt, table.id), index("loops_by_team").on(table.teamId, table.createdAt, table.id)],
);

/** One row per candidate. */
export const candidates = sqliteTable(
  "candidates",
  {
    loopId: text("loop_id").notNull(),
    id: text("id").notNull(),
    parent: text("parent").notNull(),
    commit: text("commit_sha").notNull(),
    status: text("status").notNull(),
    reason: text("reason"),
    detail: text("detail"),
    logDigests: text("log_digests").notNull(),
    proposedAt: text("proposed_at").notNull(),
    updatedSeq: integer("updated_seq").notNull(),
  },
  (table) => [primaryKey({ columns: [table.loopId, table.id] })],
);

/** An index of every event: type, time and hash, for queries across loops (the log itself lives in the LoopObject). */
export const eventsIndex = sqliteTable(
  "events_index",
  {
    loopId: text("loop_id").notNull(),
    seq: integer("seq").notNull(),
    type: text("type").notNull(),
    at: text("at").notNull(),
    hash: text("hash").notNull(),
    candidateId: text("candidate_id"),
  },
  (table) => [primaryKey({ columns: [table.loopId, table.seq] }), index("events_by_type").on(table.type, table.at)],
);

/**
 * Signed receipts (DESIGN §9) by their unguessable id: the envelope exactly as `/r/<id>.json` serves it.
 * Not a projection of a decision but the receipt's home; the loop's log records each one
 * (`receipt_issued`, with the envelope's digest), and it reaches D1 through the same outbox.
 */
export const receipts = sqliteTable(
  "receipts",
  {
    id: text("id").primaryKey(),
    loopId: text("loop_id").notNull(),
    kind: text("kind").notNull(),
    headSeq: integer("head_seq").notNull(),
    headHash: text("head_hash").notNull(),
    keyid: text("keyid").notNull(),
    envelope: text("envelope").notNull(),
    issuedAt: text("issued_at").notNull(),
  },
  (table) => [index("receipts_by_loop").on(table.loopId, table.issuedAt)],
);

/**
 * Teams (DESIGN §11). Unlike the projection tables, these are the source of truth: tenancy is not a
 * loop's decision, so it lives here and not in any LoopObject's log.
 */
export const teams = sqliteTable("teams", {
  id: text("id").primaryKey(),
  name: text("name").notNull().unique(),
  createdAt: text("created_at").notNull(),
});

/**
 * API tokens (DESIGN §11): only the SHA-256 of the secret is stored. `scopes` is a comma-separated
 * list; `loopId` restricts the token to one loop; expiry and revocation are times (ISO 8601).
 */
export const tokens = sqliteTable(
  "tokens",
  {
    id: text("id").primaryKey(),
    teamId: text("team_id").notNull(),
    secretHash: text("secret_hash").notNull(),
    scopes: text("scopes").notNull(),
    loopId: text("loop_id"),
    name: text("name"),
    createdAt: text("created_at").notNull(),
    createdBy: text("created_by").notNull(),
    expiresAt: text("expires_at"),
    revokedAt: text("revoked_at"),
    /** The runner labels a token may claim, as JSON (`{"gpu":"h100"}`); null: any (DESIGN §11). */
    labels: text("labels"),
  },
  (table) => [index("tokens_by_team").on(table.teamId, table.createdAt)],
);

/**
 * Artifacts a loop stored (DESIGN §10), keyed like their R2 objects (`loops/<loop>/sha256/<hex>`). Like
 * teams and tokens, the source of truth and not a projection: a row is written only once the object is
 * confirmed in R2 with its size and SHA-256, so a row means "verified". `name` and `content_type` are
 * sanitised on the way in and describe the file for listings and downloads; neither decides how it is served.
 * `etag` is storage's ETag of the object whose bytes were verified: storage's object is taken as the
 * artifact (answered `exists`, served) only while it still has that ETag. Null on rows recorded before
 * ETags were kept: the first time such a row's object is needed, its bytes are verified again and the ETag pinned.
 */
export const artifacts = sqliteTable(
  "artifacts",
  {
    loopId: text("loop_id").notNull(),
    sha256: text("sha256").notNull(),
    size: integer("size").notNull(),
    name: text("name").notNull(),
    contentType: text("content_type").notNull(),
    createdAt: text("created_at").notNull(),
    etag: text("etag"),
  },
  (table) => [primaryKey({ columns: [table.loopId, table.sha256] }), index("artifacts_by_loop").on(table.loopId, table.createdAt, table.sha256)],
);

/**
 * The bytes each loop's recorded artifacts take: a running total, what the quota (LOOP_ARTIFACT_QUOTA_BYTES)
 * is checked against in one row read, whatever the loop's history. It grows in the same D1 batch as the
 * artifact row it counts, and only when that row was created (`recordArtifact`).
 */
export const loopArtifactUsage = sqliteTable("loop_artifact_usage", {
  loopId: text("loop_id").primaryKey(),
  bytes: integer("bytes").notNull(),
});

/**
 * The dashboard's sessions and one-time login links (DESIGN §11), by the SHA-256 of their secret: the
 * secret itself is only ever in the browser's cookie or the link. A session is the token that opened it,
 * seen through a cookie: it ends when that token is revoked or expires, and (the owner's) when the
 * owner token changes (`ownerDigest`). A login link (`kind` `link`) is used once (`usedAt`).
 */
export const webSessions = sqliteTable(
  "web_sessions",
  {
    id: text("id").primaryKey(),
    kind: text("kind", { enum: ["session", "link"] }).notNull(),
    teamId: text("team_id").notNull(),
    /** The token that opened it; null for the instance owner's, which has no row. */
    tokenId: text("token_id"),
    /** The owner's: a digest of the owner token it was opened with. */
    ownerDigest: text("owner_digest"),
    /** The session's CSRF token, sent back in every form it posts. */
    csrf: text("csrf").notNull(),
    createdAt: text("created_at").notNull(),
    expiresAt: text("expires_at").notNull(),
    usedAt: text("used_at"),
  },
  (table) => [index("web_sessions_by_token").on(table.tokenId), index("web_sessions_by_expiry").on(table.expiresAt)],
);

export type LoopRow = typeof loops.$inferInsert;
/** A loop's row as D1 answers it. */
export type StoredLoopRow = typeof loops.$inferSelect;
export type CandidateRow = typeof candidates.$inferInsert;
export type EventIndexRow = typeof eventsIndex.$inferInsert;
export type ReceiptRow = typeof receipts.$inferInsert;
export type TeamRow = typeof teams.$inferSelect;
export type TokenRow = typeof tokens.$inferSelect;
export type ArtifactRow = typeof artifacts.$inferSelect;
export type WebSessionRow = typeof webSessions.$inferSelect;
