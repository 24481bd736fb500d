import { createHash } from "node:crypto";
import { createReadStream, openAsBlob } from "node:fs";
import { gzipSync } from "node:zlib";
import type { z } from "zod";
import { LoopEvent } from "../../shared/engine/events.js";
import { sha256Hex } from "../../shared/hash.js";
import {
  ArtifactIntentResponse,
  ArtifactList,
  ArtifactStored,
  UploadedPart,
  type CompleteMultipartRequest,
  ConfirmResponse,
  type ConfirmRequest,
  CreateLoopResponse,
  ErrorBody,
  Health,
  Lease,
  LoopSummary,
  ProposeCandidateResponse,
  ReceiptIssued,
  ReportResponse,
  type CreateLoopRequest,
  type HeartbeatRequest,
  LoopList,
  type LeaseRequestInput,
  type ProposeCandidateRequest,
  type ReportRequest,
} from "../../shared/wire/api.js";
import {
  Identity,
  TeamCreated,
  TeamList,
  TokenCreated,
  TokenList,
  TokenView,
  type CreateTeamRequest,
  type CreateTokenRequest,
} from "../../shared/wire/auth.js";
import type { Contract } from "../../shared/wire/contract.js";
import type { ArtifactRef } from "../../shared/wire/observation.js";
import { CoordinatorError, UserError } from "./errors.js";
import { countRequest } from "./timings.js";

// Defined with the other errors (main.ts catches it without loading the client and its schemas).
export { CoordinatorError };

/** JSON bodies larger than this are sent gzip-encoded. */
export const GZIP_ABOVE_BYTES = 64 * 1024;

/**
 * With `LOOPWARDEN_TRACE_HTTP=1`, one line on stderr per request: method, path, status, the bytes sent
 * (as sent: gzip-encoded when compressed) and the time it took. For measuring what a loop costs on the wire.
 */
function traceRequest(method: string, path: string, status: number | string, body: string | Blob | undefined, startedAt: number): void {
  if (process.env.LOOPWARDEN_TRACE_HTTP !== "1") return;
  const bytes = body === undefined ? 0 : typeof body === "string" ? Buffer.byteLength(body) : body.size;
  const encoding = typeof body === "object" ? " gzip" : "";
  process.stderr.write(`loopwarden http: ${method} ${path} ${status} sent ${bytes} B${encoding} in ${Math.round(performance.now() - startedAt)} ms\n`);
}

/** Whether a URL the coordinator gave is its own path (`/v1/…`) rather than presigned storage. */
function isCoordinatorPath(url: string): boolean {
  return url.startsWith("/");
}

/** Statuses worth retrying: the request may not have been processed, and every mutating request is idempotent (DESIGN §4.6). */
const RETRYABLE_STATUS = new Set([429, 500, 502, 503, 504]);

export interface ClientOptions {
  token?: string | undefined;
  /** How long to keep retrying connection failures and retryable statuses before giving up. */
  retryForMs?: number;
  /** Told about each retry, e.g. to show "coordinator unreachable, retrying". */
  onRetry?: (reason: string, attempt: number) => void;
}

/** The runner's API client: one typed function per endpoint, every response parsed with the shared schemas. */
/** The largest artifact sent without an intent first, once the coordinator is known to store uploads itself. */
const DIRECT_PUT_MAX_BYTES = 256 * 1024;

export class Client {
  readonly baseUrl: string;
  private readonly options: ClientOptions;
  /**
   * Whether this coordinator stores uploads itself (an intent answered with one of its own paths, not a
   * presigned URL): a small artifact is then PUT at once, one request rather than an intent and a PUT.
   * Re-sending a few KiB the coordinator may already hold costs less than the round trip that would ask.
   */
  private storesUploads = false;

  constructor(baseUrl: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.options = options;
  }

