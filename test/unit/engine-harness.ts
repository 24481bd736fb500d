import {
  type TestBase,
  type TestStanding,
  applyEvent,
  createLoop,
  expireLeases,
  foldEvents,
  grantLease,
  proposeCandidate,
  releaseLease,
  renewLease,
  reportObservation,
  sealEvent,
  type AgentRun,
  type ChainHead,
  type EventDraft,
  type LoopEvent,
  type GrantedLease,
  type LoopState,
  type Outcome,
  type Proposal,
  type ReportAnswer,
  type Verdict,
} from "#shared/engine/index.js";
import { canonicalJson } from "#shared/canonical-json.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract, type ContractInput, type Labels } from "#shared/wire/contract.js";
import type { FullObservation, Observation } from "#shared/wire/observation.js";

// A driver for the pure engine: it plays the LoopObject's part (apply the events a command answers)
// with a fake clock, so each test reads as a short history of what a runner and an agent did.

/** The suite the fixtures measure: a fixed set of test ids. */
export const TEST_IDS = ["suite.a", "suite.b", "suite.c", "suite.d", "suite.e"] as const;

/** A check_fixpoint contract; `stop` and `mode` may be overridden. */
export function contractOf(overrides: Partial<ContractInput> = {}): Contract {
  return Contract.parse({
    name: "fixture",
    mode: "check_fixpoint",
    gates: [{ name: "unit", run: "npm test" }],
    agent: { run: "agent --one-change" },
    ...overrides,
  });
}

/** An observation of `TEST_IDS` (or `all`) where exactly `failing` fail. */
export function observationOf(failing: readonly string[], all: readonly string[] = TEST_IDS): FullObservation {
  return {
    gates: [{ name: "unit", exit_code: failing.length > 0 ? 1 : 0, signal: null, timed_out: false, duration_ms: 120, log: null }],
    tests: { passing: all.filter((id) => !failing.includes(id)), failing: [...failing] },
  };
}

/** A 40-hex commit id derived from a label, so each candidate has its own commit. */
export function commitOf(label: string): string {
  return sha256Hex(`commit ${label}`).slice(0, 40);
}

export const AGENT_OK: AgentRun = { exit_code: 0, timed_out: false, duration_ms: 1_000 };
export const AGENT_FAILED: AgentRun = { exit_code: 2, timed_out: false, duration_ms: 1_000 };

/** A proposal; the idempotency key defaults to one derived from the commit label. */
export function proposalOf(label: string, change: Partial<Proposal> = {}): Proposal {
  return {
    idempotency_key: `key-${label}`,
    commit: commitOf(label),
    diff_sha256: sha256Hex(`diff ${label}`),
    empty: false,
    proposer: { kind: "command", command: "agent --one-change" },
    agent: AGENT_OK,
    ...change,
  };
}

/** The request hash a route would compute for a body. */
export function requestHashOf(value: unknown): string {
  return sha256Hex(JSON.stringify(value));
}

const START = Date.parse("2026-03-01T09:00:00.000Z");

/** One loop driven through the engine's commands, recording every event it appends. */
export class LoopHarness {
  readonly events: EventDraft[] = [];
  /** The state after each append, as the LoopObject would hold it. */
  state: LoopState;
  private clock = START;

  /** `t0` adds to t0's observation (e.g. how its evaluation was confined). */
  constructor(t0Failing: readonly string[], overrides: Partial<ContractInput> = {}, t0: Partial<FullObservation> = {}) {
    const contract = contractOf(overrides);
    const outcome = createLoop({
      loop_id: "lp_0123456789abcdef01234567",
      contract,
      // As the coordinator pins it: the hash of the contract's canonical JSON, so a verifier recomputes it.
      contract_hash: sha256Hex(canonicalJson(contract)),
      t0: { commit: commitOf("t0"), observation: { ...observationOf(t0Failing), ...t0 } },
      at: this.now(),
    });
    if (!outcome.ok) throw new Error(outcome.error.message);
    let state: LoopState | null = null;
    for (const event of outcome.events) state = applyEvent(state, event);
    if (!state) throw new Error("createLoop appended nothing");
    this.state = state;
    this.events.push(...outcome.events);
  }

  /** The current time, advanced by `ms` first. */
  now(ms = 1_000): string {
    this.clock += ms;
    return new Date(this.clock).toISOString();
  }

  /** Applies an outcome's events (when it succeeded) and returns it unchanged. */
  apply<T>(outcome: Outcome<T>): Outcome<T> {
    if (outcome.ok) this.append(outcome.events);
    return outcome;
  }

