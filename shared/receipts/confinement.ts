import * as z from "zod";
import type { ConfinementSummary } from "../engine/confinement-summary.js";
import { HostContact } from "../wire/confinement.js";

// What a receipt says of how the two zones were confined (DESIGN §6.7, §9): the fold's running summary
// of the log, in a stable order, with one sentence a person reads next to the verdict. A function of the
// log like every other figure of the predicate, so a verifier recomputes it and a confinement edited in
// the log no longer matches what was signed.

const Count = z.number().int().min(0);
const Mechanisms = z.strictObject({ bwrap: Count, none: Count, unrecorded: Count });

/** How a loop's zones were confined, as its receipt attests it. */
export const ConfinementAttestation = z.strictObject({
  agent: z.strictObject({
    /** Agent runs by mechanism; `unrecorded`: by a runner older than the agent zone; `unobserved`: proposals no runner ran (`step`). */
    runs: Mechanisms.extend({ unobserved: Count }),
    /** Agent runs by network policy, of those that recorded one. */
    networks: z.strictObject({ none: Count, host: Count, allow: Count }),
    /** The union of the runs' allowlists, sorted; entries past the cap counted in `allow_omitted`. */
    allow: z.array(z.string()),
    allow_omitted: Count,
    /** The hosts asked for through the proxy, summed over runs per (host, port, allowed), sorted; the rest counted in `hosts_omitted`. */
    hosts: z.array(HostContact),
    hosts_omitted: Count,
    /** Whether any run had a per-run credential minted for it. */
    credential: z.boolean(),
  }),
  exec: z.strictObject({
    /** Evaluations (t0's and every reported observation) by mechanism. */
    evaluations: Mechanisms,
    networks: z.strictObject({ none: Count, host: Count }),
  }),
  /** Whether every agent run and every evaluation recorded bwrap: false when any ran unconfined, recorded nothing, or was not run by a runner. */
  fully_confined: z.boolean(),
  /** The same in one sentence, e.g. `agent confined by bwrap in 12 of 12 runs (network: allowlist api.anthropic.com:443); gates confined by bwrap, network none`. */
  summary: z.string(),
});
export type ConfinementAttestation = z.infer<typeof ConfinementAttestation>;

/** Code-unit order: the same in every runtime (a locale's collation is not). */
const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

const count = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** What the receipt says of a loop's confinement summary (`LoopState.confinement`). */
export function confinementAttestation(summary: ConfinementSummary): ConfinementAttestation {
  const { agent, exec } = summary;
  const attested = {
    agent: {
      runs: { ...agent.runs },
      networks: { ...agent.networks },
      allow: [...agent.allow].sort(byText),
      allow_omitted: agent.allow_omitted,
      hosts: [...agent.hosts]
        .sort((a, b) => byText(a.host, b.host) || a.port - b.port || Number(b.allowed) - Number(a.allowed))
        .map((contact) => ({ ...contact })),
      hosts_omitted: agent.hosts_omitted,
      credential: agent.credential,
    },
    exec: { evaluations: { ...exec.evaluations }, networks: { ...exec.networks } },
  };
  const fullyConfined =
    agent.runs.none === 0 && agent.runs.unrecorded === 0 && agent.runs.unobserved === 0 && exec.evaluations.none === 0 && exec.evaluations.unrecorded === 0;
  return { ...attested, fully_confined: fullyConfined, summary: `${agentSentence(attested.agent)}; ${execSentence(attested.exec)}` };
}

/** Several policies each with how many runs had it, or the only one alone. */
function policies(entries: readonly [string, number][], unit: string): string {
  const seen = entries.filter(([, n]) => n > 0);
  if (seen.length === 1) return seen[0]?.[0] ?? "";
  return seen.map(([words, n]) => `${words} in ${count(n, unit)}`).join(", ");
}

function agentSentence(agent: ConfinementAttestation["agent"]): string {
  const { runs, networks } = agent;
  const total = runs.bwrap + runs.none + runs.unrecorded;
  const clauses: string[] = [];
  const details: string[] = [];
  if (runs.bwrap + runs.none > 0) {
    const allow = `allowlist ${agent.allow.length > 0 ? agent.allow.join(", ") : "(empty)"}${agent.allow_omitted > 0 ? ` and ${agent.allow_omitted} more` : ""}`;
    details.push(
      `network: ${policies(
        [
          ["none", networks.none],
          [allow, networks.allow],
          ["host (unrestricted)", networks.host],
        ],
        "run",
      )}`,
    );
    if (networks.allow > 0) {
      const reached = agent.hosts.filter((contact) => contact.allowed).length;
      const refused = agent.hosts.length - reached;
      const omitted = agent.hosts_omitted > 0 ? `, ${agent.hosts_omitted} more not itemised` : "";
      details.push(
        agent.hosts.length + agent.hosts_omitted === 0
          ? "no host asked for"
          : `${count(reached, "host")} reached, ${refused > 0 ? refused : "none"} refused${omitted}`,
      );
    }
    if (agent.credential) details.push("a per-run credential minted");
  }
  if (runs.bwrap > 0) clauses.push(`agent confined by bwrap in ${runs.bwrap} of ${count(total, "run")} (${details.join("; ")})`);
  if (runs.none > 0) {
    const isolation = ["isolation: none", ...(runs.bwrap > 0 ? [] : details)].join("; ");
    clauses.push(`the agent ran UNCONFINED in ${runs.none} of ${count(total, "run")} (${isolation})`);
  }
  if (runs.unrecorded > 0) clauses.push(`${runs.unrecorded} of ${count(total, "agent run")} recorded no confinement (a runner older than the agent zone)`);
  if (runs.unobserved > 0) {
    clauses.push(`${count(runs.unobserved, "candidate")} proposed by an agent no runner ran (loopwarden step): its confinement is unknown`);
  }
  return clauses.length > 0 ? clauses.join("; ") : "no agent run yet";
}

function execSentence(exec: ConfinementAttestation["exec"]): string {
  const { evaluations: counts, networks } = exec;
  const total = counts.bwrap + counts.none + counts.unrecorded;
  if (total === 0) return "no evaluation yet";
  const network = `network ${policies(
    [
      ["none", networks.none],
      ["host", networks.host],
    ],
    "evaluation",
  )}`;
  if (counts.bwrap === total) return `gates confined by bwrap, ${network}`;
  const of = (n: number) => `${n} of ${count(total, "evaluation")}`;
  const clauses: string[] = [];
  if (counts.bwrap > 0) clauses.push(`gates confined by bwrap in ${of(counts.bwrap)}, ${network}`);
  if (counts.none > 0) clauses.push(`gates ran UNCONFINED in ${of(counts.none)} (isolation: none${counts.bwrap > 0 ? "" : `, ${network}`})`);
  if (counts.unrecorded > 0) clauses.push(`${of(counts.unrecorded)} recorded no confinement (a runner older than the exec zone)`);
  return clauses.join("; ");
}
