import { gzipSync } from "node:zlib";
import type { z } from "zod";
import { ErrorBody } from "#shared/wire/api.js";
import { MAX_TIMEOUT_MS, parseDuration } from "#shared/duration.js";
import { CoordinatorError, UserError } from "../errors.js";
import { countRequest } from "../timings.js";
import type { BodySource } from "./file-body.js";
import type { TransferStalled } from "./transfer-watch.js";
import { TransferWatch, type WatchOptions } from "./transfer-watch.js";

// How the runner talks to its coordinator and to presigned storage (DESIGN §8): one request with its
// retries (connection failures, stalls and retryable statuses, with jittered backoff within a budget),
// the stall watch (TransferWatch), gzip for large JSON bodies, the token on the coordinator's paths only,
// and a trace line per request. What is said — the endpoints — is client.ts's `Client`, built on this.

/** JSON bodies larger than this are sent gzip-encoded. */
export const GZIP_ABOVE_BYTES = 64 * 1024;

/**
 * The gzip level of large JSON bodies: the fastest. Test ids compress so well that level 1 sends 4% more
 * than the default level 6 (387 against 371 KiB for a 100,000-test t0) in a third of the time (about
 * 12 against 40 ms): less than the difference takes to cross any network a runner reaches its coordinator by.
 */
export const GZIP_LEVEL = 1;

/**
 * With `LOOPWARDEN_TRACE_HTTP=1`, one line on stderr per request: method, path, status, the bytes sent
 * (as sent: gzip-encoded when compressed) and the time it took. For measuring what a loop costs on the wire.
 */
function traceRequest(
  method: string,
  path: string,
  status: number | string,
  body: BodySource | undefined,
  encoding: string | undefined,
  startedAt: number,
): void {
  if (process.env.LOOPWARDEN_TRACE_HTTP !== "1") return;
  process.stderr.write(
    `loopwarden http: ${method} ${path} ${status} sent ${body?.size ?? 0} B${encoding ? ` ${encoding}` : ""} in ${Math.round(performance.now() - startedAt)} ms\n`,
  );
}

/** Whether a URL the coordinator gave is its own path (`/v1/…`) rather than presigned storage. */
export function isCoordinatorPath(url: string): boolean {
  return url.startsWith("/");
}

/** Statuses worth retrying: the request may not have been processed, and every mutating request is idempotent (DESIGN §4.6). */
const RETRYABLE_STATUS = new Set([429, 500, 502, 503, 504]);

export interface ClientOptions {
  token?: string | undefined;
  /** How long to keep retrying connection failures, stalls and retryable statuses, from the first failure, before giving up. */
  retryForMs?: number;
  /** Told about each retry, e.g. to show "coordinator unreachable, retrying". */
  onRetry?: (reason: string, attempt: number) => void;
  /**
   * The longest a request may go without a byte sent or received, and wait for its answer to begin once
   * sent (default LOOPWARDEN_HTTP_IDLE_TIMEOUT, else 60 s). Uploads and downloads are never timed whole.
   */
  idleTimeoutMs?: number;
  /** How long a small JSON call's whole answer may take once it is sent (default 60 s). */
  requestTimeoutMs?: number;
}

/** What a request does, and how long its answer may take (see TransferWatch). */
export interface RequestOptions {
  /** Cancels the request (e.g. a runner stopping its long-poll): not a failure to retry. */
  signal?: AbortSignal | undefined;
  /** What the request does, for the message when it stalls; default its method and path. */
  what?: string;
  /** Once sent, how long the answer may take to begin, beyond the idle timeout (a long-poll's wait, a `complete`'s re-read). */
  extraWaitMs?: number;
  /** A small JSON call: its whole answer is limited too. */
  limitTotal?: boolean;
  /** Told the bytes of the body sent so far. */
  onSent?: (bytes: number) => void;
}

/** LOOPWARDEN_HTTP_IDLE_TIMEOUT (a duration: `60s`, `5m`), else 60 s. */
export function idleTimeoutFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.LOOPWARDEN_HTTP_IDLE_TIMEOUT;
  if (!text) return DEFAULT_IDLE_TIMEOUT_MS;
  const ms = parseDuration(text);
  if (ms === null) throw new UserError(`LOOPWARDEN_HTTP_IDLE_TIMEOUT=${JSON.stringify(text)} is not a duration (write 60s, 5m)`, 2);
  return Math.min(ms, MAX_TIMEOUT_MS);
}

/** How long a transfer may go without a byte either way, unless configured. */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;
/** How long a small JSON call's answer may take whole, unless configured. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
/** One coordinator (and the storage it presigns for), spoken to with retries, stall watching and gzip. */
export class Transport {
  readonly baseUrl: string;
  protected readonly options: ClientOptions;
  private readonly idleMs: number;
  private readonly requestMs: number;
  constructor(baseUrl: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.options = options;
    this.idleMs = options.idleTimeoutMs ?? idleTimeoutFromEnv();
    this.requestMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  }

