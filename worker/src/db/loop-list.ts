import { and, desc, eq, lt, or } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { Principal } from "../http/auth.js";
import { ApiError } from "../http/http-errors.js";
import { loops, type StoredLoopRow } from "./schema.js";

// The loops a caller may list, newest first, a page at a time, from the D1 projection: what
// `GET /v1/loops` answers and the dashboard's loops page shows.

/** What a page of loops is asked for: filters, where the last page ended (`createdAt|id`), how many. */
export interface LoopListQuery {
  status?: "running" | "halted" | "awaiting_baseline" | undefined;
  contract_hash?: string | undefined;
  cursor?: string | undefined;
  limit: number;
}

/** One page of the caller's loops and the cursor of the next, null at the end. A malformed cursor is a 400. */
export async function listLoops(database: D1Database, principal: Principal, query: LoopListQuery): Promise<{ rows: StoredLoopRow[]; next: string | null }> {
  let after: { createdAt: string; id: string } | null = null;
  if (query.cursor) {
    const [createdAt, id] = query.cursor.split("|");
    if (!createdAt || !id) throw new ApiError(400, "invalid_parameter", "cursor is malformed");
    after = { createdAt, id };
  }
  const rows = await drizzle(database)
    .select()
    .from(loops)
    .where(
      and(
        // The owner lists every loop; a team its own; a token restricted to one loop, that loop.
        principal.owner ? undefined : eq(loops.teamId, principal.team_id),
        principal.loop_id === null ? undefined : eq(loops.id, principal.loop_id),
        query.status === undefined ? undefined : eq(loops.status, query.status),
        query.contract_hash === undefined ? undefined : eq(loops.contractHash, query.contract_hash),
        after ? or(lt(loops.createdAt, after.createdAt), and(eq(loops.createdAt, after.createdAt), lt(loops.id, after.id))) : undefined,
      ),
    )
    .orderBy(desc(loops.createdAt), desc(loops.id))
    .limit(query.limit + 1);
  const page = rows.slice(0, query.limit);
  const last = page.at(-1);
  return { rows: page, next: rows.length > query.limit && last ? `${last.createdAt}|${last.id}` : null };
}
