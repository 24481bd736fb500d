import { describe, expect, it } from "vitest";
import { binomialCdf, clopperPearsonUpper, runsForFlakeRate } from "#shared/determinism/flake-rate.js";

describe("flake-rate bounds (DESIGN §6.5)", () => {
  // Reference values: scipy.stats.beta.ppf(0.95, k + 1, n - k), the Clopper-Pearson one-sided upper bound.
  it.each([
    [0, 1, 0.95],
    [0, 3, 0.6315968501359612],
    [0, 10, 0.2588655508930522],
    [0, 30, 0.09503385285530411],
    [1, 10, 0.39416330243650466],
    [2, 8, 0.5996893891908329],
    [2, 20, 0.28261852488586087],
    [5, 100, 0.1022533776432745],
    [10, 1000, 0.016903175120562504],
    [49, 50, 0.9989746601327679],
  ])("Clopper-Pearson upper bound after %i of %i runs is %f", (k, n, expected) => {
    expect(clopperPearsonUpper(k, n)).toBeCloseTo(expected, 9);
  });

  it("with no failures it is 1 − 0.05^(1/n), below the rule of three's 3/n and close to it from 30 runs on", () => {
    for (const n of [5, 10, 30, 100, 300, 1000]) {
      const bound = clopperPearsonUpper(0, n);
      expect(bound).toBeCloseTo(1 - 0.05 ** (1 / n), 12);
      expect(bound).toBeLessThan(3 / n);
      if (n >= 30) expect(bound).toBeGreaterThan(0.94 * (3 / n));
    }
  });

  it("is 1 when every run failed, and grows with the failures", () => {
    expect(clopperPearsonUpper(7, 7)).toBe(1);
    const bounds = [0, 1, 2, 3, 4, 5].map((k) => clopperPearsonUpper(k, 20));
    expect([...bounds].sort((a, b) => a - b)).toEqual(bounds);
  });

  it("refuses impossible counts", () => {
    expect(() => clopperPearsonUpper(3, 2)).toThrow(RangeError);
    expect(() => clopperPearsonUpper(0, 0)).toThrow(RangeError);
    expect(() => clopperPearsonUpper(1.5, 4)).toThrow(RangeError);
  });

  it("computes the binomial CDF without overflow for large n", () => {
    expect(binomialCdf(0, 10, 0.5)).toBeCloseTo(1 / 1024, 15);
    expect(binomialCdf(500, 1000, 0.5)).toBeCloseTo(0.5126125090891354, 10);
    expect(binomialCdf(3, 3, 0.9)).toBe(1);
  });

  it.each([
    [0.1, 30],
    [0.3, 10],
    [0.05, 60],
    [0.01, 300],
    [0.003, 1000],
    [0.07, 43],
  ])("a target flake rate of %f needs ⌈3/R⌉ = %i runs (rule of three)", (rate, runs) => {
    expect(runsForFlakeRate(rate)).toBe(runs);
  });
});
