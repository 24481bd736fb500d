import { describe, expect, it } from "vitest";
import { cancelLoop, grantLease, renewLease, type EventDraft } from "#shared/engine/index.js";
import { rederive } from "#shared/receipts/verify.js";
import { LoopHarness, sealedLog } from "./engine-harness.js";

// A person cancels a loop (DESIGN §7: `cancelled`, exit class 11). The request is an input recorded in
// the log, and the halt is the engine's answer to it: a verifier re-derives the halt from the request,
// and a cancel halt with no request before it is a forgery.

const ADMIN = "tk_00000000000000aa";

describe("cancelling a loop", () => {
  it("records who asked and why, then halts with cancelled (exit class 11); its leases are over", () => {
    const harness = new LoopHarness(["suite.a"]);
    harness.propose("c1");
    const leased = harness.lease();
    if (!leased.ok || !leased.value) throw new Error("no lease");
    const from = harness.events.length;
    const outcome = harness.apply(cancelLoop(harness.state, { by: ADMIN, reason: "  wrong branch  ", at: harness.now() }));
    expect(outcome).toMatchObject({ ok: true, value: { replayed: false } });
    expect(harness.typesSince(from)).toEqual(["cancel_requested", "halted"]);
    expect(harness.events.at(-2)?.data).toEqual({ by: ADMIN, reason: "wrong branch" });
    expect(harness.state.halt).toEqual({ halt_reason: "cancelled", exit_class: 11, detail: `cancelled by ${ADMIN}: wrong branch` });
    // The runner holding c1 is told to stop at its next heartbeat; nothing more is leased.
    const renewed = renewLease(harness.state, {
      lease_id: leased.value.lease_id,
      fencing_token: leased.value.fencing_token,
      at: harness.now(61_000),
      ttl_ms: 60_000,
    });
    expect(renewed).toMatchObject({ ok: false, error: { code: "loop_halted" } });
    expect(grantLease(harness.state, { runner_id: "runner-2", labels: {}, at: harness.now(), ttl_ms: 60_000 })).toMatchObject({ ok: true, value: null });
  });

  it("answers a second cancel as the first, appending nothing, and leaves another halt as it was", () => {
    const harness = new LoopHarness(["suite.a"]);
    harness.apply(cancelLoop(harness.state, { by: ADMIN, at: harness.now() }));
    expect(cancelLoop(harness.state, { by: "owner", at: harness.now() })).toEqual({ ok: true, events: [], value: { replayed: true } });
    const converged = new LoopHarness(["suite.a"]);
    converged.evaluate("c1", []);
    expect(converged.state.halt?.halt_reason).toBe("success_condition_met");
    expect(cancelLoop(converged.state, { by: ADMIN, at: converged.now() })).toMatchObject({ ok: false, error: { code: "loop_halted" } });
  });

  it("a verifier re-derives the cancel's halt, and refuses a cancel halt nobody asked for, or one with another reason", () => {
    const harness = new LoopHarness(["suite.a"]);
    harness.evaluate("c1", ["suite.a"], {}, {});
    harness.apply(cancelLoop(harness.state, { by: ADMIN, reason: "enough", at: harness.now() }));
    expect(rederive(sealedLog(harness.events))).toMatchObject({ ok: true });

    // The halt alone, without the request that the engine answers with it.
    const forged = harness.events.filter((event) => event.type !== "cancel_requested");
    expect(rederive(sealedLog(forged))).toMatchObject({ ok: false, detail: expect.stringContaining("which the engine did not produce here") });
    // The request answered with another halt than the engine's.
    const altered = harness.events.map((event) =>
      event.type === "halted" ? { ...event, data: { ...event.data, detail: "cancelled by nobody" } } : event,
    ) as EventDraft[];
    expect(rederive(sealedLog(altered))).toMatchObject({ ok: false, detail: expect.stringContaining("recomputed") });
    // A cancel after the halt.
    const late = [...harness.events, { type: "cancel_requested", at: harness.now(), data: { by: ADMIN } } as EventDraft];
    expect(rederive(sealedLog(late))).toMatchObject({ ok: false, detail: expect.stringContaining("cannot be applied") });
  });
});
