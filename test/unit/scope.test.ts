import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { foldEvents, inScope, outOfScope, type Halt, type LoopState } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract, type ContractInput } from "#shared/wire/contract.js";
import { MAX_CHANGED_PATHS, type GuardReadings, type Observation } from "#shared/wire/observation.js";
import { commitOf, LoopHarness, observationOf } from "./engine-harness.js";

// The scope (DESIGN §6.4, the guards' first line): a candidate may change only the paths its contract's
// scope admits. Everything else — a root dotfile, a package manager's or an interpreter's configuration,
// a file in a new top-level directory — is blocked_path_modified, before any success can fire.

const A = "suite.a";
const B = "suite.b";
const T0 = commitOf("t0");
const SCOPE = ["src/**", "lib/*.js", "index.js"];
const TEST_HASH = sha256Hex("test file");

/** Guard readings of a candidate that changed `paths` since t0 (read against `against`), with its protected test file as at t0. */
function changed(paths: string[], options: { against?: string; total?: number; testHash?: string } = {}): GuardReadings {
  return {
    protected_files: { "src/parse.test.js": options.testHash ?? TEST_HASH },
    coverage_percent: null,
    contract: { hash: sha256Hex("loop.yaml") },
    changed_paths: { against: options.against ?? T0, paths: [...paths].sort(), total: options.total ?? paths.length },
  };
}

/** A loop whose t0 fails B, with the given contract overrides, whose t0 readings name the protected test file. */
function loopOf(overrides: Partial<ContractInput> = { scope: SCOPE }): LoopHarness {
  return new LoopHarness([B], overrides, { guards: changed([]) });
}

/** A candidate that fixes B (every gate green) with the given guard readings; answers its verdict. */
function fixWith(harness: LoopHarness, guards: GuardReadings | undefined, label = `c${harness.events.length}`) {
  return harness.evaluate(label, [], {}, guards === undefined ? { guards: undefined } : { guards });
}

