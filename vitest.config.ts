import { defineConfig } from "vitest/config";

// Three layers (STYLE "Tests"): plain Node unit tests, worker tests inside workerd, and end-to-end tests
// that drive the runner CLI against a real local coordinator (the worker bundle in workerd).
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          environment: "node",
          // Two files at a time (vitest's default on 2 cores is one, availableParallelism - 1): many unit
          // tests wait on git, zones and child processes, and one at a time the layer left a core idle. Measured
          // with --maxWorkers on a shared machine: 157 s with one, 90 s with two, the same CPU (issue 30).
          // The worker layer stays at one: with two its pools and workerd instances cost more than they overlap
          // (211 s with one, 293 s with two).
          maxWorkers: 2,
          // The property tests and the statistics simulations take 1-1.5 s on a quiet machine and passed 5 s
          // (vitest's default) on a loaded one, sharing its cores with another file's: a test's time limit is
          // for a test that hangs, not a measure of speed (timings are the benches').
          testTimeout: 30_000,
          sequence: { groupOrder: 0 },
        },
      },
      "./test/worker/vitest.config.ts",
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          environment: "node",
          globalSetup: ["test/support/compiled-cli.ts"],
          testTimeout: 180_000,
          hookTimeout: 60_000,
          // Each file starts its own coordinators. Three at a time on 2 cores: much of an e2e test is waiting on
          // processes, and the layer took 521 s alone with three against about 700 s with two. Runs after the other layers.
          maxWorkers: 3,
          // Within a file, tests marked concurrent (their loops independent of one another) run three at a
          // time: with three files at once, more would leave each loop too small a share of the 2 cores.
          maxConcurrency: 3,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
