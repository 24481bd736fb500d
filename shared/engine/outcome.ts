import type { EventDraft } from "./events.js";

// What an engine command answers (commands.ts, lease-commands.ts): the events to append with a value, or
// an expected refusal as a value that changes nothing.

/** An expected refusal, with a stable code the HTTP layer maps to a status. */
export interface EngineError {
  code:
    | "loop_halted"
    | "idempotency_conflict"
    | "lease_not_found"
    | "lease_not_yours"
    | "stale_lease"
    | "already_reported"
    | "invalid_observation"
    | "confirm_inapplicable"
    | "confirm_stale"
    | "confirm_not_yours"
    | "confirm_recorded"
    | "labels_unsatisfied"
    | "awaiting_baseline"
    | "not_a_best"
    | "candidate_not_found"
    | "not_awaiting_review";
  message: string;
}

/** A command's result: events to append and a value, or a refusal that changes nothing. */
export type Outcome<T> = { ok: true; events: EventDraft[]; value: T } | { ok: false; error: EngineError };

/** A refusal with its code and message, as a command answers it. */
export function refuse(code: EngineError["code"], message: string): { ok: false; error: EngineError } {
  return { ok: false, error: { code, message } };
}

/** An ISO time `ms` later. */
export function addMs(iso: string, ms: number): string {
  return new Date(Date.parse(iso) + ms).toISOString();
}
