// The sequential A/B comparison of a numeric metric (DESIGN §6.3); the method, its assumptions and its
// measured error rates are in STATISTICS.md next to this file. In short: the paired log-ratios, a
// Wilcoxon signed-rank interval around their Hodges-Lehmann estimate, an alpha-spending schedule
// across the looks (so looking after every pair cannot inflate the false-promote rate), and a
// futility rule that rejects a candidate the remaining budget could never confirm.

/** One look at interleaved samples: pair i is (best[i], candidate[i]), measured A then B on one runner. */
export interface SampleComparison {
  /** The best-so-far's readings, in the order they were measured. */
  best: readonly number[];
  /** The candidate's readings; candidate[i] was measured right after best[i]. */
  candidate: readonly number[];
  /** Whether a lower or a higher reading is better. */
  direction: "lower" | "higher";
  /** The least relative improvement worth promoting (0.02 for 2%). */
  minEffect: number;
  /** The confidence of a promotion (0.95): its false-promote rate is at most 1 − confidence. */
  confidence: number;
  /** Pairs before the first look (min) and the most pairs one comparison may use (max). */
  samples: { min: number; max: number };
}

/** What to do with the candidate after one look. */
export type SampleDecision = "promote" | "reject" | "need_samples";

/** The decision of one look, with the evidence a verdict records. */
export interface ComparisonResult {
  decision: SampleDecision;
  /** Why, in one sentence with the figures. */
  reason: string;
  /**
   * The relative improvement of the candidate over the best-so-far (0.08: 8% better): best/candidate − 1
   * for a lower-is-better metric, candidate/best − 1 for a higher-is-better one, taken at the
   * Hodges-Lehmann estimate of the paired log-ratios.
   */
  estimate: number;
  /** The confidence interval of `estimate` at this look's level; null while the pairs are too few to bound it. */
  interval: [number, number] | null;
  /** The interval's two-sided confidence level (e.g. 0.9964); null with the interval. */
  level: number | null;
  /** Pairs looked at. */
  pairs: number;
  /** Pairs still wanted when the decision is need_samples, else 0. */
  more: number;
}

/**
 * Decides one look of a sequential comparison. Pure and deterministic: the same samples always give the
 * same result, so a verdict can be re-derived from its recorded samples. Throws on input that upstream
 * validation should have refused (a broken invariant, not a user error).
 */
export function compareSamples(input: SampleComparison): ComparisonResult {
  assertValid(input);
  const { minEffect, confidence, samples } = input;
  const alpha = 1 - confidence;
  const threshold = Math.log1p(minEffect);
  const n = input.best.length;
  const logs = pairedLogImprovements(input);
  const center = hodgesLehmann(logs);
  const estimate = improvementOf(center);
  const base = { estimate, pairs: n };
  if (n < samples.min) {
    const reason = `${n} of the ${samples.min} pairs wanted before the first look (estimate so far ${percent(estimate)})`;
    return { ...base, decision: "need_samples", reason, interval: null, level: null, more: samples.min - n };
  }

  const look = lookAt(n, samples.min, samples.max, alpha);
  const walshCount = (n * (n + 1)) / 2;
  // The interval on the log scale, where the decisions are made; reported as improvements.
  const bounds = look.critical < 0 ? null : ([walshAverage(logs, look.critical + 1), walshAverage(logs, walshCount - look.critical)] as const);
  const interval: [number, number] | null = bounds ? [improvementOf(bounds[0]), improvementOf(bounds[1])] : null;
  const level = bounds ? 1 - 2 * look.tail : null;
  const shown =
    interval && level !== null
      ? `estimate ${percent(estimate)}, ${percent(level)} interval ${percent(interval[0])} to ${percent(interval[1])}`
      : `estimate ${percent(estimate)}`;
  const result = (decision: SampleDecision, reason: string, more = 0): ComparisonResult => ({ ...base, decision, reason, interval, level, more });

  if (bounds && bounds[0] > threshold) {
    return result("promote", `${shown}: above the ${percent(minEffect)} minimum after ${n} pairs`);
  }
  if (bounds && bounds[1] < threshold) {
    return result("reject", `${shown}: cannot reach the ${percent(minEffect)} minimum`);
  }
  if (n >= samples.max) {
    return result("reject", `${shown}: not shown above the ${percent(minEffect)} minimum within ${samples.max} pairs`);
  }
  const futile = futility(logs, threshold, samples, alpha);
  if (futile) {
    return result(
      "reject",
      `estimate ${percent(estimate)}, at most ${percent(improvementOf(futile.upper))} at ${percent(confidence)} confidence: below ` +
        `${percent(improvementOf(futile.confirmable))}, the least improvement ${samples.max} pairs could confirm at this noise`,
    );
  }
  const undecided = bounds ? `undecided after ${n} pairs` : `${n} pairs are too few for an interval at this look's level`;
  return result("need_samples", `${shown}: ${undecided}`, 1);
}

