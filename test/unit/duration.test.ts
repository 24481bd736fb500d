import { describe, expect, it } from "vitest";
import { formatDuration, parseDuration } from "#shared/duration.js";

describe("parseDuration", () => {
  it.each([
    ["90s", 90_000],
    ["10m", 600_000],
    ["1h30m", 5_400_000],
    ["500ms", 500],
    ["2h", 7_200_000],
    ["1d", 86_400_000],
    ["1m30s", 90_000],
    [" 20m ", 1_200_000],
  ])("reads %j as %i ms", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(["2 minutes", "", "0s", "10", "1.5h", "-5s", "10 m", "5sec", "m"])("rejects %j", (text) => {
    expect(parseDuration(text)).toBeNull();
  });
});

describe("formatDuration", () => {
  it.each([
    [0, "0ms"],
    [500, "500ms"],
    [1_200, "1.2s"],
    [45_000, "45.0s"],
    [60_000, "1m00s"],
    [184_000, "3m04s"],
    [5_400_000, "90m00s"],
  ])("shows %i ms as %s", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});
