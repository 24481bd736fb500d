import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { applyEvent, foldEvents, foldEventsInto, MAX_ALLOW_UNION, type ConfinementSummary, type Proposal } from "#shared/engine/index.js";
import { MAX_HOST_CONTACTS, type AgentConfinement, type ExecConfinement, type HostContact } from "#shared/wire/confinement.js";
import { AGENT_OK, LoopHarness, TEST_IDS } from "./engine-harness.js";

// The fold (DESIGN §6) is linear in the log's length and can go on from a state already folded, as a
// reader that fetches `?after=seq` does (DESIGN §4 invariant 9): both must give exactly the full fold.

/** A loop's log: `steps` iterations, each failing a subset of the fixture's tests, some with agent failures. */
function history(steps: { failing: number[]; agentFails: boolean }[]): LoopHarness {
  const harness = new LoopHarness([...TEST_IDS], { stop: { max_iterations: 1_000, no_progress: 1_000 } });
  steps.forEach((step, index) => {
    if (harness.state.halt) return;
    if (step.agentFails) harness.propose(`agent-${index}`, { agent: { exit_code: 1, timed_out: false, duration_ms: 5 } });
    else
      harness.evaluate(
        `step-${index}`,
        step.failing.map((i) => TEST_IDS[i % TEST_IDS.length] ?? ""),
      );
  });
  return harness;
}

const steps = fc.array(fc.record({ failing: fc.uniqueArray(fc.nat(4), { maxLength: 5 }), agentFails: fc.boolean() }), { maxLength: 25 });

describe("fold", () => {
  it("property: folding from any prefix's state gives the full fold, and leaves that state as it was", () => {
    fc.assert(
      fc.property(steps, fc.nat(), (items, cut) => {
        const { events } = history(items);
        const at = cut % (events.length + 1);
        const prefix = foldEvents(events.slice(0, at));
        const snapshot = structuredClone(prefix);
        const resumed = at === 0 ? foldEvents(events) : foldEvents(events.slice(at), prefix);
        expect(resumed).toEqual(foldEvents(events));
        expect(prefix).toEqual(snapshot);
      }),
      { numRuns: 150 },
    );
  });

  it("property: folding into a prefix's state in place gives the full fold, in that same object", () => {
    fc.assert(
      fc.property(steps, fc.nat(), (items, cut) => {
        const { events } = history(items);
        const at = 1 + (cut % events.length);
        const prefix = foldEvents(events.slice(0, at));
        const folded = foldEventsInto(events.slice(at), prefix);
        expect(folded).toBe(prefix);
        expect(folded).toEqual(foldEvents(events));
      }),
      { numRuns: 150 },
    );
  });

  it("folding in place event by event, as the coordinator appends, gives the full fold", () => {
    const { events } = history(Array.from({ length: 30 }, (_, index) => ({ failing: index % 3 === 0 ? [0] : [], agentFails: index % 7 === 0 })));
    let state = foldEventsInto(events.slice(0, 1), null);
    for (const event of events.slice(1)) state = foldEventsInto([event], state);
    expect(state).toEqual(foldEvents(events));
  });

  it("applyEvent leaves the state it is given as it was", () => {
    const { events } = history([
      { failing: [0], agentFails: false },
      { failing: [], agentFails: true },
      { failing: [], agentFails: false },
    ]);
    let state = foldEvents(events.slice(0, 1));
    for (const event of events.slice(1)) {
      const before = structuredClone(state);
      const after = applyEvent(state, event);
      expect(state).toEqual(before);
      state = after;
    }
    expect(state).toEqual(foldEvents(events));
  });
});

// How each zone was confined (DESIGN §6.7) is summed by the fold as events come (invariant 9): what a
// receipt attests. Runs and evaluations that predate the zones recorded nothing, and must still fold.

