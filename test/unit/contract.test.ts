import { describe, expect, it } from "vitest";
import { canonicalJson } from "#shared/canonical-json.js";
import { Contract, MAX_LABELS, type ContractInput } from "#shared/wire/contract.js";

const minimal: ContractInput = {
  name: "parser-fixes",
  mode: "check_fixpoint",
  gates: [{ name: "unit", run: "npm test" }],
  agent: { run: "claude -p 'fix one failing test'" },
};

/** The issues of a contract that must be refused, as `{ path, code, message, keys? }`. */
function issuesOf(input: unknown) {
  const parsed = Contract.safeParse(input);
  expect(parsed.success, "the contract was accepted").toBe(false);
  return parsed.error?.issues ?? [];
}

describe("Contract", () => {
  it.each([
    ["a top-level key the contract does not have", { ...minimal, metrics: { name: "parse_ms" } }, [], "metrics"],
    ["a misspelt gate key", { ...minimal, gates: [{ name: "unit", run: "npm test", timout: "2m" }] }, ["gates", 0], "timout"],
    [
      "a key on the second gate",
      {
        ...minimal,
        gates: [
          { name: "unit", run: "a" },
          { name: "lint", run: "b", sof: {} },
        ],
      },
      ["gates", 1],
      "sof",
    ],
    ["a stop condition the contract does not have", { ...minimal, stop: { max_iterations: 5, budgets: { wall: "8h" } } }, ["stop"], "budgets"],
    ["an agent key", { ...minimal, agent: { run: "x", model: "big" } }, ["agent"], "model"],
  ])("refuses %s and names where it is", (_what, input, path, key) => {
    expect(issuesOf(input)).toEqual([expect.objectContaining({ code: "unrecognized_keys", path, keys: [key], message: expect.stringContaining(key) })]);
  });

  it.each([
    ["gates[0].timeout", { ...minimal, gates: [{ name: "unit", run: "npm test", timeout: "2 minutes" }] }, ["gates", 0, "timeout"]],
    [
      "gates[1].timeout",
      {
        ...minimal,
        gates: [
          { name: "unit", run: "a" },
          { name: "lint", run: "b", timeout: "10" },
        ],
      },
      ["gates", 1, "timeout"],
    ],
    ["agent.timeout", { ...minimal, agent: { run: "x", timeout: "0s" } }, ["agent", "timeout"]],
  ])("refuses a bad duration at %s with its path and a hint", (_where, input, path) => {
    expect(issuesOf(input)).toEqual([expect.objectContaining({ path, message: expect.stringContaining("e.g. 90s, 10m") })]);
  });

  it.each([
    ["gates[0].timeout", { ...minimal, gates: [{ name: "unit", run: "npm test", timeout: "25d" }] }, ["gates", 0, "timeout"]],
    ["agent.timeout", { ...minimal, agent: { run: "x", timeout: "24d20h32m" } }, ["agent", "timeout"]],
  ])("refuses a time limit no timer can hold (past 2^31-1 ms, it would fire at once) at %s", (_where, input, path) => {
    expect(issuesOf(input)).toEqual([expect.objectContaining({ path, message: expect.stringContaining("longer than a time limit can be (24 days") })]);
  });

  it("accepts a time limit up to the longest a timer holds; a wall-time budget may be longer (it is no timer)", () => {
    expect(Contract.safeParse({ ...minimal, gates: [{ name: "unit", run: "npm test", timeout: "24d20h31m" }] }).success).toBe(true);
    expect(Contract.safeParse({ ...minimal, stop: { budget: { wall: "60d" } } }).success).toBe(true);
  });

  it("refuses two gates with the same name, pointing at the second", () => {
    const input = {
      ...minimal,
      gates: [
        { name: "unit", run: "a" },
        { name: "lint", run: "b" },
        { name: "unit", run: "c" },
      ],
    };
    expect(issuesOf(input)).toEqual([expect.objectContaining({ path: ["gates", 2, "name"], message: 'duplicate gate name "unit"' })]);
  });

  it("requires a metric in optimize mode, and accepts a task without a check (its loop halts check_inadequate at creation)", () => {
    expect(issuesOf({ ...minimal, mode: "optimize" })).toEqual([expect.objectContaining({ path: ["metric"] })]);
    const tasks = [{ id: "t1", title: "parse dates" }];
    expect(Contract.parse({ ...minimal, mode: "task_list", tasks }).tasks).toEqual([{ id: "t1", title: "parse dates" }]);
  });

  it("parses the full contract of DESIGN §5", () => {
    const full = Contract.parse({
      ...minimal,
      mode: "optimize",
      gates: [
        { name: "unit", run: "npx vitest run", tests: { junit: ".loopwarden/out/junit.xml" }, timeout: "2m" },
        { name: "lint", run: "npx eslint .", soft: { metric: "lint_errors", max: 0 } },
      ],
      metric: { run: "node bench/parse.js", name: "parse_ms", direction: "lower", min_effect: "2%", target: 8 },
      secondary: [{ name: "peak_rss_mb", direction: "lower", max_regression: "10%" }],
      guards: { protected: ["loop.yaml", "test/**"], coverage: { lcov: "coverage/lcov.info" } },
      stop: { max_iterations: 100, no_progress: 10, budget: { wall: "8h", cost_usd: 25 } },
      artifacts: ["profile/*.svg"],
      exec: { network: "none" },
    });
    expect(full.metric).toMatchObject({ confidence: 0.95, samples: { min: 5, max: 40 }, min_effect: "2%" });
    expect(full.guards).toMatchObject({ tests_never_shrink: true, on_violation: "halt", coverage: { floor: "t0" } });
  });

  it("refuses a contract without gates and one with an unknown mode", () => {
    expect(issuesOf({ ...minimal, gates: [] })).toEqual([expect.objectContaining({ path: ["gates"] })]);
    expect(issuesOf({ ...minimal, mode: "fixpoint" })).toEqual([expect.objectContaining({ path: ["mode"] })]);
  });

  it("applies the documented defaults: 50 iterations, no_progress 10, gate timeout 10m, agent timeout 20m", () => {
    expect(Contract.parse(minimal)).toEqual({
      ...minimal,
      gates: [{ name: "unit", run: "npm test", timeout: "10m" }],
      stop: { max_iterations: 50, no_progress: 10 },
      agent: { run: minimal.agent.run, timeout: "20m" },
    });
  });

  it("fills in the stop condition that was left out and keeps the one given", () => {
    expect(Contract.parse({ ...minimal, stop: { max_iterations: 5 } }).stop).toEqual({ max_iterations: 5, no_progress: 10 });
    expect(Contract.parse({ ...minimal, stop: { no_progress: 3 } }).stop).toEqual({ max_iterations: 50, no_progress: 3 });
  });

  it("keeps given timeouts as written", () => {
    const parsed = Contract.parse({ ...minimal, gates: [{ name: "unit", run: "npm test", timeout: "90s" }], agent: { run: "x", timeout: "1h30m" } });
    expect(parsed.gates[0]?.timeout).toBe("90s");
    expect(parsed.agent.timeout).toBe("1h30m");
  });
});

