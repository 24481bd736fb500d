import { describe, expect, it } from "vitest";
import {
  awaitingBaselineLine,
  baselineLeaseRefusal,
  expireBaselineLease,
  foldEvents,
  grantBaselineLease,
  recordBaseline,
  releaseBaselineLease,
  renewBaselineLease,
  type PendingBaseline,
} from "#shared/engine/index.js";
import { canonicalJson } from "#shared/canonical-json.js";
import { sha256Hex } from "#shared/hash.js";
import { commitOf, contractOf, observationOf, requestHashOf } from "./engine-harness.js";

// t0 as a leased job (DESIGN §11): a loop requested with t0's commit alone waits for a runner whose labels
// satisfy the contract's; only that lease's holder, under its fencing token, may report the baseline, and
// the loop is created from that report with the runner named in `loop_created`.

const HOLDER = "tk_00000000000000aa";
const OTHER = "tk_00000000000000bb";
const T0 = "2026-12-02T10:00:00.000Z";
const at = (seconds: number) => new Date(Date.parse(T0) + seconds * 1_000).toISOString();

function pendingOf(labels: Record<string, string> = { gpu: "h100" }): PendingBaseline {
  const contract = contractOf({ evaluate: { labels } });
  return {
    loop_id: "lp_0123456789abcdef01234567",
    contract,
    contract_hash: sha256Hex(canonicalJson(contract)),
    commit: commitOf("t0"),
    requested_at: T0,
    fencing_counter: 0,
    lease: null,
  };
}

const GPU = { runner_id: "gpu-box", labels: { gpu: "h100" }, holder: HOLDER, ttl_ms: 60_000 };

