import { LoopEvent } from "#shared/engine/events.js";
import {
  ArtifactList,
  BaselineReportResponse,
  CancelResponse,
  ContextUnsatisfiableResponse,
  ReviewResponse,
  type ContextUnsatisfiableRequest,
  ConfirmResponse,
  RecheckResponse,
  type RecheckRequest,
  type CancelRequest,
  type ConfirmRequest,
  CreateLoopResponse,
  Health,
  Lease,
  LoopSummary,
  LoginLink,
  ProposeCandidateResponse,
  ReceiptIssued,
  ReleaseResponse,
  ReportResponse,
  type BaselineReportRequest,
  type CreateLoopRequest,
  type LoopCreated,
  type HeartbeatRequest,
  LoopList,
  type LeaseRequestInput,
  type ProposeCandidateRequest,
  type ReleaseRequest,
  type ReportRequest,
} from "#shared/wire/api.js";
import { Identity, TeamCreated, TeamList, TokenCreated, TokenList, TokenRevoked, type CreateTeamRequest, type CreateTokenRequest } from "#shared/wire/auth.js";
import type { Contract } from "#shared/wire/contract.js";
import type { ReviewDecisionRequest } from "#shared/wire/review.js";
import { CoordinatorError } from "../errors.js";
import { ArtifactTransfers } from "./artifact-transfers.js";

// Defined with the other errors (main.ts catches it without loading the client and its schemas).
export { CoordinatorError };

/** `?events_after=N` for a proposal or a report whose answer should carry the events after N. */
function eventsQuery(after: number | undefined): string {
  return after === undefined ? "" : `?events_after=${after}`;
}

/** The runner's API client: one typed function per endpoint, every response parsed with the shared schemas. */
export class Client extends ArtifactTransfers {
  /** Set when this coordinator refused a report's inline evidence (one older than it, say): reports then upload first. */
  private evidenceRefused = false;

