import { count as countRows, eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { OWNER_TEAM } from "#shared/wire/auth.js";
import { parseByteSize } from "./artifacts/artifact-limits.js";
import { loops } from "./db/schema.js";
import type { LoopState } from "#shared/engine/index.js";
import type { Refusal } from "./loop/refusal.js";

// Limits that hold per team (DESIGN §11), wrangler.toml [vars] with these defaults: the loops a team may
// create, the candidates and interim receipts one loop may hold, and the bytes all of a team's loops'
// recorded artifacts may take. A refusal changes nothing and is a 507 (`limit_reached` for a count,
// `quota_exceeded` for bytes): a limit no retry helps with, which the runner reports as it is (it waits
// out a 429). The instance owner's own loops (team `owner`) are held to no team's count or quota: the
// owner is the operator, and locally every loop the runner makes with the owner token is one. The
// per-loop limits hold for every loop.

const GiB = 1024 * 1024 * 1024;

/** TEAM_MAX_LOOPS unless configured: every loop a team ever created counts (loops are never deleted). */
export const DEFAULT_TEAM_MAX_LOOPS = 10_000;
/** LOOP_MAX_CANDIDATES unless configured: twice the 5,000 candidates the receipt page is tested with. */
export const DEFAULT_LOOP_MAX_CANDIDATES = 10_000;
/** LOOP_MAX_INTERIM_RECEIPTS unless configured. */
export const DEFAULT_LOOP_MAX_INTERIM_RECEIPTS = 1_000;
/** TEAM_ARTIFACT_QUOTA_BYTES unless configured: 1 TiB, 50 loops at the default per-loop quota. */
export const DEFAULT_TEAM_ARTIFACT_QUOTA_BYTES = 1024 * GiB;

/** This deployment's per-team and per-loop limits. */
export interface TeamLimits {
  maxLoops: number;
  maxCandidates: number;
  maxInterimReceipts: number;
  artifactQuotaBytes: number;
}

type LimitVars = Partial<Record<"TEAM_MAX_LOOPS" | "LOOP_MAX_CANDIDATES" | "LOOP_MAX_INTERIM_RECEIPTS" | "TEAM_ARTIFACT_QUOTA_BYTES", string>>;

function count(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  // A limit that cannot be read is a broken deployment: refuse loudly rather than run without it.
  if (!/^\s*\d{1,15}\s*$/.test(value)) throw new Error(`loopwarden: ${name} = ${JSON.stringify(value)} is not a count (write 10000)`);
  return Number(value);
}

/** The limits wrangler.toml's [vars] set, else the defaults. */
export function teamLimits(env: LimitVars): TeamLimits {
  const quota = env.TEAM_ARTIFACT_QUOTA_BYTES === undefined ? DEFAULT_TEAM_ARTIFACT_QUOTA_BYTES : parseByteSize(env.TEAM_ARTIFACT_QUOTA_BYTES);
  if (quota === null)
    throw new Error(`loopwarden: TEAM_ARTIFACT_QUOTA_BYTES = ${JSON.stringify(env.TEAM_ARTIFACT_QUOTA_BYTES)} is not a byte size (write 1TiB)`);
  return {
    maxLoops: count("TEAM_MAX_LOOPS", env.TEAM_MAX_LOOPS, DEFAULT_TEAM_MAX_LOOPS),
    maxCandidates: count("LOOP_MAX_CANDIDATES", env.LOOP_MAX_CANDIDATES, DEFAULT_LOOP_MAX_CANDIDATES),
    maxInterimReceipts: count("LOOP_MAX_INTERIM_RECEIPTS", env.LOOP_MAX_INTERIM_RECEIPTS, DEFAULT_LOOP_MAX_INTERIM_RECEIPTS),
    artifactQuotaBytes: quota,
  };
}

/** Whether a team is held to the per-team limits: every team but the instance owner's own. */
export function heldToTeamLimits(teamId: string): boolean {
  return teamId !== OWNER_TEAM;
}

/** A team's artifact quota, as the artifact functions check it (null: the owner's loops, held to none). */
export interface TeamQuota {
  teamId: string;
  quotaBytes: number;
}

/** The artifact quota a loop of `teamId` is held to, besides its own. */
export function teamQuotaOf(env: LimitVars, teamId: string): TeamQuota | null {
  return heldToTeamLimits(teamId) ? { teamId, quotaBytes: teamLimits(env).artifactQuotaBytes } : null;
}

/**
 * Why a team may create no new loop (it has all TEAM_MAX_LOOPS allows), or null when it may. Counted
 * in D1 `loops`, which a loop reaches when its outbox drains, milliseconds after its creation: creations
 * sent at the same moment may pass the limit by the few still draining. The LoopObject refuses with it
 * only a loop that does not exist yet, so a retried creation is answered as ever.
 */
export async function newLoopRefusal(env: Env, teamId: string): Promise<string | null> {
  if (!heldToTeamLimits(teamId)) return null;
  const { maxLoops } = teamLimits(env);
  const row = await drizzle(env.DB).select({ n: countRows() }).from(loops).where(eq(loops.teamId, teamId)).get();
  const held = row?.n ?? 0;
  if (held < maxLoops) return null;
  return `team ${teamId} has ${held} loops, the most TEAM_MAX_LOOPS (${maxLoops}) allows: loops are never deleted, so the coordinator's operator raises it (nothing was created)`;
}

/** The message of a loop's candidate limit (the LoopObject answers it as a refusal). */
export function candidateLimitMessage(max: number): string {
  return `this loop holds ${max} candidates, the most LOOP_MAX_CANDIDATES allows: start a new loop from its best (nothing was recorded)`;
}

/**
 * The refusal of a new candidate once the loop holds `max` (LOOP_MAX_CANDIDATES as the route read it, so
 * a request's configuration is the one that holds); a replay of a candidate it holds is no new one.
 */
export function candidateLimitRefusal(state: LoopState, idempotencyKey: string, max: number): Refusal | null {
  if (state.idempotency[idempotencyKey] !== undefined || state.candidate_order.length < max) return null;
  return { ok: false, code: "limit_reached", message: candidateLimitMessage(max) };
}

/** The message of a loop's interim receipt limit. */
export function interimReceiptLimitMessage(max: number): string {
  return `this loop has issued ${max} interim receipts, the most LOOP_MAX_INTERIM_RECEIPTS allows (nothing was issued)`;
}