describe("a baseline measured on a lease", () => {
  it("is leased only to a runner with the contract's labels, one at a time, and the same lease back on a retry", () => {
    const pending = pendingOf();
    expect(grantBaselineLease(pending, { ...GPU, labels: {}, at: at(0) })).toBeNull();
    expect(grantBaselineLease(pending, { ...GPU, labels: { gpu: "a100" }, at: at(0) })).toBeNull();
    const granted = grantBaselineLease(pending, { ...GPU, at: at(0) });
    expect(granted?.lease).toMatchObject({ lease_id: "lp_0123456789abcdef01234567-B1", runner_id: "gpu-box", holder: HOLDER, fencing_token: 1 });
    const held = granted?.pending ?? pending;
    // Another runner with the labels waits while the lease lives; the holder asking again gets it back.
    expect(grantBaselineLease(held, { ...GPU, runner_id: "gpu-box-2", holder: OTHER, at: at(10) })).toBeNull();
    expect(grantBaselineLease(held, { ...GPU, at: at(10) })?.lease.lease_id).toBe("lp_0123456789abcdef01234567-B1");
    expect(awaitingBaselineLine({ ...viewOf(held) })).toBe(`runner gpu-box is measuring the baseline at ${commitOf("t0").slice(0, 10)}`);
    expect(awaitingBaselineLine({ ...viewOf(pending) })).toBe(`waiting for a runner with gpu=h100 to measure the baseline at ${commitOf("t0").slice(0, 10)}`);
  });

  it("goes back to the queue when its lease expires or is released, under a higher fencing token", () => {
    const granted = grantBaselineLease(pendingOf(), { ...GPU, at: at(0) });
    if (!granted) throw new Error("no lease");
    const lease = { lease_id: granted.lease.lease_id, fencing_token: 1 };
    expect(expireBaselineLease(granted.pending, at(30))).toBe(granted.pending);
    const expired = expireBaselineLease(granted.pending, at(60));
    expect(expired.lease).toBeNull();
    const next = grantBaselineLease(expired, { ...GPU, runner_id: "gpu-box-2", holder: OTHER, at: at(61) });
    expect(next?.lease).toMatchObject({ lease_id: "lp_0123456789abcdef01234567-B2", fencing_token: 2, holder: OTHER });
    // The first holder's lease is stale now: no heartbeat, release or report under it.
    const observation = observationOf([]);
    const report = { ...lease, holder: HOLDER, observation, request_hash: requestHashOf(observation), at: at(62) };
    expect(renewBaselineLease(next?.pending ?? expired, { ...report, ttl_ms: 60_000 })).toMatchObject({ ok: false, error: { code: "stale_lease" } });
    expect(recordBaseline(next?.pending ?? expired, report)).toMatchObject({ ok: false, error: { code: "stale_lease" } });
    const released = releaseBaselineLease(granted.pending, { ...lease, holder: HOLDER });
    expect(released.ok && released.value.pending.lease).toBeNull();
  });

  it("refuses another token's heartbeat, release, evidence and report, changing nothing", () => {
    const granted = grantBaselineLease(pendingOf(), { ...GPU, at: at(0) });
    if (!granted) throw new Error("no lease");
    const lease = { lease_id: granted.lease.lease_id, fencing_token: 1 };
    const observation = observationOf([]);
    for (const outcome of [
      renewBaselineLease(granted.pending, { ...lease, holder: OTHER, at: at(5), ttl_ms: 60_000 }),
      releaseBaselineLease(granted.pending, { ...lease, holder: OTHER }),
      recordBaseline(granted.pending, { ...lease, holder: OTHER, observation, request_hash: requestHashOf(observation), at: at(5) }),
    ]) {
      expect(outcome).toMatchObject({ ok: false, error: { code: "lease_not_yours" } });
    }
    expect(baselineLeaseRefusal(granted.pending, { lease_id: lease.lease_id, holder: OTHER })?.code).toBe("lease_not_yours");
    expect(baselineLeaseRefusal(granted.pending, { lease_id: lease.lease_id, holder: HOLDER })).toBeNull();
    expect(baselineLeaseRefusal(null, { lease_id: lease.lease_id, holder: HOLDER })?.code).toBe("stale_lease");
  });

  it("creates the loop from its holder's report, naming the runner that measured t0", () => {
    const granted = grantBaselineLease(pendingOf(), { ...GPU, at: at(0) });
    if (!granted) throw new Error("no lease");
    const observation = observationOf(["suite.a"]);
    const request_hash = requestHashOf(observation);
    const outcome = recordBaseline(granted.pending, {
      lease_id: granted.lease.lease_id,
      fencing_token: 1,
      holder: HOLDER,
      observation,
      request_hash,
      at: at(20),
    });
    if (!outcome.ok) throw new Error(outcome.error.message);
    expect(outcome.events.map((event) => event.type)).toEqual(["loop_created"]);
    const state = foldEvents(outcome.events);
    expect(state?.t0.commit).toBe(commitOf("t0"));
    expect(state?.t0.failing).toEqual(["gate:unit", "suite.a"]);
    expect(state?.t0_measured_by).toEqual({ runner_id: "gpu-box", holder: HOLDER, lease_id: granted.lease.lease_id, fencing_token: 1, request_hash });
  });

  it("creates a loop already halted when t0 meets the goal, as a creator's own baseline would", () => {
    const granted = grantBaselineLease(pendingOf({}), { ...GPU, labels: {}, at: at(0) });
    if (!granted) throw new Error("no lease");
    const observation = observationOf([]);
    const outcome = recordBaseline(granted.pending, {
      lease_id: granted.lease.lease_id,
      fencing_token: 1,
      holder: HOLDER,
      observation,
      request_hash: requestHashOf(observation),
      at: at(5),
    });
    expect(outcome.ok && outcome.events.map((event) => event.type)).toEqual(["loop_created", "halted"]);
  });
});

function viewOf(pending: PendingBaseline) {
  return {
    loop_id: pending.loop_id,
    name: pending.contract.name,
    contract_hash: pending.contract_hash,
    commit: pending.commit,
    labels: pending.contract.evaluate?.labels ?? {},
    requested_at: pending.requested_at,
    lease: pending.lease ? { runner_id: pending.lease.runner_id, granted_at: pending.lease.granted_at, expires_at: pending.lease.expires_at } : null,
  };
}