  /** `GET /healthz`, without retries: is a coordinator answering here right now? */
  async isHealthy(): Promise<boolean> {
    try {
      const response = await fetch(`${this.baseUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
      return response.ok && Health.safeParse(await response.json()).success;
    } catch {
      return false;
    }
  }

  /**
   * Creates a loop (or answers the one this request created). A creation with `t0_commit` answers what it
   * awaits until a runner reports the baseline; with `waitMs`, a retry is held until it does (at most 25 s).
   */
  createLoop(request: CreateLoopRequest & { t0: object }): Promise<LoopCreated>;
  createLoop(request: CreateLoopRequest, waitMs?: number): Promise<CreateLoopResponse>;
  async createLoop(request: CreateLoopRequest, waitMs = 0): Promise<CreateLoopResponse> {
    const answer = await this.json("POST", `/v1/loops${waitMs > 0 ? `?wait_ms=${waitMs}` : ""}`, CreateLoopResponse, request, undefined, waitMs);
    if (request.t0 && !("loop" in answer)) throw new Error("the coordinator answered a creation with a measured t0 as awaiting its baseline");
    return answer;
  }

  /** Reports t0 as measured on a baseline lease: the loop is created from it. */
  reportBaseline(leaseId: string, request: BaselineReportRequest) {
    return this.json("POST", `/v1/leases/${encodeURIComponent(leaseId)}/baseline`, BaselineReportResponse, request);
  }

  /** `POST /v1/loops/:id/confirm`: a confirm measurement of t0 against the best (cumulative readings). */
  confirm(loopId: string, body: ConfirmRequest) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/confirm`, ConfirmResponse, body);
  }

  /** `POST /v1/loops/:id/rechecks`: a re-run of the best's gates, judged against its recorded outcome. */
  recheck(loopId: string, body: RecheckRequest) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/rechecks`, RecheckResponse, body);
  }

  /** `POST /v1/loops/:id/candidates/:candidateId/review`: a person's answer to a candidate's review request (admin or review scope). */
  reviewCandidate(loopId: string, candidateId: string, body: ReviewDecisionRequest) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/candidates/${encodeURIComponent(candidateId)}/review`, ReviewResponse, body);
  }

  /** `POST /v1/loops/:id/context-unsatisfiable`: the agent's context cannot fit its budget; the loop halts. */
  contextUnsatisfiable(loopId: string, body: ContextUnsatisfiableRequest) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/context-unsatisfiable`, ContextUnsatisfiableResponse, body);
  }

  /** `POST /v1/loops/:id/cancel`: the loop halted as `cancelled` (or as it was, when it already was). */
  cancelLoop(loopId: string, body: CancelRequest) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/cancel`, CancelResponse, body);
  }

  /**
   * `POST /v1/dashboard/links`: a one-time link that logs a browser in to the dashboard as this token, then
   * opens `next` (a dashboard path, `/loops/<id>`) when given.
   */
  async loginLink(next?: string): Promise<LoginLink> {
    const link = await this.json("POST", "/v1/dashboard/links", LoginLink, {});
    return next === undefined ? link : { ...link, url: `${link.url}?next=${encodeURIComponent(next)}` };
  }

  /** `POST /v1/loops/:id/receipts`: an interim receipt over the log as it is now. */
  issueReceipt(loopId: string) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/receipts`, ReceiptIssued, {});
  }

  /** One page of the loops the token may see, newest first; `next_cursor` continues it. */
  listLoops(query: { status?: "running" | "halted" | "awaiting_baseline"; contract_hash?: string; cursor?: string; limit?: number } = {}) {
    const params = new URLSearchParams(Object.entries(query).map(([key, value]): [string, string] => [key, String(value)]));
    return this.json("GET", `/v1/loops${params.size > 0 ? `?${params}` : ""}`, LoopList);
  }

  getLoop(loopId: string) {
    return this.json("GET", `/v1/loops/${encodeURIComponent(loopId)}`, LoopSummary);
  }

  /** Proposes a candidate; with `eventsAfter` (the last event folded), the answer carries the log's events after it. */
  proposeCandidate(loopId: string, request: ProposeCandidateRequest, eventsAfter?: number) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/candidates${eventsQuery(eventsAfter)}`, ProposeCandidateResponse, request);
  }

  /**
   * Leases the next job, or null when none is queued for this runner's labels (HTTP 204); with
   * `wait_ms`, the coordinator holds the request until one is (a long-poll, at most 25 s).
   */
  async leaseJob(loopId: string, request: LeaseRequestInput, signal?: AbortSignal): Promise<Lease | null> {
    const response = await this.send(
      "POST",
      `/v1/loops/${encodeURIComponent(loopId)}/leases`,
      JSON.stringify(request),
      { "Content-Type": "application/json" },
      { signal, limitTotal: true, extraWaitMs: request.wait_ms ?? 0 },
    );
    if (response.status === 204) return null;
    return this.parse(response, Lease);
  }

  heartbeat(leaseId: string, request: HeartbeatRequest) {
    return this.json("POST", `/v1/leases/${encodeURIComponent(leaseId)}/heartbeat`, Lease, request);
  }

  /**
   * `POST /v1/leases/:id/release`: gives the lease back, so its job is queued at once rather than when
   * the lease runs out. Retried like a heartbeat (a release is idempotent); `signal` bounds how long a
   * runner that is stopping waits for it.
   */
  releaseLease(leaseId: string, request: ReleaseRequest, signal?: AbortSignal) {
    return this.json("POST", `/v1/leases/${encodeURIComponent(leaseId)}/release`, ReleaseResponse, request, signal);
  }

  /**
   * Whether a report may carry the small files it cites inline (`evidence`): this coordinator stores
   * uploads itself (binding mode; in S3 mode files go to storage first), and has not refused evidence.
   */
  get acceptsEvidence(): boolean {
    return this.storesUploads && !this.evidenceRefused;
  }

  /** Reports upload the files they cite first from now on (the coordinator refused inline evidence). */
  refuseEvidence(): void {
    this.evidenceRefused = true;
  }

  /** Reports an observation; with `eventsAfter` (the last event folded), the answer carries the log's events after it. */
  report(leaseId: string, request: ReportRequest, eventsAfter?: number) {
    return this.json("POST", `/v1/leases/${encodeURIComponent(leaseId)}/report${eventsQuery(eventsAfter)}`, ReportResponse, request);
  }

  /** Uploads bytes held in memory (a gate's log) as a content-addressed artifact, unless the coordinator has it. */
  listArtifacts(loopId: string, cursor?: string) {
    return this.json("GET", `/v1/loops/${encodeURIComponent(loopId)}/artifacts${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ""}`, ArtifactList);
  }

  /** `POST /v1/teams` (owner token): a team and its first admin token. */
  createTeam(request: CreateTeamRequest) {
    return this.json("POST", "/v1/teams", TeamCreated, request);
  }

  /** `GET /v1/teams` (owner token). */
  listTeams() {
    return this.json("GET", "/v1/teams", TeamList);
  }

  /** `POST /v1/tokens` (admin scope): a token of the caller's team, its secret shown this once. */
  createToken(request: CreateTokenRequest) {
    return this.json("POST", "/v1/tokens", TokenCreated, request);
  }

  /** `GET /v1/tokens` (admin scope); the owner may name a team. */
  listTokens(teamId?: string) {
    return this.json("GET", `/v1/tokens${teamId ? `?team_id=${encodeURIComponent(teamId)}` : ""}`, TokenList);
  }

  /**
   * `DELETE /v1/tokens/:id` (admin scope): the token and every token it minted, down the line. A
   * coordinator from before revocations cascaded answers the token alone (no counts).
   */
  revokeToken(tokenId: string) {
    return this.json("DELETE", `/v1/tokens/${encodeURIComponent(tokenId)}`, TokenRevoked.partial({ revoked_count: true, revoked_token_ids: true }));
  }

  /** `GET /v1/whoami`: the team, scopes and restriction of the token this client sends. */
  whoami() {
    return this.json("GET", "/v1/whoami", Identity);
  }

  /** A loop's first event, `loop_created`: its pinned contract and t0 (and who measured it). */
  async creation(loopId: string): Promise<Extract<LoopEvent, { type: "loop_created" }>> {
    const response = await this.send("GET", `/v1/loops/${encodeURIComponent(loopId)}/events?after=0&limit=1`);
    if (!response.ok) await this.parse(response, Health);
    const [line] = (await response.text()).split("\n");
    const event = LoopEvent.parse(JSON.parse(line ?? "null"));
    if (event.type !== "loop_created") throw new Error(`the first event of loop ${loopId} is ${event.type}, not loop_created`);
    return event;
  }

  /** The contract a loop was created with (its first event, `loop_created`): what the loop pinned. */
  async pinnedContract(loopId: string): Promise<Contract> {
    return (await this.creation(loopId)).data.contract;
  }

  /**
   * The log after `after` as Server-Sent Events, then each event as it is appended: the response's body,
   * open until the caller cancels it (event-stream.ts reads it). A refusal (404, 401) is thrown.
   */
  async eventStream(loopId: string, after: number): Promise<ReadableStream<Uint8Array>> {
    const response = await this.send(
      "GET",
      `/v1/loops/${encodeURIComponent(loopId)}/events`,
      undefined,
      { Accept: "text/event-stream", "Last-Event-ID": String(after) },
      { what: `following the events of loop ${loopId}` },
    );
    if (!response.ok || !response.body) {
      await this.parse(response, Health);
      throw new Error(`the coordinator answered the event stream of loop ${loopId} without a body`);
    }
    return response.body;
  }

  /**
   * Raw events after `after`, exactly as stored and hashed (JSONL), following pages to the end. With
   * `waitMs`, a long-poll: when nothing follows `after` yet, the coordinator answers once something does
   * (or after the wait, with none).
   */
  async eventLines(loopId: string, after = 0, waitMs = 0): Promise<string[]> {
    const lines: string[] = [];
    let cursor = after;
    for (;;) {
      const wait = cursor === after && waitMs > 0 ? `&wait_ms=${waitMs}` : "";
      const response = await this.send(
        "GET",
        `/v1/loops/${encodeURIComponent(loopId)}/events?after=${cursor}&limit=1000${wait}`,
        undefined,
        {},
        {
          what: `reading the events of loop ${loopId}`,
          extraWaitMs: wait ? waitMs : 0,
        },
      );
      if (!response.ok) await this.parse(response, Health);
      const page = (await response.text()).split("\n").filter((line) => line.length > 0);
      lines.push(...page);
      // Pages end at a row count or a byte budget; the coordinator says whether more follow.
      const more = response.headers.get("Loopwarden-More");
      if (page.length === 0 || (more === null ? page.length < 1000 : more !== "true")) return lines;
      cursor += page.length;
    }
  }
}
