import { compactTests, testBaseOf, type Proposal } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract } from "#shared/wire/contract.js";
import type { FullObservation, Observation } from "#shared/wire/observation.js";

// A loop of thousands of decided candidates, planned (issue 27: the dashboard at scale): check_fixpoint
// over a suite of SEED_TESTS ids, SEED_T0_FAILING of them failing at t0. Every candidate reports the
// best-so-far's failing set (rejected, no_improvement), except every SEED_PROMOTE_EVERY-th, which fixes
// one more test (promoted, fewer_failures): 40 promotions in 5,000. Seeded through a coordinator's API
// (seed-candidates.ts, for bench/dashboard.ts) or inside the loop's object (test/worker/dashboard-scale.test.ts).

/**
 * The suite's size, and how many of its tests fail at t0: with a promotion every SEED_PROMOTE_EVERY
 * candidates, the loop's best still fails tests (so it never halts on success) up to 5,999 candidates.
 */
export const SEED_TESTS = 50;
export const SEED_T0_FAILING = 48;
/** Every this-many-th candidate is promoted. */
export const SEED_PROMOTE_EVERY = 125;

const IDS = Array.from({ length: SEED_TESTS }, (_, index) => `tests/test_dashboard_${index % 7}.py::TestScale::test_case_${index}`);

/** The contract of a seeded loop: limits far past any seeding, so the loop never halts on them while seeded. */
export const SEED_CONTRACT = Contract.parse({
  name: "dashboard-scale",
  mode: "check_fixpoint",
  objective: "a loop of thousands of candidates, for the dashboard's bounds",
  gates: [{ name: "unit", run: "true", tests: { junit: "out/junit.xml" } }],
  agent: { run: "true" },
  stop: { max_iterations: 100_000, no_progress: 100_000 },
});

/** An observation in which the first `failing` tests of the suite fail. */
function fullObservation(failing: number): FullObservation {
  return {
    gates: [{ name: "unit", exit_code: failing > 0 ? 1 : 0, signal: null, timed_out: false, duration_ms: 5, log: null }],
    tests: { passing: IDS.slice(failing), failing: IDS.slice(0, failing) },
  };
}

/** t0's observation: SEED_T0_FAILING of the suite failing. */
export const SEED_T0 = fullObservation(SEED_T0_FAILING);
const T0_BASE = testBaseOf(SEED_T0.tests);
const reported = new Map<number, Observation>();
/** What a runner reports for `failing` failing tests: the difference from t0's collected set (computed once per count). */
export function seedReport(failing: number): Observation {
  const known = reported.get(failing);
  if (known) return known;
  const full = fullObservation(failing);
  const observation: Observation = { ...full, tests: compactTests(full.tests, T0_BASE) };
  reported.set(failing, observation);
  return observation;
}

/** The proposal of a seeded candidate named `key`: an agent run that changed something. */
export function seedProposal(key: string): Proposal {
  return {
    idempotency_key: `seed-${key}`,
    commit: sha256Hex(`commit ${key}`).slice(0, 40),
    diff_sha256: sha256Hex(`diff ${key}`),
    empty: false,
    proposer: { kind: "command", command: "true" },
    agent: { exit_code: 0, timed_out: false, duration_ms: 1 },
  };
}