describe("Contract: evaluate.labels (DESIGN §11)", () => {
  it("keeps the labels a runner must have", () => {
    expect(Contract.parse({ ...minimal, evaluate: { labels: { gpu: "h100", os: "linux", "cuda.version": "12_4" } } }).evaluate).toEqual({
      labels: { gpu: "h100", os: "linux", "cuda.version": "12_4" },
    });
    expect(Contract.parse({ ...minimal, evaluate: { labels: {} } }).evaluate).toEqual({ labels: {} });
  });

  it("adds nothing to a contract without them, so it hashes as it did before labels existed (see also event-log-fixture)", () => {
    const parsed = Contract.parse(minimal);
    expect(parsed).not.toHaveProperty("evaluate");
    expect(canonicalJson(parsed)).not.toContain("evaluate");
  });

  const manyLabels = Object.fromEntries(Array.from({ length: MAX_LABELS + 1 }, (_, index) => [`k${index}`, "v"]));
  it.each<[string, unknown, (string | number)[], string]>([
    ["a key with a space", { labels: { "gpu model": "h100" } }, ["evaluate", "labels", "gpu model"], "is not a label key"],
    ["an empty key", { labels: { "": "h100" } }, ["evaluate", "labels", ""], "is not a label key"],
    ["a key of 65 characters", { labels: { ["k".repeat(65)]: "x" } }, ["evaluate", "labels", "k".repeat(65)], "is not a label key"],
    ["a value with '='", { labels: { gpu: "h100=1" } }, ["evaluate", "labels", "gpu"], "is not a label value"],
    ["an empty value", { labels: { gpu: "" } }, ["evaluate", "labels", "gpu"], "is not a label value"],
    ["a value that is not a string", { labels: { gpus: 2 } }, ["evaluate", "labels", "gpus"], "expected string"],
    [`more than ${MAX_LABELS} labels`, { labels: manyLabels }, ["evaluate", "labels"], `more than ${MAX_LABELS} labels`],
    [
      "a __proto__ key, which would otherwise vanish",
      { labels: JSON.parse('{"__proto__": "x"}') as unknown },
      ["evaluate", "labels", "__proto__"],
      "is not a label key",
    ],
    ["no labels at all", {}, ["evaluate", "labels"], ""],
  ])("refuses %s and names where it is", (_what, evaluate, path, message) => {
    expect(issuesOf({ ...minimal, evaluate })).toEqual([expect.objectContaining({ path, message: expect.stringContaining(message) })]);
  });

  it("refuses a key evaluate does not have, naming it", () => {
    expect(issuesOf({ ...minimal, evaluate: { labels: {}, lables: { gpu: "h100" } } })).toEqual([
      expect.objectContaining({ code: "unrecognized_keys", path: ["evaluate"], keys: ["lables"] }),
    ]);
  });
});
