import { MAX_HOST_CONTACTS, type AgentConfinement, type ExecConfinement, type HostContact } from "../wire/confinement.js";
import type { AgentRun } from "./events.js";

// How a loop's zones were confined (DESIGN §6.7), summed by the fold as events come (state.ts), in O(1)
// per event and bounded in size, so a receipt of 5,000 agent runs says it in as few bytes as one of 5.

/** Zone counts by what walled the zone off; `unrecorded` for a record without it (a runner older than the zones). */
export interface MechanismCounts {
  bwrap: number;
  none: number;
  unrecorded: number;
}

/**
 * How a loop's two zones were confined (DESIGN §6.7), kept by the fold in O(1) per event (invariant 9):
 * never re-read from the candidates. Its lists are bounded, so a receipt of 5,000 runs is as large as
 * one of 5.
 */
export interface ConfinementSummary {
  agent: {
    /** Agent runs by mechanism; `unobserved` counts proposals with no run the runner observed (`loopwarden step`). */
    runs: MechanismCounts & { unobserved: number };
    /** Agent runs by network policy, of those that recorded one. */
    networks: Record<AgentConfinement["network"], number>;
    /** The union of the runs' allowlists in the order first seen, at most MAX_ALLOW_UNION entries. */
    allow: string[];
    /** Allowlist entries not itemised because `allow` was full, summed over runs (one entry in two runs counts twice). */
    allow_omitted: number;
    /** The hosts the runs asked the proxy for, summed per (host, port, allowed), at most MAX_HOST_CONTACTS in the order first seen. */
    hosts: HostContact[];
    /** Host records not itemised: those each run left out, and those that came when `hosts` was full, summed over runs. */
    hosts_omitted: number;
    /** Whether any run had a per-run credential minted for it. */
    credential: boolean;
  };
  exec: {
    /** Evaluations (t0's and every reported observation) by mechanism. */
    evaluations: MechanismCounts;
    /** Evaluations by network policy, of those that recorded one. */
    networks: Record<ExecConfinement["network"], number>;
  };
  /** Where each itemised entry is in its list: the fold's hash lookups, never a scan. */
  index: { allow: Record<string, true>; hosts: Record<string, number> };
}

/** The most allowlist entries a confinement summary itemises: the most one run's allowlist holds. */
export const MAX_ALLOW_UNION = 100;

/** The summary of a loop whose t0 evaluation was confined as `zone` (absent: unrecorded), before any agent run. */
export function confinementAtCreation(zone: ExecConfinement | undefined): ConfinementSummary {
  const summary: ConfinementSummary = {
    agent: {
      runs: { bwrap: 0, none: 0, unrecorded: 0, unobserved: 0 },
      networks: { none: 0, host: 0, allow: 0 },
      allow: [],
      allow_omitted: 0,
      hosts: [],
      hosts_omitted: 0,
      credential: false,
    },
    exec: { evaluations: { bwrap: 0, none: 0, unrecorded: 0 }, networks: { none: 0, host: 0 } },
    index: { allow: {}, hosts: {} },
  };
  countEvaluation(summary, zone);
  return summary;
}

/** Counts one evaluation's exec zone into a summary the fold owns. */
export function countEvaluation(summary: ConfinementSummary, zone: ExecConfinement | undefined): void {
  if (!zone) {
    summary.exec.evaluations.unrecorded += 1;
    return;
  }
  summary.exec.evaluations[zone.mechanism] += 1;
  summary.exec.networks[zone.network] += 1;
}

/** Counts one proposal's agent run into a summary the fold owns: linear in what the run recorded (bounded by its schema), never in the loop. */
export function countAgentRun(summary: ConfinementSummary, run: AgentRun | null): void {
  const { agent, index } = summary;
  if (!run) {
    agent.runs.unobserved += 1;
    return;
  }
  const zone = run.confinement;
  if (!zone) {
    agent.runs.unrecorded += 1;
    return;
  }
  agent.runs[zone.mechanism] += 1;
  agent.networks[zone.network] += 1;
  if (zone.credential === true) agent.credential = true;
  for (const entry of zone.allow ?? []) {
    if (index.allow[entry]) continue;
    if (agent.allow.length >= MAX_ALLOW_UNION) {
      agent.allow_omitted += 1;
      continue;
    }
    index.allow[entry] = true;
    agent.allow.push(entry);
  }
  agent.hosts_omitted += zone.hosts_omitted ?? 0;
  for (const contact of zone.hosts ?? []) {
    const key = `${contact.host} ${contact.port} ${contact.allowed}`;
    const at = index.hosts[key];
    const seen = at === undefined ? undefined : agent.hosts[at];
    if (at !== undefined && seen) {
      agent.hosts[at] = {
        ...seen,
        requests: seen.requests + contact.requests,
        bytes_out: seen.bytes_out + contact.bytes_out,
        bytes_in: seen.bytes_in + contact.bytes_in,
      };
    } else if (agent.hosts.length >= MAX_HOST_CONTACTS) {
      agent.hosts_omitted += 1;
    } else {
      index.hosts[key] = agent.hosts.length;
      agent.hosts.push({ ...contact });
    }
  }
}
