import type { Context } from "hono";
import { ApiError } from "../http/http-errors.js";

// Streaming an upload's body into R2 (DESIGN §10), and answering its failures as what they are: the
// client's body (its length), the client's bytes (their digest), the client's upload (unknown, or
// parts that do not fit), or storage itself.

/** R2 error codes the binding reports at the end of its messages (`put: … (10037)`). */
export const R2_ERROR = {
  ENTITY_TOO_SMALL: 10011,
  NO_SUCH_UPLOAD: 10024,
  INVALID_PART: 10025,
  BAD_DIGEST: 10037,
  BAD_UPLOAD: 10048,
} as const;

/** The R2 error code of an error the binding threw, if it is one. */
export function r2ErrorCode(error: unknown): number | null {
  const match = error instanceof Error ? /\((\d{4,6})\)$/.exec(error.message) : null;
  return match?.[1] ? Number(match[1]) : null;
}

/** What storage said, for an error message: the binding's own words, bounded. */
function storageMessage(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, 300);
}

/** A storage failure that is nobody's fault but storage's: 502, worth a retry. */
export function storageError(error: unknown): ApiError {
  console.error("loopwarden: artifact storage failed", error);
  return new ApiError(502, "storage_error", `artifact storage failed: ${storageMessage(error)}`);
}

/**
 * Runs a storage call, answering what storage itself failed at as 502 `storage_error` (an ApiError the
 * call threw, such as a refusal or a misconfiguration, is passed on as it is).
 */
export async function inStorage<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof ApiError) throw error;
    throw storageError(error);
  }
}

/**
 * The declared length of a raw upload body, which R2 needs before the first byte: 411 without one, 413
 * past `cap`.
 */
export function declaredLength(c: Context, cap: number, what: string): number {
  const header = c.req.header("content-length");
  if (header === undefined || !/^\d{1,16}$/.test(header.trim())) {
    throw new ApiError(411, "length_required", `send the ${what} with a Content-Length header`);
  }
  const length = Number(header.trim());
  if (length > cap) throw new ApiError(413, "body_too_large", `${what}s are limited to ${cap} bytes`);
  return length;
}

/** A body that did not carry the bytes its Content-Length declared. */
class LengthMismatch extends Error {}

/** A request body on its way into R2 with exactly its declared length. */
export interface ExactBody {
  /** The readable side of a FixedLengthStream: a stream R2 takes, since its length is known. */
  stream: ReadableStream<Uint8Array>;
  /** Settles when the body has gone through (or failed to). */
  done: Promise<void>;
  /** Set when the body itself was at fault: too short, too long, or broken off. */
  mismatch: () => LengthMismatch | null;
}

/**
 * Pipes `body` into a FixedLengthStream of `length`, counting on the way, so that a body of another
 * length is told apart from a storage failure (both make R2's call fail).
 */
export function exactBody(body: ReadableStream<Uint8Array> | null, length: number): ExactBody {
  const reader = (body ?? new ReadableStream<Uint8Array>({ start: (controller) => controller.close() })).getReader();
  let received = 0;
  let mismatch: LengthMismatch | null = null;
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, message: string) => {
    mismatch = new LengthMismatch(message);
    controller.error(mismatch);
  };
  const counted = new ReadableStream<Uint8Array>({
    async pull(controller) {
      let next: ReadableStreamReadResult<Uint8Array>;
      try {
        next = await reader.read();
      } catch {
        return fail(controller, `the body broke off after ${received} of the ${length} bytes its Content-Length declares`);
      }
      if (next.done) {
        if (received === length) return controller.close();
        return fail(controller, `the body carries ${received} bytes; its Content-Length declares ${length}`);
      }
      received += next.value.byteLength;
      if (received > length) {
        await reader.cancel().catch(() => undefined);
        return fail(controller, `the body carries more than the ${length} bytes its Content-Length declares`);
      }
      controller.enqueue(next.value);
    },
    cancel: (reason) => reader.cancel(reason),
  });
  const fixed = new FixedLengthStream(length);
  return { stream: fixed.readable, done: counted.pipeTo(fixed.writable), mismatch: () => mismatch };
}

/**
 * Streams `body` into storage with `store` (a put or a part's upload) and answers what it answered. A
 * failure is thrown as what it was: 400 `length_mismatch` (the body), 400 `digest_mismatch` (R2 refused
 * bytes that do not hash to the key), 404 `upload_not_found`, else 502 `storage_error`.
 */
export async function streamInto<T>(body: ReadableStream<Uint8Array> | null, length: number, store: (stream: ReadableStream) => Promise<T>): Promise<T> {
  const exact = exactBody(body, length);
  const [stored, piped] = await Promise.allSettled([store(exact.stream), exact.done]);
  if (stored.status === "fulfilled" && piped.status === "fulfilled") return stored.value;
  const mismatch = exact.mismatch();
  if (mismatch) throw new ApiError(400, "length_mismatch", mismatch.message);
  const error: unknown = stored.status === "rejected" ? stored.reason : piped.status === "rejected" ? piped.reason : null;
  const code = r2ErrorCode(error);
  if (code === R2_ERROR.BAD_DIGEST) {
    console.warn("loopwarden: artifact upload refused", error);
    throw new ApiError(400, "digest_mismatch", "the uploaded bytes do not hash to the sha256 they were put under");
  }
  if (code === R2_ERROR.NO_SUCH_UPLOAD) throw uploadNotFound();
  throw storageError(error);
}

/** A multipart upload that is not in progress: never created, aborted, or completed. */
export function uploadNotFound(): ApiError {
  return new ApiError(404, "upload_not_found", "no such multipart upload in progress: it was completed, aborted, or never begun");
}
