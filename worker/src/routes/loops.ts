import { Hono } from "hono";
import * as z from "zod";
import { canonicalJson } from "#shared/canonical-json.js";
import { sha256Hex } from "#shared/hash.js";
import {
  CreateLoopRequest,
  LeaseRequest,
  ProposeCandidateRequest,
  bundleArtifact,
  type CreateLoopResponse,
  type LoopList,
  type ProposeCandidateResponse,
  type ReceiptIssued,
  CancelRequest,
  ConfirmRequest,
  IssueReceiptRequest,
  type CancelResponse,
  MAX_WAIT_MS,
  type ConfirmResponse,
  RecheckRequest,
  type RecheckResponse,
  ContextUnsatisfiableRequest,
  type ContextUnsatisfiableResponse,
  type ReviewResponse,
} from "#shared/wire/api.js";
import { ReviewDecisionRequest } from "#shared/wire/review.js";
import { unverifiedIn } from "../artifacts/artifact-store.js";
import { storeInlineEvidence } from "../artifacts/inline-evidence.js";
import { ApiError, refusalError } from "../http/http-errors.js";
import { requireClaimable, requireScope, type AuthEnv } from "../http/auth.js";
import { leaseTtlMs } from "../loop/lease-ttl.js";
import { eventsAfterOf, eventStreamResponse, loopIdFor, loopStub, openLoop, streamStart } from "../http/loop-access.js";
import { listLoops } from "../db/loop-list.js";
import { readJson, readParam } from "../http/validate.js";
import { newLoopRefusal, teamLimits } from "../team-limits.js";
import { Sha256 } from "#shared/wire/observation.js";
import { requireStoredEvidence } from "./leases.js";

/** Loop routes of DESIGN §8, mounted at `/v1/loops`. */
export const loopRoutes = new Hono<AuthEnv>();

loopRoutes.post("/", async (c) => {
  const principal = requireScope(c, "propose");
  if (principal.loop_id !== null) throw new ApiError(403, "forbidden", `this token is restricted to loop ${principal.loop_id} and cannot create loops`);
  const body = await readJson(c, CreateLoopRequest);
  // A retry of a creation awaiting its baseline may wait for the loop (a long-poll, at most 25 s).
  const waitMs = readParam(c.req.query("wait_ms") ?? "0", WaitMs, "wait_ms");
  const loopId = loopIdFor(body.idempotency_key, principal.team_id);
  const stub = loopStub(c.env, loopId);
  // A team with all the loops TEAM_MAX_LOOPS allows creates no more; a retried creation is answered as ever.
  const refuseNew = await newLoopRefusal(c.env, principal.team_id);
  const answer = await stub.create({
    team_id: principal.team_id,
    loop_id: loopId,
    request_hash: sha256Hex(canonicalJson(body)),
    contract: body.contract,
    contract_hash: sha256Hex(canonicalJson(body.contract)),
    t0: body.t0,
    t0_commit: body.t0_commit,
    repository: body.repository,
    doctor: body.doctor,
    wait_ms: waitMs,
    ...(refuseNew === null ? {} : { refuse_new: refuseNew }),
  });
  if (!answer.ok) throw refusalError(answer);
  // 202 while the loop awaits its baseline: accepted, and created from the report of the runner that measures it.
  if ("awaiting_baseline" in answer) {
    const response: CreateLoopResponse = { awaiting_baseline: answer.awaiting_baseline, created: answer.created };
    return c.json(response, 202);
  }
  const response: CreateLoopResponse = { loop: answer.loop, created: answer.created };
  return c.json(response, answer.created ? 201 : 200);
});

const WaitMs = z.coerce.number().int().min(0).max(MAX_WAIT_MS);

const ListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(50),
  cursor: z.string().max(200).optional(),
  /** `awaiting_baseline`: loops created with `t0_commit` whose baseline no runner has reported yet. */
  status: z.enum(["running", "halted", "awaiting_baseline"]).optional(),
  /** Only loops pinned to this contract: what a `work` runner in a checkout of it may evaluate. */
  contract_hash: Sha256.optional(),
});