function assertValid(input: SampleComparison): void {
  const { best, candidate, minEffect, confidence, samples } = input;
  if (best.length !== candidate.length) {
    throw new Error(`compareSamples: ${best.length} best readings but ${candidate.length} candidate readings; samples come in pairs`);
  }
  if (best.length === 0) throw new Error("compareSamples: no pairs to compare");
  for (const [name, values] of [
    ["best", best],
    ["candidate", candidate],
  ] as const) {
    const bad = values.findIndex((value) => !(Number.isFinite(value) && value > 0));
    if (bad >= 0) throw new Error(`compareSamples: ${name}[${bad}] is ${String(values[bad])}; readings must be positive finite numbers`);
  }
  if (input.direction !== "lower" && input.direction !== "higher") {
    throw new Error(`compareSamples: direction must be lower or higher, got ${String(input.direction)}`);
  }
  if (!(Number.isFinite(minEffect) && minEffect >= 0)) throw new Error(`compareSamples: minEffect must be a finite number ≥ 0, got ${minEffect}`);
  if (!(confidence > 0.5 && confidence < 1)) throw new Error(`compareSamples: confidence must be in (0.5, 1), got ${confidence}`);
  if (!(Number.isInteger(samples.min) && samples.min >= 1 && Number.isInteger(samples.max) && samples.max >= samples.min)) {
    throw new Error(`compareSamples: samples need whole numbers 1 ≤ min ≤ max, got min=${samples.min}, max=${samples.max}`);
  }
  if (best.length > samples.max) throw new Error(`compareSamples: ${best.length} pairs exceed samples.max = ${samples.max}`);
}

/**
 * log(best/candidate) for lower-is-better, log(candidate/best) for higher-is-better, sorted: positive
 * means the candidate was better in that pair. A difference of logs, not the log of a quotient, so no
 * pair of finite positive readings overflows.
 */
function pairedLogImprovements(input: SampleComparison): Float64Array {
  const sign = input.direction === "lower" ? 1 : -1;
  const logs = Float64Array.from(input.best, (a, i) => sign * (Math.log(a) - Math.log(input.candidate[i] ?? Number.NaN)));
  return logs.sort();
}

/** exp(x) − 1, capped so an absurd ratio still serialises as a JSON number. */
function improvementOf(logRatio: number): number {
  return Math.min(Number.MAX_VALUE, Math.expm1(logRatio));
}

function percent(fraction: number): string {
  return `${Number((fraction * 100).toFixed(2))}%`;
}

// ---- the Hodges-Lehmann estimate and Walsh averages ----------------------------------------------

/** The median of the n(n+1)/2 Walsh averages (d_i + d_j)/2, i ≤ j, of sorted `d`. */
function hodgesLehmann(d: Float64Array): number {
  const count = (d.length * (d.length + 1)) / 2;
  const upper = walshAverage(d, Math.floor(count / 2) + 1);
  return count % 2 === 1 ? upper : (walshAverage(d, count / 2) + upper) / 2;
}

/** The k-th smallest (1-based) Walsh average of sorted `d`. */
function walshAverage(d: Float64Array, k: number): number {
  return walshSum(d, k) / 2;
}

/** How many Walsh sums d_i + d_j (i ≤ j) of sorted `d` are ≤ s. O(n): for a larger i the last j is no later. */
function walshSumsAtMost(d: Float64Array, s: number): number {
  let count = 0;
  let j = d.length - 1;
  for (let i = 0; i <= j; i++) {
    while (j >= i && (d[i] ?? 0) + (d[j] ?? 0) > s) j--;
    count += Math.max(0, j - i + 1);
  }
  return count;
}

/** The smallest Walsh sum of sorted `d` greater than s (Infinity when none). O(n), like walshSumsAtMost. */
function walshSumAbove(d: Float64Array, s: number): number {
  let smallest = Infinity;
  let j = d.length - 1;
  for (let i = 0; i < d.length; i++) {
    if (j < i) j = i;
    while (j - 1 >= i && (d[i] ?? 0) + (d[j - 1] ?? 0) > s) j--;
    const sum = (d[i] ?? 0) + (d[j] ?? 0);
    if (sum > s && sum < smallest) smallest = sum;
  }
  return smallest;
}

