import type { Context } from "hono";
import { sha256Hex } from "#shared/hash.js";
import { LoopId } from "#shared/wire/api.js";
import type { Scope } from "#shared/wire/auth.js";
import { callerFor, OWNER_TEAM, requireScope, type AuthEnv, type Caller } from "./auth.js";
import * as z from "zod";
import { ApiError, refusalError } from "./http-errors.js";
import type { LoopObject } from "../loop/loop-object.js";
import { readParam } from "./validate.js";

/**
 * The loop id an idempotency key names within a team: creating twice with one key reaches the same
 * LoopObject, and two teams' keys never reach each other's. (The owner's ids are derived from the key
 * alone, as every id was before teams existed, so loops created then are found again.)
 */
export function loopIdFor(idempotencyKey: string, teamId: string): string {
  const name = teamId === OWNER_TEAM ? `loopwarden/loop\n${idempotencyKey}` : `loopwarden/loop\n${teamId}\n${idempotencyKey}`;
  return `lp_${sha256Hex(name).slice(0, 24)}`;
}

/**
 * The stub of an existing loop's object. A malformed id answers 404 like an unknown one, without
 * addressing any object.
 */
export function loopStub(env: Env, loopId: string | undefined): DurableObjectStub<LoopObject> {
  if (loopId === undefined || !LoopId.safeParse(loopId).success) throw new ApiError(404, "not_found", "no such loop");
  return env.LOOPS.get(env.LOOPS.idFromName(loopId));
}

/**
 * Each loop's team, as its LoopObject answered it, in this isolate: a loop's team never changes, so a
 * loop a route has admitted once is admitted again without a round trip. Bounded: the oldest entry goes
 * first once it is full.
 */
const loopTeams = new Map<string, string>();
const LOOP_TEAMS_CACHED = 10_000;

/**
 * A loop as the caller may use it, settled before the route does anything on the caller's behalf
 * (DESIGN §11: authorization before any side effect): the scope first (403), then the token's loop
 * restriction, then the loop's team (404 for a loop of another team, or of none: no existence oracle).
 * Every route that reaches a loop opens it here; the LoopObject checks the team again on every call.
 * Answers the loop's team too: the team whose limits (its artifact quota) the loop counts toward.
 */
export async function openLoop(
  c: Context<AuthEnv>,
  loopId: string | undefined,
  scope: Scope,
): Promise<{ stub: DurableObjectStub<LoopObject>; caller: Caller; loopId: string; teamId: string }> {
  const principal = requireScope(c, scope);
  const stub = loopStub(c.env, loopId);
  const id = loopId ?? "";
  const caller = callerFor(principal, id);
  let team = loopTeams.get(id);
  if (team === undefined) {
    const answer = await stub.access(caller);
    if (!answer.ok) throw new ApiError(404, "not_found", "no such loop");
    team = answer.team_id;
    if (loopTeams.size >= LOOP_TEAMS_CACHED) loopTeams.delete(loopTeams.keys().next().value ?? "");
    loopTeams.set(id, team);
  }
  if (!caller.owner && caller.team_id !== team) throw new ApiError(404, "not_found", "no such loop");
  return { stub, caller, loopId: id, teamId: team };
}

/** The loop id inside a lease id (`<loop id>-L<fencing token>`, or `-B` for a baseline lease). */
export function loopIdOfLease(leaseId: string): string {
  const match = /^(lp_[0-9a-f]{24})-[LB]\d{1,15}$/.exec(leaseId);
  if (!match?.[1]) throw new ApiError(404, "lease_not_found", "no such lease");
  return match[1];
}

const EventsAfter = z.coerce.number().int().min(0);

/**
 * `?events_after=N` on a proposal or a report: the last event its caller has folded, for the LoopObject
 * to answer the events after it with (at most EVENTS_IN_ANSWER). Read before anything is decided, so a
 * malformed one is a 400 that changes nothing; undefined when the caller did not ask.
 */
export function eventsAfterOf(c: Context<AuthEnv>): number | undefined {
  const raw = c.req.query("events_after");
  return raw === undefined ? undefined : readParam(raw, EventsAfter, "events_after");
}

const LastEventId = z.coerce.number().int().min(0);

/** Where an event stream starts: after the reader's Last-Event-ID when it reconnects, else after `after`. */
export function streamStart(c: Context<AuthEnv>, after: number): number {
  const lastId = c.req.header("last-event-id");
  return lastId === undefined ? after : readParam(lastId, LastEventId, "Last-Event-ID");
}

/** The loop's log after `after` as Server-Sent Events, then live (loop/event-stream.ts): one stream for `watch` and the dashboard. */
export async function eventStreamResponse(stub: DurableObjectStub<LoopObject>, caller: Caller, after: number): Promise<Response> {
  const answer = await stub.eventStream({ caller, after });
  if (!answer.ok) throw refusalError(answer);
  return new Response(answer.stream, {
    headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-store", "X-Accel-Buffering": "no" },
  });
}
