import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compareSamples, type SampleComparison } from "#shared/engine/statistics.js";
import { gaussian, mulberry32 } from "../support/prng.js";
import { simulate, type Scenario } from "../support/statistics-simulation.js";

const CONTRACT = { direction: "lower", minEffect: 0.02, confidence: 0.95, samples: { min: 5, max: 40 } } as const;

/** Readings of a program whose true value is `value`, with multiplicative noise of `cv`, from `seed`. */
function readings(count: number, value: number, cv: number, seed: number): number[] {
  const normal = gaussian(mulberry32(seed));
  return Array.from({ length: count }, () => value * Math.exp(cv * normal()));
}

function compare(best: number[], candidate: number[], overrides: Partial<SampleComparison> = {}) {
  return compareSamples({ ...CONTRACT, best, candidate, ...overrides });
}

/** All Walsh averages (d_i + d_j)/2, i ≤ j, sorted: the brute-force reference. */
function walshAverages(d: number[]): number[] {
  const averages: number[] = [];
  for (let i = 0; i < d.length; i++) for (let j = i; j < d.length; j++) averages.push((d[i]! + d[j]!) / 2);
  return averages.sort((a, b) => a - b);
}

/** P(W+ ≤ c) for every c by enumerating all 2^n sign patterns: the brute-force signed-rank distribution. */
function signedRankCdf(n: number): number[] {
  const total = (n * (n + 1)) / 2;
  const counts = new Array<number>(total + 1).fill(0);
  for (let mask = 0; mask < 2 ** n; mask++) {
    let sum = 0;
    for (let rank = 1; rank <= n; rank++) if (mask & (1 << (rank - 1))) sum += rank;
    counts[sum]!++;
  }
  let running = 0;
  return counts.map((count) => (running += count) / 2 ** n);
}

const logRatios = (best: number[], candidate: number[]) => best.map((a, i) => Math.log(a) - Math.log(candidate[i]!));

describe("compareSamples: input", () => {
  const ok = { best: [1, 2, 3, 4, 5], candidate: [1, 2, 3, 4, 5] };
  it.each([
    ["unequal lengths", { best: [1, 2], candidate: [1] }, /pairs/],
    ["no pairs", { best: [], candidate: [] }, /no pairs/],
    ["a zero reading", { candidate: [1, 2, 0, 4, 5] }, /candidate\[2\] is 0/],
    ["a negative reading", { best: [1, -2, 3, 4, 5] }, /best\[1\] is -2/],
    ["NaN", { best: [1, 2, 3, Number.NaN, 5] }, /best\[3\] is NaN/],
    ["Infinity", { candidate: [Infinity, 2, 3, 4, 5] }, /candidate\[0\] is Infinity/],
    ["min above max", { samples: { min: 6, max: 5 } }, /min ≤ max/],
    ["a fractional min", { samples: { min: 2.5, max: 5 } }, /whole numbers/],
    ["min 0", { samples: { min: 0, max: 5 } }, /whole numbers/],
    ["more pairs than max", { samples: { min: 2, max: 4 } }, /exceed samples.max/],
    ["confidence 0.5", { confidence: 0.5 }, /confidence/],
    ["confidence 1", { confidence: 1 }, /confidence/],
    ["confidence 95 (a percentage)", { confidence: 95 }, /confidence/],
    ["a negative minEffect", { minEffect: -0.01 }, /minEffect/],
    ["minEffect NaN", { minEffect: Number.NaN }, /minEffect/],
    ["an unknown direction", { direction: "faster" as "lower" }, /direction/],
  ])("throws on %s", (_name, overrides, message) => {
    expect(() => compareSamples({ ...CONTRACT, ...ok, ...overrides })).toThrow(message);
  });

  it("accepts the contract's extremes: min = max, and readings from 1e-300 to 1e300, with JSON-safe figures", () => {
    const result = compare(Array(5).fill(1e300), Array(5).fill(1e-300), { samples: { min: 5, max: 5 } });
    expect(result).toMatchObject({ decision: "promote", estimate: Number.MAX_VALUE });
    expect(JSON.parse(JSON.stringify(result))).toEqual(result);
  });
});