const ANTHROPIC = "api.anthropic.com:443";
/** An agent run confined as `zone`. */
const run = (zone?: AgentConfinement): Partial<Proposal> => ({ agent: zone ? { ...AGENT_OK, confinement: zone } : AGENT_OK });
const contact = (host: string, allowed: boolean, requests = 1): HostContact => ({
  host,
  port: 443,
  allowed,
  requests,
  bytes_out: 10 * requests,
  bytes_in: 100 * requests,
});
const BWRAP_ALLOW: AgentConfinement = { mechanism: "bwrap", network: "allow", allow: [ANTHROPIC] };
const EXEC_BWRAP: ExecConfinement = { mechanism: "bwrap", network: "none" };

/** A loop whose t0 was evaluated in `t0Zone`, then one evaluated candidate per entry (a step proposal for `null`). */
function confinedLoop(t0Zone: ExecConfinement | undefined, runs: { agent: AgentConfinement | undefined | null; exec?: ExecConfinement }[]): LoopHarness {
  const harness = new LoopHarness([...TEST_IDS], { stop: { max_iterations: 1_000, no_progress: 1_000 } }, t0Zone ? { exec_zone: t0Zone } : {});
  runs.forEach((entry, index) => {
    const change = entry.agent === null ? { agent: null, proposer: { kind: "step" as const } } : run(entry.agent);
    harness.evaluate(`run-${index}`, [...TEST_IDS], change, entry.exec ? { exec_zone: entry.exec } : {});
  });
  return harness;
}

/** Hosts `prefix-0` … `prefix-(n-1)`, each asked for once and let through. */
const hostsNamed = (prefix: string, n: number) => Array.from({ length: n }, (_, index) => contact(`${prefix}-${index}.example`, true));

