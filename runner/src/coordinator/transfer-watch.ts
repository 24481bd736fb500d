import { UserError } from "../errors.js";
import type { BodySource } from "./file-body.js";

// How the client tells a slow transfer from a dead one (DESIGN §10). A request is never timed whole: a
// 90 MiB artifact on a slow link, a `complete` that re-reads GiBs, a long download all take as long as
// they take while bytes move. What ends a request is a wait with nothing happening: no byte taken by the
// connection while sending, no answer begun once the request is sent, no byte received while reading
// the answer. Small JSON calls also have a limit on their whole answer.

/** A request that stopped making progress: the peer, or the network to it, stopped answering. */
export class TransferStalled extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "TransferStalled";
  }
}

/** Reading the request's own body failed (a file that vanished or changed while it was sent): never retried. */
export class BodySourceError extends Error {
  constructor(
    readonly what: string,
    cause: unknown,
  ) {
    super(`could not read what was being sent while ${what}: ${(cause as Error).message ?? String(cause)}`, { cause });
    this.name = "BodySourceError";
  }
}

/** The smallest and the largest piece a request body is handed to the connection in. */
export const BODY_PIECE_MIN_BYTES = 64 * 1024;
export const BODY_PIECE_MAX_BYTES = 1024 * 1024;

/**
 * The pieces a body of `size` bytes is handed to the connection in: progress and the idle watch see each
 * one, so a body goes in at least 16 of them (64 KiB at the least), and in 1 MiB pieces from 16 MiB up:
 * each piece costs fetch a write of its own, and a 500 MiB file went out 3–5× faster in 1 MiB pieces than
 * in 64 KiB ones (issue 30).
 */
export function bodyPieceBytes(size: number): number {
  const sixteenth = Math.floor(size / 16 / BODY_PIECE_MIN_BYTES) * BODY_PIECE_MIN_BYTES;
  return Math.min(BODY_PIECE_MAX_BYTES, Math.max(BODY_PIECE_MIN_BYTES, sixteenth));
}

/** A duration as a message says it: `300 ms`, `60 s`, `1.5 s`. */
export function describeWait(ms: number): string {
  return ms < 1_000 ? `${ms} ms` : `${Number((ms / 1_000).toFixed(1))} s`;
}

export interface WatchOptions {
  /** The longest a transfer may go without a byte either way. */
  idleMs: number;
  /** Once the request is sent (the connection took its last byte), how long its answer may take to begin. */
  answerWithinMs: number;
  /** Once the request is sent, how long its whole answer may take (small JSON calls); undefined: no limit. */
  totalMs?: number | undefined;
  /** Who answers: "the coordinator at …", "storage at …". */
  peer: string;
  /** What the request does, for messages: "uploading profile.bin (90.0 MiB)". */
  what: string;
  /** A hint appended to every stall message (how to wait longer). */
  hint?: string;
  /** Told the bytes of the body handed to the connection so far, after each piece. */
  onSent?: ((bytes: number) => void) | undefined;
}

/**
 * One attempt of one request under watch: its signal aborts the fetch with a TransferStalled that says
 * which wait ran out. `body` wraps the request body and `response` the answer's body, each re-arming the
 * idle timer on every piece; nothing else times the request.
 */
export class TransferWatch {
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private idle: NodeJS.Timeout | undefined;
  private total: NodeJS.Timeout | undefined;
  private sourceError: unknown = undefined;
  private finished = false;

  constructor(
    private readonly options: WatchOptions,
    outer?: AbortSignal,
  ) {
    this.signal = outer ? AbortSignal.any([outer, this.controller.signal]) : this.controller.signal;
  }

  private stop(message: string): void {
    this.controller.abort(new TransferStalled(`${message}${this.options.hint ? `; ${this.options.hint}` : ""}`));
  }

  private arm(ms: number, message: () => string): void {
    clearTimeout(this.idle);
    if (this.finished) return;
    this.idle = setTimeout(() => this.stop(message()), ms);
    // The request's own socket keeps the process alive while it matters; a timer must not outlive it.
    this.idle.unref();
  }

