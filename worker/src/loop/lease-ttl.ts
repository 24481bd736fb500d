import { parseDuration } from "#shared/duration.js";

/** How long a lease lives without a heartbeat, unless LEASE_TTL says otherwise. Runners heartbeat at a quarter of it. */
export const LEASE_TTL_MS = 120_000;

/**
 * The lease lifetime of this deployment: the LEASE_TTL variable (a duration, `2m`, `10s`; between 2 s and
 * an hour), else LEASE_TTL_MS. Short ones suit tests that kill runners; long ones, runners on flaky links.
 */
export function leaseTtlMs(env: { LEASE_TTL?: string }): number {
  const configured = env.LEASE_TTL === undefined ? null : parseDuration(env.LEASE_TTL);
  if (configured === null) return LEASE_TTL_MS;
  return Math.min(3_600_000, Math.max(2_000, configured));
}