  protected async send(
    method: string,
    path: string,
    body?: string | BodySource,
    headers: Record<string, string> = {},
    request: RequestOptions = {},
  ): Promise<Response> {
    const retryFor = this.options.retryForMs ?? 60_000;
    // The retries' budget counts from the first failure: a part that took minutes to send and then failed is retried too.
    let deadline: number | null = null;
    let backoff = 200;
    // A path is this coordinator's (with the token); a whole URL is presigned storage (never the token).
    const coordinator = isCoordinatorPath(path);
    const peer = coordinator ? `the coordinator at ${this.baseUrl}` : `storage at ${new URL(path).host}`;
    const payload = body === undefined ? undefined : typeof body === "string" ? new Blob([body]) : body;
    const watchOptions: WatchOptions = {
      idleMs: this.idleMs,
      answerWithinMs: this.idleMs + (request.extraWaitMs ?? 0),
      totalMs: request.limitTotal ? this.requestMs + (request.extraWaitMs ?? 0) : undefined,
      peer,
      what: request.what ?? `${method} ${coordinator ? path.replace(/\?.*$/, "") : "a presigned URL"}`,
      hint: "LOOPWARDEN_HTTP_IDLE_TIMEOUT (a duration) sets how long to wait",
      onSent: request.onSent,
    };
    for (let attempt = 1; ; attempt++) {
      let reason: string;
      let stalled: TransferStalled | null = null;
      // Full jitter: a wait drawn from [backoff/2, backoff], so runners that failed together do not retry together.
      let wait = backoff / 2 + Math.random() * (backoff / 2);
      const startedAt = performance.now();
      countRequest();
      const watch = new TransferWatch(watchOptions, request.signal);
      try {
        watch.start(payload !== undefined);
        const response = await fetch(coordinator ? `${this.baseUrl}${path}` : path, {
          method,
          headers: {
            ...(coordinator && this.options.token ? { Authorization: `Bearer ${this.options.token}` } : {}),
            ...headers,
            ...(payload === undefined ? {} : { "Content-Length": String(payload.size) }),
          },
          // Streamed piece by piece (with its length declared): progress, and the idle watch, see each piece.
          ...(payload === undefined ? {} : { body: watch.body(payload), duplex: "half" as const }),
          signal: watch.signal,
        });
        traceRequest(method, path, response.status, payload, headers["Content-Encoding"], startedAt);
        // A rate-limited answer says how long to wait (seconds); the wait is never shorter than that.
        const retryAfter = Number(response.headers.get("Retry-After"));
        if (Number.isFinite(retryAfter) && retryAfter > 0) wait = Math.max(wait, retryAfter * 1_000);
        deadline = RETRYABLE_STATUS.has(response.status) ? (deadline ?? Date.now() + retryFor) : deadline;
        // Out of retries, a coordinator that keeps answering an error is reachable: its answer (the
        // error envelope, e.g. a 500's or a 429's code) is what the caller reports, never "cannot reach".
        if (!RETRYABLE_STATUS.has(response.status) || Date.now() + wait > (deadline ?? 0)) return watch.response(response);
        watch.end();
        reason = `HTTP ${response.status}`;
        await response.body?.cancel();
      } catch (error) {
        watch.end();
        // Cancelled by the caller (e.g. a runner stopping its long-poll): not a failure to retry.
        if (request.signal?.aborted) throw request.signal.reason;
        // The bytes being sent could not be read (a file gone or changed): no retry reads them better.
        const unreadable = watch.bodyFailure();
        if (unreadable) throw unreadable;
        stalled = watch.stalled();
        reason = stalled ? "no progress" : ((error as { cause?: { code?: string } }).cause?.code ?? (error as Error).message);
        traceRequest(method, path, stalled ? "stalled" : reason, payload, headers["Content-Encoding"], startedAt);
      }
      deadline ??= Date.now() + retryFor;
      if (Date.now() + wait > deadline) {
        // A peer that stopped answering mid-request is reachable: say what stalled, never "cannot reach".
        if (stalled) throw stalled;
        if (!coordinator) throw new UserError(`cannot reach ${peer} (${reason}) while ${watchOptions.what}`);
        throw new UserError(`cannot reach the coordinator at ${this.baseUrl} (${reason}); is it running? (loopwarden serve)`);
      }
      this.options.onRetry?.(stalled ? stalled.message : reason, attempt);
      await new Promise((resolve) => setTimeout(resolve, wait));
      backoff = Math.min(backoff * 2, 5_000);
    }
  }

  /** A JSON request and its parsed answer; `extraWaitMs` is how long the coordinator may hold it (a long-poll). */
  protected async json<S extends z.ZodType>(
    method: string,
    path: string,
    schema: S,
    payload?: unknown,
    signal?: AbortSignal,
    extraWaitMs = 0,
  ): Promise<z.infer<S>> {
    if (payload === undefined) return this.parse(await this.send(method, path, undefined, {}, { signal, limitTotal: true, extraWaitMs }), schema);
    // Encoded once: measuring the text's UTF-8 length and then gzipping the text encoded it twice more
    // (20 ms each for a 100,000-test t0, issue 30).
    const bytes = Buffer.from(JSON.stringify(payload));
    // Large bodies (a big suite's test ids) travel gzip-encoded (DESIGN §8); the coordinator's caps
    // count the bytes sent. Small ones go as they are: compressing them would cost more than it saves.
    const compress = bytes.length > GZIP_ABOVE_BYTES;
    const response = await this.send(
      method,
      path,
      new Blob([compress ? gzipSync(bytes, { level: GZIP_LEVEL }) : bytes]),
      compress ? { "Content-Type": "application/json", "Content-Encoding": "gzip" } : { "Content-Type": "application/json" },
      { signal, limitTotal: true, extraWaitMs },
    );
    return this.parse(response, schema);
  }

  protected async parse<S extends z.ZodType>(response: Response, schema: S): Promise<z.infer<S>> {
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
}
