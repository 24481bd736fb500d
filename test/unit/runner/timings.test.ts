import { afterEach, describe, expect, it, vi } from "vitest";

// LOOPWARDEN_TIMINGS=1: after each iteration, one line of where the time went (bench:overhead reads it).

afterEach(() => {
  vi.unstubAllEnvs();
  vi.resetModules();
});

describe("runner timings", () => {
  it("with LOOPWARDEN_TIMINGS=1, a line per iteration of phase times, spawns and requests, counted afresh each time", async () => {
    vi.stubEnv("LOOPWARDEN_TIMINGS", "1");
    const beforeImport = performance.now();
    const timings = await import("../../../runner/src/timings.js");
    timings.countSpawn();
    timings.countSpawn();
    timings.countRequest();
    expect(await timings.timed("gates", async () => 7)).toBe(7);
    await timings.timed("gates", async () => undefined);
    const first = timings.takeTimings();
    expect(first).toMatch(/^timings: total=\d+ gates=\d+ spawns=2 requests=1$/);
    // The first line counts from the process's start, so a run's start-up (loading the CLI) is in it.
    expect(Number(/total=(\d+)/.exec(first ?? "")?.[1])).toBeGreaterThanOrEqual(Math.floor(beforeImport));
    expect(timings.takeTimings()).toMatch(/^timings: total=\d+ spawns=0 requests=0$/);
  });

  it("off by default: nothing is counted and no line is made", async () => {
    vi.stubEnv("LOOPWARDEN_TIMINGS", "");
    const timings = await import("../../../runner/src/timings.js");
    timings.countSpawn();
    expect(await timings.timed("gates", async () => "ran")).toBe("ran");
    expect(timings.takeTimings()).toBeNull();
  });
});
