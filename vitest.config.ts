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
          // Three files at a time (vitest's default on 2 cores is one, availableParallelism - 1), in one group
          // with the worker layer (test/worker/vitest.config.ts, the same maxWorkers, which vitest requires of
          // projects sharing a group): many unit tests wait on git, zones and child processes, and the worker
          // layer alone kept one core busy (one workerd per file). Measured on a quiet 2-core host (issue 30),
          // `vitest run --project unit --project worker`: 101.8 s with the unit layer at two files and then the
          // worker layer at one, 82.3 s in one group at two, 75.3 s at three, the same CPU (120-128 s).
          maxWorkers: 3,
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
          // processes, and the layer took 521 s alone with three against about 700 s with two. Runs after the
          // other layers, in a group of its own: in one group with them the whole run took 269 s where the two
          // groups take about 265 (unit and worker 75 s, then this layer about 190), so mixing its files with
          // the others' gains nothing.
          maxWorkers: 3,
          // Within a file, tests marked concurrent (their loops independent of one another) run three at a
          // time: with three files at once, more would leave each loop too small a share of the 2 cores.
          maxConcurrency: 3,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
