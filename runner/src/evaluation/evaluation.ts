import type { Gate } from "#shared/wire/contract.js";
import type { ArtifactRef, FullObservation, GateResult } from "#shared/wire/observation.js";

// What an evaluation answers and what its caller hears meanwhile: the types `evaluate.ts` produces and
// the clones it runs in carry (an evaluation begun ahead of its lease), kept apart so neither imports the other.

/** An observation and the gate logs it cites, still to be uploaded. */
export interface Evaluation {
  observation: FullObservation;
  logs: { ref: ArtifactRef; bytes: Buffer }[];
}

/** What a gate's progress line shows. */
export interface GateProgress {
  gate: Gate;
  result: GateResult;
  tests: { passing: number; failing: number } | null;
  metricErrors: string[];
}

/** What a caller hears while gates run (progress lines, live status). */
export interface GateHooks {
  onGateStart?: (gate: Gate) => void;
  onGate?: (progress: GateProgress) => void;
  /** Anything else worth a progress line (e.g. an unreadable coverage report). */
  onNote?: (text: string) => void;
}

/**
 * An evaluation begun before the job it serves was leased (the proposer's own candidate, evaluated while
 * its proposal is in flight): adopted by the leased job, which then hears what it said so far and from
 * then on, or stopped unused.
 */
export interface EvaluationAhead {
  result: Promise<Evaluation>;
  /** Settles once its first gate has started (or it ended without one). */
  started: Promise<void>;
  /** Sends what the evaluation said so far, and everything from now, to `hooks`. */
  adopt(hooks: GateHooks): void;
  /** Kills its commands (a job lost, or never leased); `result` then settles. */
  stop(reason?: unknown): void;
}

/**
 * Hooks that hold every call until `bind` names where they go, then replay them there in order: the
 * progress lines of an evaluation begun before its label (the candidate's id) was known.
 */
export function heldHooks(): { hooks: Required<GateHooks>; bind(target: GateHooks): void } {
  let target: GateHooks | null = null;
  const held: ((to: GateHooks) => void)[] = [];
  const call = (forward: (to: GateHooks) => void) => (target ? forward(target) : held.push(forward));
  return {
    hooks: {
      onGateStart: (gate) => call((to) => to.onGateStart?.(gate)),
      onGate: (progress) => call((to) => to.onGate?.(progress)),
      onNote: (text) => call((to) => to.onNote?.(text)),
    },
    bind(to) {
      target = to;
      for (const forward of held.splice(0)) forward(to);
    },
  };
}