loopRoutes.get("/", async (c) => {
  const principal = requireScope(c, "read");
  const query = readParam(c.req.query(), ListQuery, "query");
  const { rows: page, next } = await listLoops(c.env.DB, principal, query);
  const response: LoopList = {
    loops: page.map((row) => ({
      loop_id: row.id,
      name: row.name,
      mode: row.mode,
      status: row.status,
      iteration: row.iteration,
      halt_reason: row.haltReason,
      contract_hash: row.contractHash,
      created_at: row.createdAt,
      updated_at: row.updatedAt,
    })),
    next_cursor: next,
  };
  return c.json(response);
});

loopRoutes.get("/:id", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "read");
  const answer = await stub.get(caller);
  if (!answer.ok) throw refusalError(answer);
  return c.json(answer.loop);
});

loopRoutes.post("/:id/candidates", async (c) => {
  const { stub, caller, loopId, teamId } = await openLoop(c, c.req.param("id"), "propose");
  const eventsAfter = eventsAfterOf(c);
  const { lease, evidence, ...body } = await readJson(c, ProposeCandidateRequest);
  const maxCandidates = teamLimits(c.env).maxCandidates;
  if (lease) requireClaimable(requireScope(c, "evaluate"), lease.labels);
  // A bundle the proposal names must be recorded already, with its size (checked outside the LoopObject,
  // as a report's logs are, so storage latency never sits inside a decision), or be in storage and
  // verified now — or come with the proposal (`evidence`, when small), checked and stored first.
  if (evidence) {
    if (!body.bundle) throw new ApiError(422, "invalid_evidence", "a proposal carries inline only the bytes of the bundle it names");
    // A proposal the loop's candidate limit refuses stores nothing: asked before the bytes are written.
    const allowed = await stub.mayPropose({ caller, idempotency_key: body.idempotency_key, max_candidates: maxCandidates });
    if (!allowed.ok) throw refusalError(allowed);
    await storeInlineEvidence(c.env, { loopId, teamId }, evidence, [{ what: "the candidate's bundle", ...body.bundle, ...bundleArtifact(body.commit) }]);
  } else if (body.bundle && (await unverifiedIn(c.env, { loopId, teamId }, [body.bundle])).length > 0) {
    throw new ApiError(422, "artifact_missing", `the candidate's bundle (${body.bundle.sha256}) is not stored; upload it first`);
  }
  const answer = await stub.propose({
    caller,
    proposal: body,
    request_hash: sha256Hex(canonicalJson(body)),
    ...(lease ? { lease } : {}),
    ...(eventsAfter === undefined ? {} : { events_after: eventsAfter }),
    max_candidates: maxCandidates,
  });
  if (!answer.ok) throw refusalError(answer);
  const response: ProposeCandidateResponse = {
    candidate: answer.candidate,
    replayed: answer.replayed,
    loop: answer.loop,
    ...(lease ? { lease: answer.lease ?? null } : {}),
    ...(answer.events ? { events: answer.events } : {}),
  };
  return c.json(response, answer.replayed ? 200 : 201);
});

loopRoutes.post("/:id/leases", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "evaluate");
  const body = await readJson(c, LeaseRequest);
  requireClaimable(c.get("principal"), body.labels);
  const answer = await stub.lease({ caller, ...body });
  if (!answer.ok) throw refusalError(answer);
  if (!answer.lease) return c.body(null, 204, { "Retry-After": "1" });
  return c.json(answer.lease);
});

/** A reconnecting reader's last event id: the `seq` of the last event it has. */
const EventsQuery = z.object({
  after: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(1_000).default(1_000),
  /** A long-poll: with no event after `after`, wait up to this long (at most 25 s) for one. */
  wait_ms: z.coerce.number().int().min(0).max(MAX_WAIT_MS).default(0),
});

