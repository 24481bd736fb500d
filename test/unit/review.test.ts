import { describe, expect, it } from "vitest";
import { foldEvents, haltContextUnsatisfiable, nextReviewDeadline, reviewCandidate, reviewTimeouts } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import type { ContractInput } from "#shared/wire/contract.js";
import type { FullObservation, GuardReadings, Observation } from "#shared/wire/observation.js";
import { AGENT_FAILED, LoopHarness, TEST_IDS } from "./engine-harness.js";

// The human step and the context budget in the engine (docs/design.md §6.8, §6.9): an agent may only ask
// to change protected files; a person's answer (ack or reject) decides, nobody's answer halts
// human_required at the timeout, and a runner's figure halts context_budget_unsatisfiable only when the
// engine agrees it does not fit.

const [A, B] = TEST_IDS;
const TEST_FILE = "test/a.test.js";
const OTHER_FILE = "test/b.test.js";
const ORIGINAL = sha256Hex("the test as t0 had it");
const REQUEST = { files: [TEST_FILE], why: "the test expects 'colour' but the spec says 'color'" };

function readings(files: Record<string, string>): GuardReadings {
  return { protected_files: files, coverage_percent: null, contract: { hash: sha256Hex("loop.yaml") } };
}

/** A loop whose t0 fails A and B and protects two test files, as the harness drives it. */
function reviewLoop(overrides: Partial<ContractInput> = {}): LoopHarness {
  const harness = new LoopHarness([A, B], overrides);
  const created = harness.events[0];
  if (created?.type !== "loop_created") throw new Error("no loop_created");
  const t0: FullObservation = {
    gates: [{ name: "unit", exit_code: 1, signal: null, timed_out: false, duration_ms: 5, log: null }],
    tests: { passing: TEST_IDS.filter((id) => id !== A && id !== B), failing: [A, B] },
    guards: readings({ [TEST_FILE]: ORIGINAL, [OTHER_FILE]: ORIGINAL }),
  };
  created.data.t0.observation = t0;
  harness.state = foldEvents([created]) ?? harness.state;
  return harness;
}

/** Every test but A passes (B is fixed); the protected files read as given. */
function fixesB(files: Record<string, string>): Observation {
  return {
    gates: [{ name: "unit", exit_code: 1, signal: null, timed_out: false, duration_ms: 5, log: null }],
    tests: { passing: TEST_IDS.filter((id) => id !== A), failing: [A] },
    guards: readings(files),
  };
}

function answer(harness: LoopHarness, candidate_id: string, decision: "ack" | "reject", by = "tok_reviewer", note = "checked against the spec") {
  return harness.apply(reviewCandidate(harness.state, { candidate_id, decision, note, by, at: harness.now() }));
}