describe("compareSamples: decisions", () => {
  it("promotes a clear improvement, with the estimate and its interval", () => {
    const best = readings(12, 100, 0.02, 1);
    const candidate = readings(12, 100 / 1.2, 0.02, 2);
    const result = compare(best, candidate);
    expect(result).toMatchObject({ decision: "promote", pairs: 12, more: 0 });
    expect(result.estimate).toBeGreaterThan(0.15);
    expect(result.estimate).toBeLessThan(0.25);
    const [low, high] = result.interval!;
    expect(low).toBeGreaterThan(0.02);
    expect(low).toBeLessThanOrEqual(result.estimate);
    expect(high).toBeGreaterThanOrEqual(result.estimate);
    expect(result.level).toBeGreaterThan(0.95);
    expect(result.reason).toMatch(/above the 2% minimum after 12 pairs/);
  });

  it("rejects a clear regression at the first look", () => {
    const result = compare(readings(5, 100, 0.02, 3), readings(5, 120, 0.02, 4));
    expect(result).toMatchObject({ decision: "reject", pairs: 5, more: 0 });
    expect(result.estimate).toBeLessThan(-0.1);
  });

  it("does not promote a change that makes no difference: identical readings are rejected once an interval exists", () => {
    const same = readings(6, 100, 0.05, 5);
    const result = compare(same, same);
    expect(result).toMatchObject({ decision: "reject", estimate: 0, interval: [0, 0] });
    expect(result.reason).toMatch(/cannot reach the 2% minimum/);
  });

  it("asks for the pairs missing before the first look, then one pair at a time", () => {
    const best = readings(8, 100, 0.05, 6);
    const candidate = readings(8, 100 / 1.03, 0.05, 7);
    expect(compare(best.slice(0, 2), candidate.slice(0, 2))).toMatchObject({ decision: "need_samples", more: 3, interval: null, level: null });
    const undecided = compare(best, candidate, { samples: { min: 5, max: 400 } });
    expect(undecided).toMatchObject({ decision: "need_samples", more: 1 });
  });

  it("rejects at samples.max what it has not shown to be better", () => {
    const best = readings(10, 100, 0.05, 8);
    const candidate = readings(10, 100 / 1.03, 0.05, 9);
    const result = compare(best, candidate, { samples: { min: 10, max: 10 } });
    expect(result.decision).toBe("reject");
    expect(result.reason).toMatch(/within 10 pairs/);
  });

  it("mirrors a higher-is-better metric: throughput 1/t decides exactly as time t does", () => {
    for (const [seed, improvement] of [
      [10, 0.2],
      [20, 0.03],
      [30, -0.1],
      [40, 0],
    ] as const) {
      const best = readings(20, 100, 0.05, seed);
      const candidate = readings(20, 100 / (1 + improvement), 0.05, seed + 1);
      for (let n = 5; n <= 20; n++) {
        const time = compare(best.slice(0, n), candidate.slice(0, n));
        const throughput = compare(
          best.slice(0, n).map((t) => 1 / t),
          candidate.slice(0, n).map((t) => 1 / t),
          { direction: "higher" },
        );
        expect(throughput.decision).toBe(time.decision);
        expect(throughput.estimate).toBeCloseTo(time.estimate, 12);
        expect(throughput.level).toBe(time.level);
        if (time.decision !== "need_samples") break;
      }
    }
  });

  it("is deterministic: the same samples give the same result", () => {
    const best = readings(15, 100, 0.05, 11);
    const candidate = readings(15, 95, 0.05, 12);
    expect(compare(best, candidate)).toEqual(compare([...best], [...candidate]));
  });

  it("decides on 10,000 pairs (samples.max's largest value) quickly", () => {
    const best = readings(10_000, 100, 0.05, 13);
    const candidate = readings(10_000, 100 / 1.01, 0.05, 14);
    const result = compare(best, candidate, { minEffect: 0.005, samples: { min: 2, max: 10_000 } });
    expect(result.decision).toBe("promote");
    expect(result.estimate).toBeCloseTo(0.01, 2);
  });
});