/**
 * The k-th smallest Walsh sum without listing all n(n+1)/2 of them (samples.max may be 10,000): bisect
 * on the value, and after each halving try the next sum above the lower end, which is the answer as
 * soon as no other sum lies between. Sums are compared exactly as computed (one rounded addition), so
 * the answer is the same number a full sort would give. Ends: values are finite, and a bisection that
 * cannot split two adjacent doubles leaves the upper one as the answer.
 */
function walshSum(d: Float64Array, k: number): number {
  let low = -Infinity; // fewer than k sums are ≤ low
  let high = 2 * (d[d.length - 1] ?? 0); // at least k sums are ≤ high
  for (;;) {
    const next = walshSumAbove(d, low);
    if (walshSumsAtMost(d, next) >= k) return next;
    low = next;
    const middle = low + (high - low) / 2;
    if (middle <= low || middle >= high) return high;
    if (walshSumsAtMost(d, middle) >= k) high = middle;
    else low = middle;
  }
}

// ---- the signed-rank null distribution -----------------------------------------------------------

/** Up to this many pairs the signed-rank distribution is exact; beyond, a conservative normal approximation. */
const EXACT_PAIRS = 100;

// P(W+ ≤ c) for c ≤ ⌊N/2⌋ (the lower half is all any level below 0.5 needs), built once per n on demand.
// A memo only: the answers are the same whether or not it is filled.
const lowerTails: Float64Array[] = [new Float64Array([1])];
let lastMass: Float64Array = new Float64Array([1]);

/** The exact lower tail of the signed-rank statistic for n pairs: P(W+_n = s) = (P(W+_{n−1} = s) + P(W+_{n−1} = s − n)) / 2. */
function exactLowerTail(n: number): Float64Array {
  while (lowerTails.length <= n) {
    const k = lowerTails.length;
    const size = (k * (k + 1)) / 2 + 1;
    const mass = new Float64Array(size);
    for (let s = 0; s < size; s++) mass[s] = ((lastMass[s] ?? 0) + (s >= k ? (lastMass[s - k] ?? 0) : 0)) / 2;
    lastMass = mass;
    const tail = new Float64Array(Math.floor((size - 1) / 2) + 1);
    let sum = 0;
    for (let s = 0; s < tail.length; s++) tail[s] = sum += mass[s] ?? 0;
    lowerTails.push(tail);
  }
  return lowerTails[n] ?? new Float64Array([1]);
}

/**
 * The largest c with P(W+ ≤ c) ≤ `level` for n pairs (−1 when even P(W+ = 0) = 2^−n exceeds it) and
 * that probability, the error actually spent. Beyond EXACT_PAIRS the normal approximation with a
 * continuity correction, made conservative by asking it for 0.99·level and one rank less: checked
 * against the exact distribution at every n from 101 to 1,200 for levels from 1e-8 to 0.49, its tail
 * stays below 0.991·level. The error spent is then counted as the whole level.
 */
function signedRankCritical(n: number, level: number): { critical: number; tail: number } {
  if (n <= EXACT_PAIRS) {
    const tail = exactLowerTail(n);
    let low = -1;
    let high = tail.length - 1;
    while (low < high) {
      const middle = Math.ceil((low + high + 1) / 2);
      if ((tail[middle] ?? 1) <= level) low = middle;
      else high = middle - 1;
    }
    return { critical: low, tail: low < 0 ? 0 : (tail[low] ?? 0) };
  }
  const mean = (n * (n + 1)) / 4;
  const sd = Math.sqrt((n * (n + 1) * (2 * n + 1)) / 24);
  return { critical: Math.max(-1, Math.floor(mean + sd * normalQuantile(0.99 * level) - 0.5) - 1), tail: level };
}

// ---- spending the error across looks -------------------------------------------------------------

/**
 * Look n's critical value, the error it spends (`tail`) and the level it was allowed (`budget`). Look
 * n may spend α(√(n/max) − √((n−1)/max)) (α√(min/max) at the first look) plus whatever earlier looks
 * could not use: the signed-rank statistic is discrete, so a look spends the largest attainable tail
 * within its budget and passes the rest on. The budgets depend on min, max and α only, never on the
 * data, so the error spent over all looks is at most α·√(max/max) = α.
 */