describe("the human step (docs/design.md §6.8)", () => {
  it("holds a candidate that asks for a review: no runner is offered it until a person answers", () => {
    const harness = reviewLoop();
    const proposed = harness.propose("fix-test", { review_request: REQUEST });
    expect(proposed).toMatchObject({ ok: true, value: { candidate_id: "c1" } });
    expect(harness.state.candidates.c1?.status).toBe("awaiting_review");
    expect(harness.lease()).toMatchObject({ ok: true, value: null });
    expect(nextReviewDeadline(harness.state)).toBe(new Date(Date.parse(harness.state.candidates.c1?.proposed_at ?? "") + 24 * 3_600_000).toISOString());
  });

  it("an ack lets exactly the requested file change: the candidate is judged and promoted, and the change becomes the new reference", () => {
    const harness = reviewLoop();
    harness.propose("fix-test", { review_request: REQUEST });
    expect(answer(harness, "c1", "ack")).toMatchObject({ ok: true, value: { replayed: false } });
    expect(harness.state.candidates.c1?.status).toBe("queued");
    const leased = harness.lease();
    if (!leased.ok || !leased.value) throw new Error("the acknowledged candidate was not leased");
    const fixed = sha256Hex("the test as the agent fixed it");
    const reported = harness.report(leased.value, fixesB({ [TEST_FILE]: fixed, [OTHER_FILE]: ORIGINAL }));
    expect(reported).toMatchObject({ ok: true, value: { decision: "promoted" } });
    expect(harness.state.halt).toBeNull();
    expect(harness.state.reviews).toEqual([expect.objectContaining({ candidate_id: "c1", decision: "ack", by: "tok_reviewer", files: [TEST_FILE] })]);

    // A later candidate that leaves the approved file as c1 left it passes the guard; one that changes it again does not.
    expect(harness.evaluate("keeps-it", [A], {}, fixesB({ [TEST_FILE]: fixed, [OTHER_FILE]: ORIGINAL }))).toMatchObject({ reason: "no_improvement" });
    expect(harness.state.halt).toBeNull();
    expect(harness.evaluate("edits-again", [A], {}, fixesB({ [TEST_FILE]: sha256Hex("weakened"), [OTHER_FILE]: ORIGINAL }))).toMatchObject({
      reason: "guard_violated",
    });
    expect(harness.state.halt).toMatchObject({ halt_reason: "blocked_path_modified", detail: expect.stringContaining(TEST_FILE) });
  });

  it("an ack admits only the files it names: another protected file changed with them still halts blocked_path_modified", () => {
    const harness = reviewLoop();
    harness.propose("fix-test", { review_request: REQUEST });
    answer(harness, "c1", "ack");
    const leased = harness.lease();
    if (!leased.ok || !leased.value) throw new Error("not leased");
    const changed = sha256Hex("changed");
    expect(harness.report(leased.value, fixesB({ [TEST_FILE]: changed, [OTHER_FILE]: changed }))).toMatchObject({
      ok: true,
      value: { decision: "rejected", reason: "guard_violated" },
    });
    expect(harness.state.halt).toMatchObject({ halt_reason: "blocked_path_modified", detail: expect.stringContaining(OTHER_FILE) });
    expect(harness.state.halt?.detail).not.toContain(TEST_FILE);
  });

  it("a reject rejects the candidate (review_rejected) with the note, and the loop goes on", () => {
    const harness = reviewLoop();
    harness.propose("fix-test", { review_request: REQUEST });
    expect(answer(harness, "c1", "reject", "owner", "the test is right")).toMatchObject({ ok: true });
    expect(harness.state.candidates.c1).toMatchObject({ status: "rejected" });
    expect(harness.events.at(-1)).toMatchObject({
      type: "verdict",
      data: { candidate_id: "c1", decision: "rejected", reason: "review_rejected", detail: expect.stringContaining("the test is right") },
    });
    expect(harness.state.halt).toBeNull();
  });

  it("the same answer again is a replay that appends nothing; another answer to an answered request is refused", () => {
    const harness = reviewLoop();
    harness.propose("fix-test", { review_request: REQUEST });
    answer(harness, "c1", "ack");
    const before = harness.events.length;
    expect(answer(harness, "c1", "ack")).toMatchObject({ ok: true, value: { replayed: true } });
    expect(answer(harness, "c1", "reject")).toMatchObject({ ok: false, error: { code: "not_awaiting_review" } });
    expect(answer(harness, "c1", "ack", "tok_someone_else")).toMatchObject({ ok: false, error: { code: "not_awaiting_review" } });
    expect(harness.events.length).toBe(before);
  });

  it("a candidate that asked for nothing, or that does not exist, cannot be answered", () => {
    const harness = reviewLoop();
    harness.propose("plain");
    expect(answer(harness, "c1", "ack")).toMatchObject({ ok: false, error: { code: "not_awaiting_review" } });
    expect(answer(harness, "c9", "ack")).toMatchObject({ ok: false, error: { code: "candidate_not_found" } });
    expect(answer(harness, "__proto__", "ack")).toMatchObject({ ok: false, error: { code: "candidate_not_found" } });
  });

  it.each([
    ["its agent failed", { agent: AGENT_FAILED }, "agent_failed"],
    ["it changed nothing", { empty: true }, "no_change"],
  ])(
    "a candidate rejected at once (%s) though it asked for a review cannot be answered: an ack never re-queues a settled candidate",
    (_name, change, reason) => {
      const harness = reviewLoop();
      harness.propose("asks", { review_request: REQUEST, ...change });
      expect(harness.state.candidates.c1).toMatchObject({ status: "rejected" });
      const before = harness.events.length;
      expect(answer(harness, "c1", "ack")).toMatchObject({ ok: false, error: { code: "not_awaiting_review", message: expect.stringContaining(reason) } });
      expect(answer(harness, "c1", "reject")).toMatchObject({ ok: false, error: { code: "not_awaiting_review" } });
      expect(harness.events.length).toBe(before);
      expect(harness.state.candidates.c1).toMatchObject({ status: "rejected" });
      expect(harness.lease()).toMatchObject({ ok: true, value: null });
      expect(reviewTimeouts(harness.state, harness.now(48 * 3_600_000))).toEqual([]);
    },
  );

  it("nobody answering halts human_required (11) at stop.review_timeout, not a moment before", () => {
    const harness = reviewLoop({ stop: { max_iterations: 50, no_progress: 10, review_timeout: "10m" } });
    harness.propose("fix-test", { review_request: REQUEST });
    expect(reviewTimeouts(harness.state, harness.now(9 * 60_000))).toEqual([]);
    const due = reviewTimeouts(harness.state, harness.now(2 * 60_000));
    expect(due.map((event) => event.type)).toEqual(["review_timed_out", "halted"]);
    harness.append(due);
    expect(harness.state.halt).toMatchObject({ halt_reason: "human_required", exit_class: 11, detail: expect.stringContaining(TEST_FILE) });
    // A late answer does not undo the halt.
    expect(answer(harness, "c1", "ack")).toMatchObject({ ok: false, error: { code: "loop_halted" } });
  });
});

describe("the context budget (docs/design.md §6.9)", () => {
  const report = (harness: LoopHarness, needed: number, budget: number) =>
    harness.apply(haltContextUnsatisfiable(harness.state, { tier: "stack_trace", needed, budget, runner_id: "runner-1", by: "tok_runner", at: harness.now() }));

  it("halts context_budget_unsatisfiable (11) when the first tier needs more than the contract's budget", () => {
    const harness = reviewLoop({ agent: { run: "agent", context: { budget: 10 } } });
    expect(report(harness, 240, 10)).toMatchObject({ ok: true });
    expect(harness.state.halt).toMatchObject({ halt_reason: "context_budget_unsatisfiable", exit_class: 11, detail: expect.stringContaining("240 tokens") });
  });

  it.each([
    ["a budget other than the contract's", 240, 100],
    ["a need that fits the budget", 8, 10],
  ])("refuses a report naming %s, and changes nothing", (_name, needed, budget) => {
    const harness = reviewLoop({ agent: { run: "agent", context: { budget: 10 } } });
    const before = harness.events.length;
    expect(report(harness, needed, budget)).toMatchObject({ ok: false, error: { code: "invalid_observation" } });
    expect(harness.events.length).toBe(before);
    expect(harness.state.halt).toBeNull();
  });

  it("without agent.context the default budget of 32,000 tokens applies", () => {
    const harness = reviewLoop();
    expect(report(harness, 32_000, 32_000)).toMatchObject({ ok: false });
    expect(report(harness, 32_001, 32_000)).toMatchObject({ ok: true });
  });
});
