import { compactTests, testBaseOf } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract } from "#shared/wire/contract.js";
import type { FullObservation } from "#shared/wire/observation.js";
import type { Client } from "../../runner/src/coordinator/client.js";

// A loop driven through the coordinator's API as a runner drives it (propose, lease, report; as
// bench/scale.ts does), so a test decides when each event happens: for `watch` and the dashboard's live
// page. Every evaluation fails the same test as t0, so each candidate is rejected and the loop runs on
// until the test stops it.

const CONTRACT = Contract.parse({
  name: "api-driven",
  mode: "check_fixpoint",
  gates: [{ name: "unit", run: "true", tests: { junit: "out/junit.xml" } }],
  agent: { run: "true" },
  stop: { max_iterations: 1_000, no_progress: 1_000 },
});

const IDS = ["suite::parses_empty", "suite::parses_nested", "suite::rounds_half_up"];
const OBSERVATION: FullObservation = {
  gates: [{ name: "unit", exit_code: 1, signal: null, timed_out: false, duration_ms: 5, log: null }],
  tests: { passing: IDS.slice(1), failing: IDS.slice(0, 1) },
};
/** What a runner reports for that observation: the difference from t0's collected set. */
const REPORTED = { ...OBSERVATION, tests: compactTests(OBSERVATION.tests, testBaseOf(OBSERVATION.tests)) };

/** A loop named `name` (its idempotency key too), with t0 measured already: nothing for a runner to do first. */
export async function createApiLoop(client: Client, name: string): Promise<string> {
  const created = await client.createLoop({
    idempotency_key: `api-loop-${name}`,
    contract: { ...CONTRACT, name },
    t0: { commit: sha256Hex(`${name} t0`).slice(0, 40), observation: OBSERVATION },
  });
  return created.loop.loop_id;
}

/** Proposes a candidate (`key`) and leases it as `runnerId`, as a runner does before it evaluates: its report is the caller's to send. */
export async function proposeAndLease(
  client: Client,
  loopId: string,
  key: string,
  runnerId = "api-loop",
): Promise<{ candidateId: string; report: () => ReturnType<Client["report"]> }> {
  const proposed = await client.proposeCandidate(loopId, {
    idempotency_key: `api-loop-${key}`,
    commit: sha256Hex(key).slice(0, 40),
    diff_sha256: sha256Hex(`diff ${key}`),
    empty: false,
    proposer: { kind: "command", command: "true" },
    agent: { exit_code: 0, timed_out: false, duration_ms: 1 },
  });
  const lease = await client.leaseJob(loopId, { runner_id: runnerId });
  if (lease?.job.candidate_id !== proposed.candidate.candidate_id) throw new Error(`no lease of ${proposed.candidate.candidate_id}`);
  return {
    candidateId: proposed.candidate.candidate_id,
    report: () => client.report(lease.lease_id, { fencing_token: lease.fencing_token, observation: REPORTED }),
  };
}

/** One full iteration: proposed, leased, reported, and judged (rejected). */
export async function iterate(client: Client, loopId: string, key: string, runnerId?: string): Promise<void> {
  await (await proposeAndLease(client, loopId, key, runnerId)).report();
}
