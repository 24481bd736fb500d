// The code an optimize loop's agent speeds up in the end-to-end tests: work() blocks for DELAY ms (40 at
// t0), a test checks its answer, and the benchmark prints its time (and the process's memory) as METRIC
// lines. Each test adds its own agent and contract.

/** The project's files: `src/work.js`, its test, and `bench.mjs` (METRIC work_ms and rss_mb). */
export function timedWorkProject(): Record<string, string> {
  return {
    "src/work.js": [
      "const DELAY = 40;",
      "export function work() {",
      "  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, DELAY);",
      "  return 42;",
      "}",
      "",
    ].join("\n"),
    "test/work.test.js":
      "import assert from 'node:assert/strict';\nimport { test } from 'node:test';\nimport { work } from '../src/work.js';\ntest('work answers 42', () => assert.equal(work(), 42));\n",
    "bench.mjs": [
      "import { work } from './src/work.js';",
      "const started = performance.now();",
      "for (let i = 0; i < 3; i++) work();",
      "console.log(`METRIC work_ms=${(performance.now() - started).toFixed(3)}`);",
      "console.log(`METRIC rss_mb=${(process.memoryUsage().rss / 1e6).toFixed(1)}`);",
    ].join("\n"),
  };
}