  append(events: readonly EventDraft[]): void {
    for (const event of events) this.state = applyEvent(this.state, event);
    this.events.push(...events);
  }

  propose(label: string, change: Partial<Proposal> = {}, requestHash?: string): Outcome<{ candidate_id: string; replayed: boolean }> {
    const proposal = proposalOf(label, change);
    return this.apply(proposeCandidate(this.state, proposal, { request_hash: requestHash ?? requestHashOf(proposal), at: this.now() }));
  }

  lease(runnerId = "runner-1", ttlMs = 60_000, labels: Labels = {}): Outcome<GrantedLease | null> {
    return this.apply(grantLease(this.state, { runner_id: runnerId, labels, at: this.now(), ttl_ms: ttlMs }));
  }

  renew(lease: { lease_id: string; fencing_token: number }, ttlMs = 60_000): Outcome<GrantedLease> {
    return this.apply(renewLease(this.state, { ...lease, at: this.now(), ttl_ms: ttlMs }));
  }

  release(lease: { lease_id: string; fencing_token: number }): Outcome<{ candidate_id: string; replayed: boolean }> {
    return this.apply(releaseLease(this.state, { ...lease, at: this.now() }));
  }

  /** Advances the clock by `ms` and reclaims whatever expired by then. */
  expire(ms: number): EventDraft[] {
    const events = expireLeases(this.state, this.now(ms));
    this.append(events);
    return events;
  }

  report(lease: { lease_id: string; fencing_token: number }, observation: Observation, requestHash?: string): Outcome<ReportAnswer> {
    return this.apply(
      reportObservation(this.state, {
        ...lease,
        observation,
        request_hash: requestHash ?? requestHashOf({ fencing_token: lease.fencing_token, observation }),
        at: this.now(),
      }),
    );
  }

  /** One full iteration with a working agent: propose (with `change`), lease, report `failing` (with `observed`); answers the verdict. */
  evaluate(label: string, failing: readonly string[], change: Partial<Proposal> = {}, observed: Partial<Observation> = {}): Verdict {
    const proposed = this.propose(label, change);
    if (!proposed.ok) throw new Error(`propose refused: ${proposed.error.code}`);
    const leased = this.lease();
    if (!leased.ok || !leased.value) throw new Error("no lease granted");
    const reported = this.report(leased.value, { ...observationOf(failing), ...observed });
    if (!reported.ok) throw new Error(`report refused: ${reported.error.code}`);
    if (reported.value.decision === "requeued") throw new Error(`report re-queued: ${reported.value.detail}`);
    return reported.value;
  }

  /** Event types appended since `from` (an index into `events`). */
  typesSince(from: number): string[] {
    return this.events.slice(from).map((event) => event.type);
  }
}

/** Every passing id of a standing, in full: for assertions (the engine itself never spells the passing set out). */
export function passingIds(standing: TestStanding, base: TestBase): string[] {
  const notPassing = new Set(standing.base_not_passing);
  return [...base.ids.filter((id) => !notPassing.has(id)), ...standing.extra_passing].sort();
}

/** The optimize metric the engine tests judge by (lower is better, 2% minimum effect, 5-40 pairs). */
export const OPTIMIZE_METRIC = { run: "node bench.js", name: "parse_ms", direction: "lower" as const, min_effect: "2%", samples: { min: 5, max: 40 } };

/** Readings around `center` with a small deterministic spread (±1%); a prefix of more readings is the same readings. */
export function readings(center: number, count: number, offset = 0): number[] {
  return Array.from({ length: count }, (_, index) => center * (1 + 0.01 * Math.sin(index + offset)));
}

/** An optimize loop whose t0 passes every test and reads 100 on OPTIMIZE_METRIC. */
export function optimizeLoop(overrides: Partial<ContractInput> = {}): LoopHarness {
  const harness = new LoopHarness([], { mode: "optimize", metric: OPTIMIZE_METRIC, ...overrides });
  const created = harness.events[0];
  if (created?.type !== "loop_created") throw new Error("no loop_created");
  created.data.t0.observation = { ...observationOf([]), samples: { best: [], candidate: readings(100, 5) } };
  harness.state = foldEvents([created]) ?? harness.state;
  return harness;
}

/** Drafts sealed into a hash chain, as the LoopObject stores them and a verifier reads them. */
export function sealedLog(drafts: readonly EventDraft[]): LoopEvent[] {
  let head: ChainHead | null = null;
  return drafts.map((draft) => {
    const event = sealEvent(draft, head);
    head = { seq: event.seq, hash: event.hash };
    return event;
  });
}
