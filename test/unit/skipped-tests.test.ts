import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { describeFailingChange, foldEvents, type LoopState } from "#shared/engine/index.js";
import type { ContractInput } from "#shared/wire/contract.js";
import type { FullObservation } from "#shared/wire/observation.js";
import { LoopHarness, passingIds } from "./engine-harness.js";

// DESIGN §6.4: test outcomes are passed, failed or skipped, and only passed counts as passing. A test
// t0 ran that a candidate skips or no longer collects is metric_integrity_violation: a skipped or
// deselected failure is never a fix. Judged from the gates' test reports, whatever their exit codes.

const IDS = ["t::a", "t::b", "t::c", "t::d"] as const;
const [A, B, C, D] = IDS;
const REPORTED: Partial<ContractInput> = { gates: [{ name: "unit", run: "pytest --junitxml=out/junit.xml", tests: { junit: "out/junit.xml" } }] };

type Outcome = "passed" | "failed" | "skipped" | "absent";

/** An observation of one reporting gate; `exit` defaults to what the outcomes imply, but a gate may lie. */
function observed(outcomes: Partial<Record<string, Outcome>>, exit?: number): FullObservation {
  const of = (wanted: Outcome) =>
    Object.entries(outcomes)
      .filter(([, outcome]) => outcome === wanted)
      .map(([id]) => id);
  const failing = of("failed");
  return {
    gates: [{ name: "unit", exit_code: exit ?? (failing.length > 0 ? 1 : 0), signal: null, timed_out: false, duration_ms: 5, log: null }],
    tests: { passing: of("passed"), failing, skipped: of("skipped") },
  };
}

/** A loop whose t0 ran A (passing) and B (failing), and skipped D. */
function loop(overrides: Partial<ContractInput> = {}): LoopHarness {
  const harness = new LoopHarness([B], { ...REPORTED, ...overrides });
  const created = harness.events[0];
  if (created?.type !== "loop_created") throw new Error("no loop_created");
  created.data.t0.observation = observed({ [A]: "passed", [B]: "failed", [D]: "skipped" });
  harness.state = foldEvents([created]) ?? harness.state;
  return harness;
}

function evaluate(harness: LoopHarness, observation: FullObservation) {
  harness.propose(`c${harness.events.length}`);
  const leased = harness.lease();
  if (!leased.ok || !leased.value) throw new Error("no lease");
  const outcome = harness.report(leased.value, observation);
  if (!outcome.ok) throw new Error(outcome.error.code);
  return outcome.value;
}

describe("skipped and deselected tests (DESIGN §6.4)", () => {
  it.each<[string, Partial<Record<string, Outcome>>, string]>([
    [
      "the failing test is skipped (a conftest.py marks it skip; a runner config's name pattern excludes it)",
      { [A]: "passed", [B]: "skipped", [D]: "skipped" },
      `1 test(s) that t0 ran are skipped now (a skipped test is never a fix): ${B}`,
    ],
    ["a passing test is skipped", { [A]: "skipped", [B]: "passed", [D]: "skipped" }, `skipped now (a skipped test is never a fix): ${A}`],
    ["the failing test is deselected (no longer collected)", { [A]: "passed", [D]: "skipped" }, `1 collected test(s) disappeared: ${B}`],
  ])("green gates halt metric_integrity_violation (13) when %s", (_name, outcomes, detail) => {
    const harness = loop();
    const verdict = evaluate(harness, observed(outcomes));
    expect(verdict).toMatchObject({ decision: "rejected", reason: "guard_violated" });
    expect(harness.state.halt).toMatchObject({ halt_reason: "metric_integrity_violation", exit_class: 13, detail: expect.stringContaining(detail) });
  });

  it("a test t0 already skipped may stay skipped; the honest fix succeeds", () => {
    const harness = loop();
    expect(evaluate(harness, observed({ [A]: "passed", [B]: "passed", [D]: "skipped" }))).toMatchObject({ decision: "promoted" });
    expect(harness.state.halt?.halt_reason).toBe("success_condition_met");
  });

  it("tests_never_shrink: false opts out: the contract still runs, and a deselected test no longer halts it", () => {
    const harness = loop({ guards: { tests_never_shrink: false } });
    evaluate(harness, observed({ [A]: "passed", [D]: "skipped" }));
    expect(harness.state.halt?.halt_reason).toBe("success_condition_met");
  });

  it("counts failing tests and gates apart in the verdict, as the gates' own lines count tests", () => {
    const harness = loop();
    expect(evaluate(harness, observed({ [A]: "passed", [B]: "failed", [C]: "failed", [D]: "skipped" }))).toMatchObject({
      reason: "no_improvement",
      detail: "failing tests 1 → 2, gates 1 → 1, not fewer",
    });
    expect(describeFailingChange(["gate:check"], [])).toBe("failing gates 1 → 0");
    expect(describeFailingChange(["task:one", "task:two", "gate:unit"], ["task:two"])).toBe("failing gates 1 → 0, tasks 2 → 1");
  });

  it("property: no sequence of observations in which a test t0 ran becomes skipped or uncollected ends in success_condition_met", () => {
    const outcome = fc.constantFrom<Outcome>("passed", "failed", "skipped", "absent");
    const step = fc.record({
      outcomes: fc.record({ [A]: outcome, [B]: outcome, [C]: outcome, [D]: outcome }),
      // The gate's exit code need not agree with its report: a rewritten check may exit 0 whatever ran.
      exit: fc.constantFrom<number | undefined>(undefined, 0),
    });
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 10 }), fc.constantFrom<"halt" | "reject">("halt", "reject"), (steps, onViolation) => {
        const harness = loop({ guards: { on_violation: onViolation } });
        for (const { outcomes, exit } of steps) {
          if (harness.state.halt) break;
          const dropped = [A, B].some((id) => outcomes[id] === "skipped" || outcomes[id] === "absent");
          const verdict = evaluate(harness, observed(outcomes, exit));
          if (dropped) {
            expect(verdict).toMatchObject({ decision: "rejected", reason: "guard_violated" });
            expect((harness.state as LoopState).halt?.halt_reason ?? null).not.toBe("success_condition_met");
          }
        }
        // Whatever the history, a loop that succeeded got there with both tests t0 ran passing (the
        // state is read afresh: the `break` above narrowed its type, not its value).
        const state = harness.state as LoopState;
        if (state.halt?.halt_reason === "success_condition_met") expect(passingIds(state.best, state.t0_base)).toEqual(expect.arrayContaining([A, B]));
      }),
      { numRuns: 300 },
    );
  });
});
