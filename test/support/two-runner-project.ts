// A small check_fixpoint project for loops with two runners (the fault suite, bench/faults.ts): `run`
// proposes, a `loopwarden work` runner evaluates, because the contract requires a label only it has.

/** The three functions of calc.js, as shipped (buggy) and as fixed. */
export const CALC = {
  buggy: ["export const add = (a, b) => a - b;", "export const mul = (a, b) => a + b;", "export const neg = (a) => a;"],
  fixed: ["export const add = (a, b) => a + b;", "export const mul = (a, b) => a * b;", "export const neg = (a) => -a;"],
};

/** calc.js's tests, one per function. */
export const CALC_TESTS = [
  "import { test } from 'node:test';",
  "import assert from 'node:assert/strict';",
  "import { add, mul, neg } from '../src/calc.js';",
  "test('add', () => assert.equal(add(2, 3), 5));",
  "test('mul', () => assert.equal(mul(2, 3), 6));",
  "test('neg', () => assert.equal(neg(2), -2));",
  "",
].join("\n");

/** calc.js with the named functions fixed and the others buggy. */
function calcSource(fixed: string[]): string {
  return `${["add", "mul", "neg"].map((name, index) => (fixed.includes(name) ? CALC.fixed[index] : CALC.buggy[index])).join("\n")}\n`;
}

/**
 * A small check_fixpoint project for the two-runner case: three bugs, each test counted (TAP report). The
 * agent fixes `add` (promoted), changes nothing (rejected), fixes `mul` but breaks `add` again (rejected),
 * then fixes everything (promoted: success). Its contract requires the label `pool=shared`, which only the
 * `work` runner has: `run` proposes, `work` evaluates.
 */
export function twoRunnerProject(): Record<string, string> {
  const plans: Record<string, string[] | null> = { 1: ["add"], 2: null, 3: ["mul"], 4: ["add", "mul", "neg"] };
  return {
    "package.json": '{ "name": "calc", "private": true, "type": "module" }\n',
    "src/calc.js": calcSource([]),
    "test/calc.test.js": CALC_TESTS,
    "agent.mjs": [
      "import { writeFileSync } from 'node:fs';",
      `const plans = ${JSON.stringify(plans)};`,
      "const iteration = process.env.LOOPWARDEN_ITERATION ?? '4';",
      "const plan = iteration in plans ? plans[iteration] : plans['4'];",
      `const fixed = ${JSON.stringify(CALC.fixed)};`,
      `const buggy = ${JSON.stringify(CALC.buggy)};`,
      "if (plan) writeFileSync('src/calc.js', ['add', 'mul', 'neg'].map((name, i) => (plan.includes(name) ? fixed[i] : buggy[i])).join('\\n') + '\\n');",
      "",
    ].join("\n"),
    "loop.yaml": [
      "name: faults-two-runner",
      "mode: check_fixpoint",
      "gates:",
      "  - name: unit",
      "    run: node --test --test-reporter=tap --test-reporter-destination=.loopwarden/out/tests.tap",
      "    tests: { tap: .loopwarden/out/tests.tap }",
      "    timeout: 1m",
      "stop:",
      "  max_iterations: 8",
      "agent:",
      "  run: node agent.mjs",
      "evaluate:",
      "  labels: { pool: shared }",
      "",
    ].join("\n"),
    ".gitignore": ".loopwarden/\n",
  };
}
