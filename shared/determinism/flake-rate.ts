// How flaky can gates be, given that k of n runs on one commit deviated (DESIGN §6.5)? Each run is
// treated as a Bernoulli trial whose "success" is a deviation; the answer is a one-sided upper
// confidence bound on its probability.

/** The confidence of every flake-rate bound loopwarden reports (one-sided). */
export const FLAKE_CONFIDENCE = 0.95;

/** ln C(n, i) for i = 0..k, by the recurrence C(n, i) = C(n, i-1) · (n-i+1) / i (exact enough in logs). */
function logBinomialCoefficients(n: number, k: number): number[] {
  const logs = [0];
  for (let i = 1; i <= k; i++) logs.push((logs[i - 1] ?? 0) + Math.log(n - i + 1) - Math.log(i));
  return logs;
}

/** P(X ≤ k) for X ~ Binomial(n, p), summed in log space so large n neither overflows nor underflows. */
export function binomialCdf(k: number, n: number, p: number): number {
  if (k >= n || p <= 0) return 1;
  if (p >= 1) return 0;
  const logP = Math.log(p);
  const logQ = Math.log1p(-p);
  const terms = logBinomialCoefficients(n, k).map((logC, i) => logC + i * logP + (n - i) * logQ);
  const max = Math.max(...terms);
  return Math.min(1, Math.exp(max) * terms.reduce((sum, term) => sum + Math.exp(term - max), 0));
}

/**
 * The exact one-sided Clopper-Pearson upper bound on a rate after `k` events in `n` trials: the p at
 * which seeing k or fewer events has probability 1 − confidence. The binomial CDF falls as p grows, so
 * bisection finds it (60 halvings leave an interval far below 1e-15). For k = 0 it is
 * 1 − (1 − confidence)^(1/n), which the rule of three approximates as 3/n; for k = n it is 1.
 */
export function clopperPearsonUpper(k: number, n: number, confidence = FLAKE_CONFIDENCE): number {
  if (!Number.isInteger(n) || n < 1 || !Number.isInteger(k) || k < 0 || k > n) {
    throw new RangeError(`need whole numbers 0 ≤ k ≤ n and n ≥ 1, got k=${k}, n=${n}`);
  }
  if (!(confidence > 0 && confidence < 1)) throw new RangeError(`confidence must be between 0 and 1, got ${confidence}`);
  if (k === n) return 1;
  const alpha = 1 - confidence;
  let low = 0;
  let high = 1;
  for (let step = 0; step < 60; step++) {
    const middle = (low + high) / 2;
    if (binomialCdf(k, n, middle) > alpha) low = middle;
    else high = middle;
  }
  return high;
}

/**
 * Runs needed to bound a flake rate by `rate` at 95% when none of them deviates: ⌈3 / rate⌉ (the rule
 * of three). The quotient is rounded to 12 significant digits first, so 3 / 0.1 is 30, not 31.
 */
export function runsForFlakeRate(rate: number): number {
  if (!(rate > 0 && rate < 1)) throw new RangeError(`a flake rate must be between 0 and 1 (exclusive), got ${rate}`);
  return Math.ceil(Number((3 / rate).toPrecision(12)));
}

/**
 * The exact one-sided Clopper-Pearson lower bound on a rate after `k` events in `n` trials: the p at
 * which seeing k or more events has probability 1 − confidence (0 when k = 0). P(X ≥ k) grows with p,
 * so bisection finds it, as for the upper bound.
 */
export function clopperPearsonLower(k: number, n: number, confidence = FLAKE_CONFIDENCE): number {
  if (!Number.isInteger(n) || n < 1 || !Number.isInteger(k) || k < 0 || k > n) {
    throw new RangeError(`need whole numbers 0 ≤ k ≤ n and n ≥ 1, got k=${k}, n=${n}`);
  }
  if (!(confidence > 0 && confidence < 1)) throw new RangeError(`confidence must be between 0 and 1, got ${confidence}`);
  if (k === 0) return 0;
  const alpha = 1 - confidence;
  let low = 0;
  let high = 1;
  for (let step = 0; step < 60; step++) {
    const middle = (low + high) / 2;
    // P(X ≥ k) = 1 − P(X ≤ k − 1).
    if (1 - binomialCdf(k - 1, n, middle) < alpha) low = middle;
    else high = middle;
  }
  return low;
}

/**
 * The error the in-loop monitor spends at its n-th look (n ≥ 1): α · 6 / (π² n²). The terms sum to α over
 * every look there will ever be, so a check whose flake rate is at its target is halted with
 * probability at most α over the whole life of a loop, however long it runs (a union bound over looks).
 */
export function monitorLookAlpha(look: number, alpha = 1 - FLAKE_CONFIDENCE): number {
  if (!Number.isInteger(look) || look < 1) throw new RangeError(`a look is a whole number from 1, got ${look}`);
  return (alpha * 6) / (Math.PI * Math.PI * look * look);
}

/**
 * The in-loop monitor's bound after `k` deviating runs among `n` runs whose outcome was known: the
 * Clopper-Pearson lower bound on the flake rate at the confidence this look may spend
 * (`monitorLookAlpha(n)`). The loop halts `check_flaky` once it exceeds the target: the check is then
 * shown flakier than the target, with the error spent over every look at most α.
 */
export function monitorLowerBound(k: number, n: number): number {
  return clopperPearsonLower(k, n, 1 - monitorLookAlpha(n));
}