loopRoutes.get("/:id/events", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "read");
  const query = readParam(c.req.query(), EventsQuery, "query");
  // Server-Sent Events: the log after Last-Event-ID (a reconnect) or `after`, then live, on one connection.
  if (c.req.header("accept")?.includes("text/event-stream")) {
    const after = streamStart(c, query.after);
    return eventStreamResponse(stub, caller, after);
  }
  const answer = await stub.events({ caller, ...query });
  if (!answer.ok) throw refusalError(answer);
  const body = answer.events.map((line) => `${line}\n`).join("");
  // Whether events follow this page: pages end at a row count or a byte budget, so a short page is no end.
  return c.body(body, 200, { "Content-Type": "application/x-ndjson; charset=utf-8", "Loopwarden-More": String(answer.more) });
});

loopRoutes.post("/:id/receipts", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "propose");
  await readJson(c, IssueReceiptRequest, { empty: {} });
  const answer = await stub.issueReceipt({ caller, kind: "interim", max_interim: teamLimits(c.env).maxInterimReceipts });
  if (!answer.ok) throw refusalError(answer);
  const response: ReceiptIssued = { receipt_id: answer.receipt_id, url: `${new URL(c.req.url).origin}/r/${answer.receipt_id}`, head: answer.head };
  return c.json(response, 201);
});

// A person stops the loop: `cancelled`, recorded and signed like any halt (DESIGN §7, exit class 11).
loopRoutes.post("/:id/cancel", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "propose");
  const body = await readJson(c, CancelRequest, { empty: {} });
  const answer = await stub.cancel({ caller, reason: body.reason });
  if (!answer.ok) throw refusalError(answer);
  const response: CancelResponse = { loop: answer.loop, replayed: answer.replayed };
  return c.json(response, answer.replayed ? 200 : 201);
});

loopRoutes.post("/:id/confirm", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "evaluate");
  const body = await readJson(c, ConfirmRequest);
  requireClaimable(c.get("principal"), body.labels);
  const answer = await stub.confirm({ caller, ...body });
  if (!answer.ok) throw refusalError(answer);
  // Measuring more pairs takes time: the answer says how long the caller's claim lives without a request.
  const response: ConfirmResponse =
    answer.answer.status === "recorded" ? { ...answer.answer, loop: answer.loop } : { ...answer.answer, ttl_ms: leaseTtlMs(c.env) };
  return c.json(response);
});

// A person's answer to a candidate's request to change protected files (docs/design.md §6.8): admin or
// review scope, checked before the loop hears of it. Who answered is the token's, never the body's.
loopRoutes.post("/:id/candidates/:candidateId/review", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "review");
  const body = await readJson(c, ReviewDecisionRequest);
  const answer = await stub.review({ caller, candidate_id: c.req.param("candidateId"), ...body });
  if (!answer.ok) throw refusalError(answer);
  const response: ReviewResponse = { candidate: answer.candidate, loop: answer.loop, replayed: answer.replayed };
  return c.json(response, answer.replayed ? 200 : 201);
});

// The agent's context cannot fit its budget (§6.9): the runner says so instead of running the agent.
loopRoutes.post("/:id/context-unsatisfiable", async (c) => {
  const { stub, caller } = await openLoop(c, c.req.param("id"), "propose");
  const body = await readJson(c, ContextUnsatisfiableRequest);
  const answer = await stub.contextUnsatisfiable({ caller, ...body });
  if (!answer.ok) throw refusalError(answer);
  const response: ContextUnsatisfiableResponse = { loop: answer.loop };
  return c.json(response, 201);
});

// A best's gates re-run (DESIGN §6.5): on resume before the next agent run, or every
// determinism.recheck_every iterations. Authorized and its evidence checked before the loop hears of it.
loopRoutes.post("/:id/rechecks", async (c) => {
  const opened = await openLoop(c, c.req.param("id"), "evaluate");
  const body = await readJson(c, RecheckRequest);
  requireClaimable(c.get("principal"), body.labels);
  await requireStoredEvidence(c.env, opened, body.observation);
  const answer = await opened.stub.recheck({ caller: opened.caller, ...body, request_hash: sha256Hex(canonicalJson(body)) });
  if (!answer.ok) throw refusalError(answer);
  const response: RecheckResponse = { changed: answer.changed, changed_count: answer.changed_count, loop: answer.loop, replayed: answer.replayed };
  return c.json(response, answer.replayed ? 200 : 201);
});