describe("the fold's confinement summary", () => {
  const none = { bwrap: 0, none: 0, unrecorded: 0 };
  it.each<{ name: string; loop: () => LoopHarness; agent: Partial<ConfinementSummary["agent"]>; exec: ConfinementSummary["exec"] }>([
    {
      name: "an old log, with no confinement recorded anywhere: every run and evaluation unrecorded",
      loop: () => confinedLoop(undefined, [{ agent: undefined }, { agent: undefined }, { agent: undefined }]),
      agent: {
        runs: { ...none, unrecorded: 3, unobserved: 0 },
        networks: { none: 0, host: 0, allow: 0 },
        allow: [],
        hosts: [],
        hosts_omitted: 0,
        credential: false,
      },
      exec: { evaluations: { ...none, unrecorded: 4 }, networks: { none: 0, host: 0 } },
    },
    {
      name: "runs confined by bwrap behind an allowlist: hosts summed over runs per (host, port, allowed), a credential minted once",
      loop: () =>
        confinedLoop(EXEC_BWRAP, [
          { agent: { ...BWRAP_ALLOW, hosts: [contact("api.anthropic.com", true, 2)] }, exec: EXEC_BWRAP },
          {
            agent: {
              ...BWRAP_ALLOW,
              allow: [ANTHROPIC, "registry.npmjs.org:443"],
              hosts: [contact("api.anthropic.com", true, 3), contact("evil.example", false)],
              credential: true,
            },
            exec: EXEC_BWRAP,
          },
        ]),
      agent: {
        runs: { ...none, bwrap: 2, unobserved: 0 },
        networks: { none: 0, host: 0, allow: 2 },
        allow: [ANTHROPIC, "registry.npmjs.org:443"],
        hosts: [contact("api.anthropic.com", true, 5), contact("evil.example", false)],
        hosts_omitted: 0,
        credential: true,
      },
      exec: { evaluations: { ...none, bwrap: 3 }, networks: { none: 3, host: 0 } },
    },
    {
      name: "isolation: none, with the host's network, and a t0 that recorded nothing",
      loop: () =>
        confinedLoop(undefined, [
          { agent: { mechanism: "none", network: "host" }, exec: { mechanism: "none", network: "host" } },
          { agent: { mechanism: "none", network: "host" }, exec: { mechanism: "none", network: "host" } },
        ]),
      agent: { runs: { ...none, none: 2, unobserved: 0 }, networks: { none: 0, host: 2, allow: 0 }, allow: [], hosts: [], credential: false },
      exec: { evaluations: { bwrap: 0, none: 2, unrecorded: 1 }, networks: { none: 0, host: 2 } },
    },
    {
      name: "a mix: a confined run, an old runner's, and a candidate proposed through step (no run observed)",
      loop: () =>
        confinedLoop(EXEC_BWRAP, [
          { agent: { mechanism: "bwrap", network: "none" }, exec: EXEC_BWRAP },
          { agent: undefined },
          { agent: null, exec: EXEC_BWRAP },
        ]),
      agent: { runs: { bwrap: 1, none: 0, unrecorded: 1, unobserved: 1 }, networks: { none: 1, host: 0, allow: 0 } },
      exec: { evaluations: { bwrap: 3, none: 0, unrecorded: 1 }, networks: { none: 3, host: 0 } },
    },
    {
      name: "hosts past MAX_HOST_CONTACTS: the list stops at the cap, the rest (and what each run left out) counted",
      loop: () =>
        confinedLoop(EXEC_BWRAP, [
          { agent: { ...BWRAP_ALLOW, hosts: hostsNamed("a", 60), hosts_omitted: 3 } },
          { agent: { ...BWRAP_ALLOW, hosts: [...hostsNamed("a", 10), ...hostsNamed("b", 60)], hosts_omitted: 4 } },
        ]),
      agent: { hosts_omitted: 3 + 4 + 20, allow_omitted: 0 },
      exec: { evaluations: { ...none, bwrap: 1, unrecorded: 2 }, networks: { none: 1, host: 0 } },
    },
    {
      name: "allowlists whose union passes MAX_ALLOW_UNION: the union stops at the cap, the rest counted",
      loop: () =>
        confinedLoop(EXEC_BWRAP, [
          { agent: { ...BWRAP_ALLOW, allow: Array.from({ length: 100 }, (_, index) => `a${index}.example:443`) }, exec: EXEC_BWRAP },
          { agent: { ...BWRAP_ALLOW, allow: Array.from({ length: 100 }, (_, index) => `a${index + 50}.example:443`) }, exec: EXEC_BWRAP },
        ]),
      agent: { allow_omitted: 50 },
      exec: { evaluations: { ...none, bwrap: 3 }, networks: { none: 3, host: 0 } },
    },
  ])("$name", ({ loop, agent, exec }) => {
    const { events } = loop();
    const state = foldEvents(events);
    expect(state?.confinement.agent).toMatchObject(agent);
    expect(state?.confinement.exec).toEqual(exec);
    expect(state?.confinement.agent.hosts.length).toBeLessThanOrEqual(MAX_HOST_CONTACTS);
    expect(state?.confinement.agent.allow.length).toBeLessThanOrEqual(MAX_ALLOW_UNION);
    // Read incrementally (`?after=seq`), from any prefix: the same summary, and the prefix's state untouched.
    for (let cut = 1; cut < events.length; cut++) {
      const prefix = foldEvents(events.slice(0, cut));
      const snapshot = structuredClone(prefix);
      expect(foldEvents(events.slice(cut), prefix)?.confinement).toEqual(state?.confinement);
      expect(prefix).toEqual(snapshot);
    }
  });

  it("the hosts past the cap are the later ones: the first MAX_HOST_CONTACTS seen stay itemised, with their sums", () => {
    const state = confinedLoop(EXEC_BWRAP, [
      { agent: { ...BWRAP_ALLOW, hosts: hostsNamed("a", 60) } },
      { agent: { ...BWRAP_ALLOW, hosts: [...hostsNamed("a", 10), ...hostsNamed("b", 60)] } },
    ]).state;
    const { hosts } = state.confinement.agent;
    expect(hosts).toHaveLength(MAX_HOST_CONTACTS);
    expect(hosts[0]).toEqual({ ...contact("a-0.example", true), requests: 2, bytes_out: 20, bytes_in: 200 });
    expect(hosts.at(-1)?.host).toBe("b-39.example");
  });
});