describe("the scope (DESIGN §6.4)", () => {
  it.each<[string, GuardReadings | undefined, string]>([
    ["a root dotfile", changed([".npmrc", "src/parse.js"]), "outside the scope (src/**, lib/*.js, index.js): .npmrc"],
    ["an interpreter's start-up file", changed(["sitecustomize.py"]), ": sitecustomize.py"],
    ["a tool's configuration beside the source", changed(["src/.babelrc"]), ": src/.babelrc"],
    ["a file in a new top-level directory", changed(["shim/node.js", "src/parse.js"]), ": shim/node.js"],
    ["a file one level too deep for lib/*.js", changed(["lib/x/y.js"]), ": lib/x/y.js"],
    ["a reading that is missing", { ...changed([]), changed_paths: undefined } as GuardReadings, "does not say which paths the candidate changed"],
    ["no guard readings at all", undefined, "does not say which paths the candidate changed"],
    ["a reading against another commit than t0", changed(["src/parse.js"], { against: commitOf("elsewhere") }), "not t0's commit"],
    [
      "a reading cut short (more paths than a reading holds)",
      changed(["src/parse.js"], { total: MAX_CHANGED_PATHS + 1 }),
      `changed ${MAX_CHANGED_PATHS + 1} paths since t0, more than the 1 a scope check reads`,
    ],
  ])("green gates with a change outside the scope halt blocked_path_modified (13), never success: %s", (_name, guards, detail) => {
    const harness = loopOf();
    expect(fixWith(harness, guards)).toMatchObject({ decision: "rejected", reason: "guard_violated" });
    expect(harness.state.halt).toMatchObject({ halt_reason: "blocked_path_modified", exit_class: 13, detail: expect.stringContaining(detail) });
    expect(harness.state.best.candidate_id).toBe("t0");
  });

  it("an honest fix inside the scope converges", () => {
    const harness = loopOf();
    expect(fixWith(harness, changed(["index.js", "lib/util.js", "src/deep/parse.js"]))).toMatchObject({ decision: "promoted" });
    expect(harness.state.halt?.halt_reason).toBe("success_condition_met");
  });

  it("a protected file inside the scope is still refused (the protected set is the second line)", () => {
    const harness = loopOf();
    fixWith(harness, changed(["src/parse.test.js"], { testHash: sha256Hex("weakened") }));
    expect(harness.state.halt).toMatchObject({ halt_reason: "blocked_path_modified", detail: expect.stringContaining("modified src/parse.test.js") });
  });

  it("on_violation: reject rejects the stray candidate and goes on to a clean one", () => {
    const harness = loopOf({ scope: SCOPE, guards: { on_violation: "reject" } });
    expect(fixWith(harness, changed([".env"]))).toMatchObject({ decision: "rejected", reason: "guard_violated" });
    expect(harness.state.halt).toBeNull();
    expect(fixWith(harness, changed(["src/parse.js"]))).toMatchObject({ decision: "promoted" });
    expect(harness.state.halt?.halt_reason).toBe("success_condition_met");
  });

  it("without a scope, only the protected set applies: a stray dotfile is not the scope's to refuse", () => {
    const harness = loopOf({});
    expect(fixWith(harness, changed([".npmrc"]))).toMatchObject({ decision: "promoted" });
  });

  it("matches POSIX globs and leaves dotfiles out unless a glob names the dot", () => {
    expect(outOfScope(SCOPE, ["src/a.ts", "src/x/y.ts", "src/.x/y.ts", "lib/a.js", "lib/a.ts", "index.js", "README.md"])).toEqual([
      "src/.x/y.ts",
      "lib/a.ts",
      "README.md",
    ]);
    expect(inScope([".config/app.toml"], ".config/app.toml")).toBe(true);
    expect(inScope(["**"], ".npmrc")).toBe(false);
  });

  it.each<[unknown, string]>([
    [[], "is empty, so no change could ever be kept"],
    [["/etc/**"], "relative to the repository's root"],
    [["./src/**"], "relative to the repository's root"],
    [["src/../**"], "relative to the repository's root"],
    [["!src/secret.js"], "is a negation"],
    ["src/**", "expected array"],
  ])("a scope of %j is refused with a clear error", (scope, message) => {
    const parsed = Contract.safeParse({ name: "x", mode: "check_fixpoint", gates: [{ name: "t", run: "t" }], agent: { run: "a" }, scope });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.message).toContain(message);
  });

  it("a contract without a scope hashes as it did before scopes (no default is filled in)", () => {
    const contract = Contract.parse({ name: "x", mode: "check_fixpoint", gates: [{ name: "t", run: "t" }], agent: { run: "a" } });
    expect("scope" in contract).toBe(false);
  });

  it("property: no sequence of observations with a changed path outside the scope ends in success_condition_met", () => {
    const inside = fc.constantFrom("src/a.js", "src/deep/b.ts", "lib/c.js", "index.js");
    const outside = fc.constantFrom(".npmrc", ".env", "src/.babelrc", "shim/node.js", "lib/x/y.js", "pyproject.toml", "README.md");
    const step = fc.record({
      failing: fc.subarray([A, B]),
      paths: fc.array(inside, { maxLength: 3 }),
      stray: fc.array(outside, { maxLength: 2 }),
    });
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 12 }), fc.constantFrom<"halt" | "reject">("halt", "reject"), (steps, onViolation) => {
        const harness = loopOf({ scope: SCOPE, guards: { on_violation: onViolation } });
        const strayCandidates = new Set<string>();
        steps.forEach((item, index) => {
          if (harness.state.halt) return;
          const observation: Observation = { ...observationOf(item.failing), guards: changed([...new Set([...item.paths, ...item.stray])]) };
          const verdict = harness.evaluate(`s${index}`, item.failing, {}, observation);
          if (item.stray.length === 0) return;
          strayCandidates.add(verdict.candidate_id);
          expect(verdict).toMatchObject({ decision: "rejected", reason: "guard_violated" });
          // Read afresh: the early return above narrowed the type, not the value.
          expect(((harness.state as LoopState).halt as Halt | null)?.halt_reason).not.toBe("success_condition_met");
        });
        const state = harness.state as LoopState;
        expect(strayCandidates.has(state.best.candidate_id)).toBe(false);
        // The same holds for anyone who folds the log again.
        expect(foldEvents(harness.events)?.best.candidate_id).toBe(state.best.candidate_id);
      }),
      { numRuns: 300 },
    );
  });
});