  /** The request starts: with no body, its answer is awaited from now on. */
  start(hasBody: boolean): void {
    if (hasBody) this.sending();
    else this.sent();
  }

  private sending(): void {
    const { idleMs, peer, what } = this.options;
    this.arm(idleMs, () => `${peer} stopped answering: it took no byte for ${describeWait(idleMs)} while ${what}`);
  }

  /** The connection took the whole request: from now on its answer is awaited. */
  private sent(): void {
    const { answerWithinMs, totalMs, peer, what } = this.options;
    this.arm(answerWithinMs, () => `${peer} stopped answering: no response for ${describeWait(answerWithinMs)} after ${what}`);
    if (totalMs !== undefined && this.total === undefined && !this.finished) {
      this.total = setTimeout(() => this.stop(`${peer} did not finish answering within ${describeWait(totalMs)} while ${what}`), totalMs);
      this.total.unref();
    }
  }

  /** The request body as a stream of pieces: each one the connection asks for is progress. */
  body(source: BodySource): ReadableStream<Uint8Array> {
    const pieceBytes = bodyPieceBytes(source.size);
    let reader: ReadableStreamDefaultReader<Uint8Array> | null = null;
    let pending: Uint8Array = new Uint8Array(0);
    let offset = 0;
    let sentBytes = 0;
    return new ReadableStream<Uint8Array>(
      {
        pull: async (controller) => {
          // Asked for more: the connection took the previous piece.
          this.sending();
          if (offset >= pending.byteLength) {
            reader ??= source.stream().getReader();
            let next: Awaited<ReturnType<ReadableStreamDefaultReader<Uint8Array>["read"]>>;
            try {
              next = await reader.read();
            } catch (error) {
              this.sourceError = error;
              throw error;
            }
            if (next.done) {
              controller.close();
              this.sent();
              return;
            }
            pending = next.value;
            offset = 0;
          }
          const piece = pending.subarray(offset, offset + pieceBytes);
          offset += piece.byteLength;
          sentBytes += piece.byteLength;
          controller.enqueue(piece);
          this.options.onSent?.(sentBytes);
        },
        cancel: async (reason) => {
          await reader?.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
  }

  /** The answer began: its body, if any, is read under the idle watch (and the total limit, if any). */
  response(response: Response): Response {
    clearTimeout(this.idle);
    if (!response.body) {
      this.end();
      return response;
    }
    const reader = response.body.getReader();
    const { idleMs, peer, what } = this.options;
    const body = new ReadableStream<Uint8Array>(
      {
        pull: async (controller) => {
          // Only a read that waits on the network is timed, never a reader that takes its time.
          this.arm(idleMs, () => `${peer} stopped answering: no byte received for ${describeWait(idleMs)} while ${what}`);
          let next: Awaited<ReturnType<ReadableStreamDefaultReader<Uint8Array>["read"]>>;
          try {
            next = await reader.read();
          } catch (error) {
            this.end();
            throw this.stalled() ?? error;
          }
          clearTimeout(this.idle);
          if (next.done) {
            this.end();
            controller.close();
            return;
          }
          controller.enqueue(next.value);
        },
        cancel: async (reason) => {
          this.end();
          await reader.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  }

  /** The stall that aborted this attempt, if one did. */
  stalled(): TransferStalled | null {
    const reason: unknown = this.controller.signal.reason;
    return this.controller.signal.aborted && reason instanceof TransferStalled ? reason : null;
  }

  /** Why reading the request's own body failed, if it did. */
  bodyFailure(): BodySourceError | null {
    return this.sourceError === undefined ? null : new BodySourceError(this.options.what, this.sourceError);
  }

  /** Nothing more to watch: the timers are cleared. */
  end(): void {
    this.finished = true;
    clearTimeout(this.idle);
    clearTimeout(this.total);
  }
}