  private async send(method: string, path: string, body?: string | Blob, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
    const deadline = Date.now() + (this.options.retryForMs ?? 60_000);
    let backoff = 200;
    for (let attempt = 1; ; attempt++) {
      let reason: string;
      // Full jitter: a wait drawn from [backoff/2, backoff], so runners that failed together do not retry together.
      let wait = backoff / 2 + Math.random() * (backoff / 2);
      const startedAt = performance.now();
      countRequest();
      try {
        // A path is this coordinator's (with the token); a whole URL is presigned storage (never the token).
        const coordinator = isCoordinatorPath(path);
        const response = await fetch(coordinator ? `${this.baseUrl}${path}` : path, {
          method,
          headers: {
            ...(coordinator && this.options.token ? { Authorization: `Bearer ${this.options.token}` } : {}),
            ...headers,
          },
          ...(body === undefined ? {} : { body }),
          signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(60_000)]) : AbortSignal.timeout(60_000),
        });
        traceRequest(method, path, response.status, body, startedAt);
        // A rate-limited answer says how long to wait (seconds); the wait is never shorter than that.
        const retryAfter = Number(response.headers.get("Retry-After"));
        if (Number.isFinite(retryAfter) && retryAfter > 0) wait = Math.max(wait, retryAfter * 1_000);
        // Out of retries, a coordinator that keeps answering an error is reachable: its answer (the
        // error envelope, e.g. a 500's or a 429's code) is what the caller reports, never "cannot reach".
        if (!RETRYABLE_STATUS.has(response.status) || Date.now() + wait > deadline) return response;
        reason = `HTTP ${response.status}`;
        await response.body?.cancel();
      } catch (error) {
        // Cancelled by the caller (e.g. a runner stopping its long-poll): not a failure to retry.
        if (signal?.aborted) throw signal.reason;
        reason = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).message;
        traceRequest(method, path, reason, body, startedAt);
      }
      if (Date.now() + wait > deadline) {
        throw new UserError(`cannot reach the coordinator at ${this.baseUrl} (${reason}); is it running? (loopwarden serve)`);
      }
      this.options.onRetry?.(reason, attempt);
      await new Promise((resolve) => setTimeout(resolve, wait));
      backoff = Math.min(backoff * 2, 5_000);
    }
  }

  private async json<S extends z.ZodType>(method: string, path: string, schema: S, payload?: unknown): Promise<z.infer<S>> {
    if (payload === undefined) return this.parse(await this.send(method, path), schema);
    const text = JSON.stringify(payload);
    // Large bodies (a big suite's test ids) travel gzip-encoded (DESIGN §8); the coordinator's caps
    // count the bytes sent. Small ones go as they are: compressing them would cost more than it saves.
    const compress = Buffer.byteLength(text) > GZIP_ABOVE_BYTES;
    const response = await this.send(
      method,
      path,
      compress ? new Blob([gzipSync(text)]) : text,
      compress ? { "Content-Type": "application/json", "Content-Encoding": "gzip" } : { "Content-Type": "application/json" },
    );
    return this.parse(response, schema);
  }

  private async parse<S extends z.ZodType>(response: Response, schema: S): Promise<z.infer<S>> {
    const text = await response.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new Error(`the coordinator answered HTTP ${response.status} with a non-JSON body: ${text.slice(0, 200)}`);
    }
    if (!response.ok) {
      const envelope = ErrorBody.safeParse(body);
      if (envelope.success) {
        const { code, message, issues } = envelope.data.error;
        const detail = issues?.length ? ` (${issues.map((issue) => `${issue.path}: ${issue.message}`).join("; ")})` : "";
        throw new CoordinatorError(response.status, code, `${message}${detail}`);
      }
      throw new CoordinatorError(response.status, "http_error", `HTTP ${response.status}`);
    }
    const parsed = schema.safeParse(body);
    if (!parsed.success) throw new Error(`the coordinator's answer does not match the protocol: ${parsed.error.message}`);
    return parsed.data;
  }

  /** `GET /healthz`, without retries: is a coordinator answering here right now? */
  async isHealthy(): Promise<boolean> {
    try {
      const response = await fetch(`${this.baseUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
      return response.ok && Health.safeParse(await response.json()).success;
    } catch {
      return false;
    }
  }

  createLoop(request: CreateLoopRequest) {
    return this.json("POST", "/v1/loops", CreateLoopResponse, request);
  }

  /** `POST /v1/loops/:id/confirm`: a confirm measurement of t0 against the best (cumulative readings). */
  confirm(loopId: string, body: ConfirmRequest) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/confirm`, ConfirmResponse, body);
  }

  /** `POST /v1/loops/:id/receipts`: an interim receipt over the log as it is now. */
  issueReceipt(loopId: string) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/receipts`, ReceiptIssued, {});
  }

  /** One page of the loops the token may see, newest first; `next_cursor` continues it. */
  listLoops(query: { status?: "running" | "halted"; contract_hash?: string; cursor?: string; limit?: number } = {}) {
    const params = new URLSearchParams(Object.entries(query).map(([key, value]): [string, string] => [key, String(value)]));
    return this.json("GET", `/v1/loops${params.size > 0 ? `?${params}` : ""}`, LoopList);
  }

  getLoop(loopId: string) {
    return this.json("GET", `/v1/loops/${encodeURIComponent(loopId)}`, LoopSummary);
  }

  proposeCandidate(loopId: string, request: ProposeCandidateRequest) {
    return this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/candidates`, ProposeCandidateResponse, request);
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
      signal,
    );
    if (response.status === 204) return null;
    return this.parse(response, Lease);
  }

  heartbeat(leaseId: string, request: HeartbeatRequest) {
    return this.json("POST", `/v1/leases/${encodeURIComponent(leaseId)}/heartbeat`, Lease, request);
  }

  report(leaseId: string, request: ReportRequest) {
    return this.json("POST", `/v1/leases/${encodeURIComponent(leaseId)}/report`, ReportResponse, request);
  }

  /** Uploads bytes held in memory (a gate's log) as a content-addressed artifact, unless the coordinator has it. */
  async uploadArtifact(loopId: string, name: string, bytes: Uint8Array, contentType: string): Promise<ArtifactRef> {
    const ref: ArtifactRef = { sha256: sha256Hex(bytes), size: bytes.byteLength, name, content_type: contentType };
    return this.uploadBlob(loopId, ref, new Blob([bytes]));
  }

  /**
   * Uploads a file as a content-addressed artifact (DESIGN §10), streamed from disk: its digest is
   * computed by reading it once, then it is sent whole or part by part, as the coordinator answers.
   */
  async uploadArtifactFile(
    loopId: string,
    file: string,
    name: string,
    contentType: string,
    onProgress?: (sent: number, total: number) => void,
  ): Promise<ArtifactRef> {
    const hash = createHash("sha256");
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    const blob = await openAsBlob(file);
    const ref: ArtifactRef = { sha256: hash.digest("hex"), size: blob.size, name, content_type: contentType };
    return this.uploadBlob(loopId, ref, blob, onProgress);
  }

  private async uploadBlob(loopId: string, ref: ArtifactRef, blob: Blob, onProgress?: (sent: number, total: number) => void): Promise<ArtifactRef> {
    const askIntent = () =>
      this.json("POST", `/v1/loops/${encodeURIComponent(loopId)}/artifacts`, ArtifactIntentResponse, {
        sha256: ref.sha256,
        size: ref.size,
        content_type: ref.content_type,
        name: ref.name,
      });
    if (this.storesUploads && ref.size <= DIRECT_PUT_MAX_BYTES) {
      const direct = await this.send("PUT", `/v1/loops/${encodeURIComponent(loopId)}/artifacts/${ref.sha256}?name=${encodeURIComponent(ref.name)}`, blob, {
        "Content-Type": ref.content_type,
      });
      await direct.body?.cancel();
      if (direct.ok) {
        onProgress?.(ref.size, ref.size);
        return ref;
      }
      // Refused (a limit, or storage configured otherwise since): the intent says what to do.
    }
    const intent = await askIntent();
    if (intent.status === "exists") return ref;
    if (intent.status === "upload") {
      if (isCoordinatorPath(intent.url)) this.storesUploads = true;
      // Headers the intent names are signed into a presigned URL (S3 mode's checksum): sent as given.
      const response = await this.send("PUT", intent.url, blob, { "Content-Type": ref.content_type, ...intent.headers });
      if (!response.ok) await this.parse(response, ArtifactStored);
      await response.body?.cancel();
      onProgress?.(ref.size, ref.size);
      // Storage reached by a presigned URL does not tell the coordinator: asking again has it verify and
      // record the object now, one file a request (not all of a report's files inside the report).
      if (!isCoordinatorPath(intent.url)) {
        const recorded = await askIntent();
        if (recorded.status !== "exists")
          throw new Error(`storage did not keep ${ref.name} (${ref.sha256}): the coordinator finds no such object after the upload`);
      }
      return ref;
    }
    // Multipart: each part is sent (and on failure re-sent, by `send`'s retries) on its own; a part
    // that was stored is never sent again. Anything that fails aborts the upload, so no parts linger.
    const parts: UploadedPart[] = [];
    try {
      for (const [index, url] of intent.part_urls.entries()) {
        const start = index * intent.part_size;
        const response = await this.send("PUT", url, blob.slice(start, Math.min(start + intent.part_size, ref.size)));
        if (!response.ok) await this.parse(response, UploadedPart);
        // The coordinator answers the part's ETag as JSON; presigned storage in the ETag header.
        const etag = isCoordinatorPath(url) ? (await this.parse(response, UploadedPart)).etag : (response.headers.get("ETag") ?? "");
        if (!isCoordinatorPath(url)) await response.body?.cancel();
        if (!etag) throw new Error(`storage answered part ${index + 1} of ${ref.name} without an ETag`);
        parts.push({ part_number: index + 1, etag });
        onProgress?.(Math.min(start + intent.part_size, ref.size), ref.size);
      }
      const complete = await this.send("POST", intent.complete_url, JSON.stringify({ parts } satisfies CompleteMultipartRequest), {
        "Content-Type": "application/json",
      });
      await this.parse(complete, ArtifactStored);
      return ref;
    } catch (error) {
      await this.send("DELETE", intent.abort_url).then(
        (response) => response.body?.cancel(),
        () => undefined,
      );
      throw error;
    }
  }

  /** An artifact's bytes (`GET /v1/loops/:id/artifacts/:sha256`); the caller checks the digest. */
  async downloadArtifact(loopId: string, sha256: string): Promise<Uint8Array> {
    const response = await this.send("GET", `/v1/loops/${encodeURIComponent(loopId)}/artifacts/${sha256}`);
    if (!response.ok) await this.parse(response, Health);
    return new Uint8Array(await response.arrayBuffer());
  }

  /** An artifact as a response, to stream (`logs`, `artifacts --download`); a refusal is thrown as the coordinator's error. */
  async artifactResponse(loopId: string, sha256: string): Promise<Response> {
    const response = await this.send("GET", `/v1/loops/${encodeURIComponent(loopId)}/artifacts/${sha256}`);
    if (!response.ok) await this.parse(response, Health);
    return response;
  }

  /** One page of a loop's recorded artifacts, newest first. */
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

  /** `DELETE /v1/tokens/:id` (admin scope). */
  revokeToken(tokenId: string) {
    return this.json("DELETE", `/v1/tokens/${encodeURIComponent(tokenId)}`, TokenView);
  }

  /** `GET /v1/whoami`: the team, scopes and restriction of the token this client sends. */
  whoami() {
    return this.json("GET", "/v1/whoami", Identity);
  }

  /** The contract a loop was created with (its first event, `loop_created`): what the loop pinned. */
  async pinnedContract(loopId: string): Promise<Contract> {
    const response = await this.send("GET", `/v1/loops/${encodeURIComponent(loopId)}/events?after=0&limit=1`);
    if (!response.ok) await this.parse(response, Health);
    const [line] = (await response.text()).split("\n");
    const event = LoopEvent.parse(JSON.parse(line ?? "null"));
    if (event.type !== "loop_created") throw new Error(`the first event of loop ${loopId} is ${event.type}, not loop_created`);
    return event.data.contract;
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
      const response = await this.send("GET", `/v1/loops/${encodeURIComponent(loopId)}/events?after=${cursor}&limit=1000${wait}`);
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
