// One way to write relative figures everywhere a person reads them (verdict details, receipts, the CLI).
// Verdict details are recorded in event logs and re-derived by verifiers: this format is part of them.

/** A fraction as a percentage with one decimal: 0.0823 → `8.2%`. */
export function formatPercent(value: number): string {
  return `${(value * 100).toFixed(1)}%`;
}

/** An interval of fractions as ` [a%, b%]` (with its leading space), or "" when there is none. */
export function formatInterval(interval: readonly number[] | null | undefined): string {
  return interval ? ` [${formatPercent(interval[0] ?? 0)}, ${formatPercent(interval[1] ?? 0)}]` : "";
}
