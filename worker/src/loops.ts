import { sha256Hex } from "../../shared/hash.js";
import { LoopId } from "../../shared/wire/api.js";
import { ApiError } from "./http-errors.js";
import type { LoopObject } from "./loop-object.js";

/** The loop id an idempotency key names: creating twice with one key reaches the same LoopObject. */
export function loopIdFor(idempotencyKey: string): string {
  return `lp_${sha256Hex(`loopwarden/loop\n${idempotencyKey}`).slice(0, 24)}`;
}

/**
 * The stub of an existing loop's object. A malformed id answers 404 like an unknown one, without
 * addressing any object.
 */
export function loopStub(env: Env, loopId: string | undefined): DurableObjectStub<LoopObject> {
  if (loopId === undefined || !LoopId.safeParse(loopId).success) throw new ApiError(404, "not_found", "no such loop");
  return env.LOOPS.get(env.LOOPS.idFromName(loopId));
}

/** The loop id inside a lease id (`<loop id>-L<fencing token>`). */
export function loopIdOfLease(leaseId: string): string {
  const match = /^(lp_[0-9a-f]{24})-L\d{1,15}$/.exec(leaseId);
  if (!match?.[1]) throw new ApiError(404, "lease_not_found", "no such lease");
  return match[1];
}
