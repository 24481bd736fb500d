import { describe, expect, it } from "vitest";
import { grantLease, leaseRefusal, releaseLease, renewLease, reportObservation } from "#shared/engine/index.js";
import { LoopHarness, observationOf, requestHashOf } from "./engine-harness.js";

// A lease belongs to the token that took it (DESIGN §11): the engine records its holder with the grant,
// and refuses a heartbeat, a release or a report from another holder (`lease_not_yours`, nothing
// appended). A verifier re-running the log names no holder and is not checked; a lease granted before
// holders were recorded is anyone's of the team, as it was.

const HOLDER = "tk_00000000000000aa";
const THIEF = "tk_00000000000000bb";

function leasedBy(holder: string | undefined) {
  const harness = new LoopHarness(["suite.a"]);
  harness.propose("c1");
  const granted = harness.apply(grantLease(harness.state, { runner_id: "gpu-box", labels: {}, at: harness.now(), ttl_ms: 60_000, holder }));
  if (!granted.ok || !granted.value) throw new Error("no lease");
  return { harness, lease: { lease_id: granted.value.lease_id, fencing_token: granted.value.fencing_token } };
}

describe("lease holders", () => {
  it("records the holder in lease_granted", () => {
    const { harness } = leasedBy(HOLDER);
    expect(harness.events.find((event) => event.type === "lease_granted")?.data).toMatchObject({ holder: HOLDER, runner_id: "gpu-box" });
  });

  it("refuses another holder's heartbeat, release and report, appending nothing; the holder's own are accepted", () => {
    const { harness, lease } = leasedBy(HOLDER);
    const observation = observationOf([]);
    const report = (holder: string) =>
      reportObservation(harness.state, { ...lease, observation, request_hash: requestHashOf(observation), at: harness.now(), holder });
    for (const outcome of [
      renewLease(harness.state, { ...lease, at: harness.now(), ttl_ms: 60_000, holder: THIEF }),
      releaseLease(harness.state, { ...lease, at: harness.now(), holder: THIEF }),
      report(THIEF),
    ]) {
      expect(outcome).toMatchObject({ ok: false, error: { code: "lease_not_yours" } });
    }
    expect(leaseRefusal(harness.state, { lease_id: lease.lease_id, holder: THIEF })?.code).toBe("lease_not_yours");
    expect(leaseRefusal(harness.state, { lease_id: lease.lease_id, holder: HOLDER })).toBeNull();
    expect(leaseRefusal(harness.state, { lease_id: "lp_0123456789abcdef01234567-L99", holder: HOLDER })?.code).toBe("lease_not_found");
    expect(renewLease(harness.state, { ...lease, at: harness.now(), ttl_ms: 60_000, holder: HOLDER }).ok).toBe(true);
    expect(harness.apply(report(HOLDER))).toMatchObject({ ok: true, value: { decision: "promoted" } });
  });

  it("does not hand a holder's lease to another token that claims the same runner id", () => {
    const { harness, lease } = leasedBy(HOLDER);
    expect(grantLease(harness.state, { runner_id: "gpu-box", labels: {}, at: harness.now(), ttl_ms: 60_000, holder: THIEF })).toEqual({
      ok: true,
      events: [],
      value: null,
    });
    const again = grantLease(harness.state, { runner_id: "gpu-box", labels: {}, at: harness.now(), ttl_ms: 60_000, holder: HOLDER });
    expect(again.ok && again.value?.lease_id).toBe(lease.lease_id);
  });

  it("a verifier naming no holder, and a lease from before holders, are not checked", () => {
    const { harness, lease } = leasedBy(HOLDER);
    expect(releaseLease(harness.state, { ...lease, at: harness.now() }).ok).toBe(true);
    const old = leasedBy(undefined);
    expect(releaseLease(old.harness.state, { ...old.lease, at: old.harness.now(), holder: THIEF }).ok).toBe(true);
  });
});
