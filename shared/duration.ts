const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * The longest time limit a command may have: 2^31 − 1 ms (about 24.8 days), the most a timer can wait.
 * Node runs a longer timer after 1 ms, which would kill every gate at once.
 */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Parses a duration like `90s`, `10m`, `1h30m`, `500ms`; returns milliseconds, or null when malformed. */
export function parseDuration(text: string): number | null {
  const trimmed = text.trim();
  if (!/^(\d+(ms|s|m|h|d))+$/.test(trimmed)) return null;
  let total = 0;
  for (const match of trimmed.matchAll(/(\d+)(ms|s|m|h|d)/g)) {
    total += Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  }
  return total > 0 ? total : null;
}

/** Formats milliseconds as a short human duration (`1.2s`, `3m04s`). */
export function formatDuration(ms: number): string {
  // Thresholds sit where rounding would spill into the next unit ("1000ms", "60.0s").
  if (ms < 999.5) return `${Math.round(ms)}ms`;
  if (ms < 59_950) return `${(ms / 1_000).toFixed(1)}s`;
  const totalSeconds = Math.round(ms / 1_000);
  const minutes = Math.floor(totalSeconds / 60);
  const seconds = totalSeconds % 60;
  return `${minutes}m${String(seconds).padStart(2, "0")}s`;
}