describe("compareSamples: the method", () => {
  it("estimates the Hodges-Lehmann median of the Walsh averages of the log-ratios", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.double({ min: 1, max: 1000, noNaN: true }), fc.double({ min: 1, max: 1000, noNaN: true })), { minLength: 1, maxLength: 30 }),
        (pairs) => {
          const best = pairs.map(([a]) => a);
          const candidate = pairs.map(([, b]) => b);
          const averages = walshAverages(logRatios(best, candidate));
          const middle = averages.length / 2;
          const median = averages.length % 2 ? averages[Math.floor(middle)]! : (averages[middle - 1]! + averages[middle]!) / 2;
          const result = compare(best, candidate, { samples: { min: 1, max: 30 } });
          expect(result.estimate).toBeCloseTo(Math.expm1(median), 10);
        },
      ),
      { seed: 1, numRuns: 300 },
    );
  });

  it("finds the same Walsh averages without listing them on 300 pairs, ties included", () => {
    const best = readings(300, 100, 0.05, 16).map((value) => Math.round(value));
    const candidate = readings(300, 98, 0.05, 17).map((value) => Math.round(value));
    const averages = walshAverages(logRatios(best, candidate));
    const middle = averages.length / 2;
    const result = compare(best, candidate, { samples: { min: 2, max: 1_000 } });
    expect(result.estimate).toBeCloseTo(Math.expm1((averages[middle - 1]! + averages[middle]!) / 2), 12);
    // The bounds are the c-th smallest and c-th largest Walsh averages for one c (a range of places when tied).
    const places = (bound: number) => {
      const matches = averages.flatMap((average, place) => (Math.abs(Math.expm1(average) - bound) < 1e-13 ? [place] : []));
      return { first: matches[0] ?? Number.NaN, last: matches[matches.length - 1] ?? Number.NaN };
    };
    const low = places(result.interval![0]);
    const high = places(result.interval![1]);
    const last = averages.length - 1;
    expect(Math.max(low.first, last - high.last)).toBeLessThanOrEqual(Math.min(low.last, last - high.first));
  });

  it("bounds the interval by the Walsh averages the exact signed-rank distribution names at the look's level", () => {
    const cdfs = new Map<number, number[]>();
    for (let seed = 0; seed < 40; seed++) {
      const best = readings(12, 100, 0.05, 100 + seed);
      const candidate = readings(12, 100 / 1.05, 0.05, 200 + seed);
      for (let n = 5; n <= 12; n++) {
        const result = compare(best.slice(0, n), candidate.slice(0, n), { samples: { min: 5, max: 12 } });
        if (result.level === null) continue;
        const tail = (1 - result.level) / 2;
        const cdf = cdfs.get(n) ?? signedRankCdf(n);
        cdfs.set(n, cdf);
        const critical = cdf.findIndex((p) => Math.abs(p - tail) < 1e-12);
        expect(critical).toBeGreaterThanOrEqual(0);
        const averages = walshAverages(logRatios(best.slice(0, n), candidate.slice(0, n)));
        expect(result.interval![0]).toBeCloseTo(Math.expm1(averages[critical]!), 12);
        expect(result.interval![1]).toBeCloseTo(Math.expm1(averages[averages.length - 1 - critical]!), 12);
      }
    }
  });

  it.each([
    [5, 40, 0.95],
    [2, 12, 0.9],
    [10, 10, 0.99],
    [2, 150, 0.95],
  ])("spends at most 1 − confidence over all looks of samples %i..%i at confidence %f", (min, max, confidence) => {
    const values = readings(max, 100, 0.05, 15);
    let spent = 0;
    for (let n = min; n <= max; n++) {
      const { level } = compareSamples({ ...CONTRACT, confidence, samples: { min, max }, best: values.slice(0, n), candidate: values.slice(0, n) });
      if (level !== null) spent += (1 - level) / 2;
    }
    expect(spent).toBeGreaterThan(0);
    expect(spent).toBeLessThanOrEqual(1 - confidence + 1e-12);
  });

  it("never turns a promotion into a rejection when the candidate gets better", () => {
    const rank = { reject: 0, need_samples: 1, promote: 2 } as const;
    fc.assert(
      fc.property(
        fc.integer({ min: 5, max: 25 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.double({ min: -0.1, max: 0.2, noNaN: true }),
        fc.array(fc.double({ min: 1, max: 1.3, noNaN: true }), { minLength: 25, maxLength: 25 }),
        fc.double({ min: 1, max: 1.2, noNaN: true }),
        (n, seed, improvement, perPair, uniform) => {
          const best = readings(n, 100, 0.05, seed);
          const candidate = readings(n, 100 / (1 + improvement), 0.05, seed + 1);
          const before = compare(best, candidate).decision;
          // Any pair getting better keeps a promotion a promotion.
          const better = compare(
            best,
            candidate.map((value, i) => value / perPair[i]!),
          ).decision;
          if (before === "promote") expect(better).toBe("promote");
          // The whole candidate getting better by one factor never moves the decision down.
          const scaled = compare(
            best,
            candidate.map((value) => value / uniform),
          ).decision;
          expect(rank[scaled]).toBeGreaterThanOrEqual(rank[before]);
        },
      ),
      { seed: 2, numRuns: 300 },
    );
  });
});

describe("compareSamples: simulated loops (5% noise, min_effect 2%, confidence 0.95, samples 5..40)", () => {
  // The full sequential procedure, one pair at a time until a final decision; bench/stats.ts runs the same
  // with 10,000 comparisons per scenario and writes bench/results/statistics.md.
  const COMPARISONS = 2_000;
  const base = { cv: 0.05, minEffect: 0.02, confidence: 0.95, samples: { min: 5, max: 40 } } as const;
  const promoteRate = (scenario: Scenario, seed: number) => {
    const summary = simulate(scenario, COMPARISONS, seed);
    return { rate: summary.promoted / summary.comparisons, meanPairs: summary.pairs.reduce((sum, pairs) => sum + pairs, 0) / COMPARISONS };
  };

  it.each(["gaussian", "lognormal"] as const)("%s noise, no real effect: promotes at most 5%, and rejects in few pairs", (noise) => {
    const { rate, meanPairs } = promoteRate({ ...base, noise, improvement: 0 }, 1);
    expect(rate).toBeLessThanOrEqual(0.05);
    expect(meanPairs).toBeLessThan(15);
  });

  it.each(["gaussian", "lognormal"] as const)("%s noise, a true improvement of exactly min_effect: promotes at most 5%", (noise) => {
    expect(promoteRate({ ...base, noise, improvement: 0.02 }, 2).rate).toBeLessThanOrEqual(0.05);
  });

  it.each(["gaussian", "lognormal"] as const)("%s noise, a real improvement of 10%: promotes at least 95%", (noise) => {
    expect(promoteRate({ ...base, noise, improvement: 0.1 }, 3).rate).toBeGreaterThanOrEqual(0.95);
  });
});