function lookAt(n: number, min: number, max: number, alpha: number): { critical: number; tail: number; budget: number } {
  let carried = 0;
  for (let look = min; ; look++) {
    const share = alpha * (Math.sqrt(look / max) - (look === min ? 0 : Math.sqrt((look - 1) / max)));
    const budget = share + carried;
    const spent = signedRankCritical(look, budget);
    if (look >= n) return { ...spent, budget };
    carried = budget - spent.tail;
  }
}

// ---- futility ------------------------------------------------------------------------------------

/**
 * Rejects early a candidate that `max` pairs could not confirm: when even the one-sided upper bound at
 * the contract's confidence lies below the least improvement the last look could promote at the noise
 * seen so far (the threshold plus that look's half-width, projected from a robust spread). Only ever a
 * rejection, so it cannot raise the false-promote rate; what it costs in power is measured
 * (STATISTICS.md). Null when the candidate stays in play.
 */
function futility(
  d: Float64Array,
  threshold: number,
  { min, max }: { min: number; max: number },
  alpha: number,
): { upper: number; confirmable: number } | null {
  const n = d.length;
  const bound = signedRankCritical(n, alpha);
  if (bound.critical < 0) return null;
  const upper = walshAverage(d, (n * (n + 1)) / 2 - bound.critical);
  const finalLevel = lookAt(max, min, max, alpha).budget;
  // 1.4826·MAD estimates a normal spread robustly; π/3 is the Hodges-Lehmann estimate's variance factor.
  const spread = 1.4826 * medianOfSorted(Float64Array.from(d, (x) => Math.abs(x - medianOfSorted(d))).sort());
  const confirmable = threshold - normalQuantile(finalLevel) * spread * Math.sqrt(Math.PI / 3 / max);
  return upper < confirmable ? { upper, confirmable } : null;
}

function medianOfSorted(x: Float64Array): number {
  const middle = Math.floor(x.length / 2);
  return x.length % 2 === 1 ? (x[middle] ?? 0) : ((x[middle - 1] ?? 0) + (x[middle] ?? 0)) / 2;
}

// Wichura's AS 241 (PPND16) coefficients, lowest power first, as the nearest doubles.
const CENTRAL_NUM = [
  3.3871328727963665, 133.14166789178438, 1971.5909503065513, 13731.69376550946, 45921.95393154987, 67265.7709270087, 33430.57558358813, 2509.0809287301227,
];
const CENTRAL_DEN = [1, 42.31333070160091, 687.1870074920579, 5394.196021424751, 21213.794301586597, 39307.89580009271, 28729.085735721943, 5226.495278852546];
const NEAR_NUM = [
  1.4234371107496835, 4.630337846156546, 5.769497221460691, 3.6478483247632045, 1.2704582524523684, 0.2417807251774506, 0.022723844989269184,
  0.0007745450142783414,
];
const NEAR_DEN = [
  1, 2.053191626637759, 1.6763848301838038, 0.6897673349851, 0.14810397642748008, 0.015198666563616457, 0.0005475938084995345, 1.0507500716444169e-9,
];
const FAR_NUM = [
  6.657904643501103, 5.463784911164114, 1.7848265399172913, 0.29656057182850487, 0.026532189526576124, 0.0012426609473880784, 0.000027115555687434876,
  2.0103343992922881e-7,
];
const FAR_DEN = [
  1, 0.599832206555888, 0.1369298809227358, 0.014875361290850615, 0.0007868691311456133, 0.000018463183175100548, 1.421511758316446e-7, 2.0442631033899397e-15,
];

function polynomial(coefficients: readonly number[], x: number): number {
  return coefficients.reduceRight((sum, coefficient) => sum * x + coefficient, 0);
}

/** Φ⁻¹(p) by Wichura's AS 241 (PPND16), accurate to about 1e-16 for 0 < p < 1. */
function normalQuantile(p: number): number {
  const q = p - 0.5;
  if (Math.abs(q) <= 0.425) {
    const r = 0.180625 - q * q;
    return (q * polynomial(CENTRAL_NUM, r)) / polynomial(CENTRAL_DEN, r);
  }
  const r = Math.sqrt(-Math.log(q < 0 ? p : 1 - p));
  const x = r <= 5 ? polynomial(NEAR_NUM, r - 1.6) / polynomial(NEAR_DEN, r - 1.6) : polynomial(FAR_NUM, r - 5) / polynomial(FAR_DEN, r - 5);
  return q < 0 ? -x : x;
}
