// Simulated benchmarks for the sequential comparison (shared/engine/statistics.ts): the unit test and
// `npm run bench:stats` run the same procedure a loop runs, feeding one interleaved pair at a time
// until a final decision, and count how often a candidate is promoted.
import { compareSamples, type ComparisonResult } from "#shared/engine/statistics.js";
import { gaussian, mulberry32 } from "./prng.js";

/** How one reading deviates from the true value. */
export type Noise = "gaussian" | "lognormal";

/** One simulated situation: the noise, the candidate's true improvement and the contract's statistics. */
export interface Scenario {
  noise: Noise;
  /** The readings' coefficient of variation (0.05: a standard deviation of 5% of the true value). */
  cv: number;
  /** The candidate's true improvement: its true value is best/(1 + improvement) for a lower-is-better metric. */
  improvement: number;
  minEffect: number;
  confidence: number;
  samples: { min: number; max: number };
  /** A share of readings hit by a slowdown (a GC pause, a noisy neighbour): multiplied by `factor`. */
  outliers?: { rate: number; factor: number };
  /** A slow drift of the machine: the true value grows by this fraction over the max pairs' readings. */
  drift?: number;
  /** A coarse timer: readings rounded to this many units (the true best value is 100 units). */
  resolution?: number;
}

/** How a batch of simulated comparisons ended. */
export interface SimulationSummary {
  comparisons: number;
  promoted: number;
  /** Pairs used by each comparison, in order. */
  pairs: number[];
}

const BEST_VALUE = 100;

/** Reads noisy values of the scenario's two programs, in the order a runner measures them. */
export function readingSource(scenario: Scenario, seed: number): (trueValue: number, index: number) => number {
  const uniform = mulberry32(seed);
  const normal = gaussian(uniform);
  const sigma = Math.sqrt(Math.log1p(scenario.cv ** 2)); // a log-normal with this sigma has the given cv
  const readingsInRun = 2 * scenario.samples.max;
  return (trueValue, index) => {
    let value = trueValue * (1 + (scenario.drift ?? 0) * (index / readingsInRun));
    value *= scenario.noise === "gaussian" ? 1 + scenario.cv * normal() : Math.exp(sigma * normal());
    if (scenario.outliers && uniform() < scenario.outliers.rate) value *= scenario.outliers.factor;
    if (scenario.resolution) value = Math.max(scenario.resolution, Math.round(value / scenario.resolution) * scenario.resolution);
    if (!(value > 0)) throw new Error(`simulated a non-positive reading ${value}; the noise is too large for this model`);
    return value;
  };
}

/** Runs one comparison to its final decision, one pair (best, then candidate) at a time. */
export function runComparison(scenario: Scenario, read: (trueValue: number, index: number) => number): ComparisonResult {
  const best: number[] = [];
  const candidate: number[] = [];
  const candidateValue = BEST_VALUE / (1 + scenario.improvement);
  for (;;) {
    best.push(read(BEST_VALUE, 2 * best.length));
    candidate.push(read(candidateValue, 2 * candidate.length + 1));
    if (best.length < scenario.samples.min) continue;
    const result = compareSamples({
      best,
      candidate,
      direction: "lower",
      minEffect: scenario.minEffect,
      confidence: scenario.confidence,
      samples: scenario.samples,
    });
    if (result.decision !== "need_samples") return result;
  }
}

/** Runs `comparisons` independent comparisons of one scenario from one seed. */
export function simulate(scenario: Scenario, comparisons: number, seed: number): SimulationSummary {
  const read = readingSource(scenario, seed);
  const summary: SimulationSummary = { comparisons, promoted: 0, pairs: [] };
  for (let run = 0; run < comparisons; run++) {
    const result = runComparison(scenario, read);
    if (result.decision === "promote") summary.promoted++;
    summary.pairs.push(result.pairs);
  }
  return summary;
}
