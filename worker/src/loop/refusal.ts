import type { EngineError } from "#shared/engine/index.js";

// Apart from loop-object.ts, which returns it: http-errors.ts maps it to a status, and importing it from
// loop-object.ts made a cycle (loop-object.ts imports auth.ts, receipt-keys.ts, which import http-errors.ts).

/** An expected failure, returned across RPC as a value (custom error classes do not survive RPC). */
export type Refusal = {
  ok: false;
  code: EngineError["code"] | "not_found" | "storage_limit" | "signing_unconfigured" | "limit_reached";
  message: string;
};

/** A LoopObject's answer: what it did, or a refusal that changed nothing. */
export type Answer<T> = ({ ok: true } & T) | Refusal;

/** What a caller is told of a loop it may not reach, or that does not exist: the same, so no existence oracle. */
export const NOT_FOUND: Refusal = { ok: false, code: "not_found", message: "no such loop" };
