import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { pause } from "../../../runner/src/process/pause.js";

// `loopwarden work`'s pauses between loop listings and after failed jobs end when the runner is
// stopped: a first SIGINT that came while the runner was reading its loops (the signal already
// aborted when the pause began) used to wait out the whole 10 s pause before the runner exited.

/** Whether `promise` settles once pending microtasks and already-due timers have run, the clock never moved. */
async function settlesWithoutTime(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  void promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await vi.advanceTimersByTimeAsync(0);
  return settled;
}

describe("pause", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("ends at once when its signal has already aborted", async () => {
    const stopping = new AbortController();
    stopping.abort(new Error("stopping"));
    expect(await settlesWithoutTime(pause(10_000, stopping.signal))).toBe(true);
  });

  it("ends when its signal aborts during it, and resolves rather than throws", async () => {
    const stopping = new AbortController();
    const paused = pause(10_000, stopping.signal);
    expect(await settlesWithoutTime(paused)).toBe(false);
    stopping.abort(new Error("stopping"));
    await expect(paused).resolves.toBeUndefined();
  });

  it("otherwise lasts its whole time", async () => {
    const paused = pause(10_000, new AbortController().signal);
    await vi.advanceTimersByTimeAsync(9_999);
    expect(await settlesWithoutTime(paused)).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await expect(paused).resolves.toBeUndefined();
  });
});
