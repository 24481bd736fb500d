import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createLoop, grantLease, proposeCandidate, reportObservation, stepwiseFold, type EventDraft, type LoopState } from "#shared/engine/index.js";
import { receiptStatement } from "#shared/receipts/index.js";
import { sha256Hex } from "#shared/hash.js";
import { canonicalJson } from "#shared/canonical-json.js";
import type { ArtifactRef, FullObservation } from "#shared/wire/observation.js";
import { CANDIDATES_PER_PAGE, FILES_PER_CANDIDATE, receiptPage } from "../../worker/src/page/receipt-page.js";
import type { AgentConfinement, ExecConfinement } from "#shared/wire/confinement.js";
import { AGENT_OK, commitOf, contractOf, LoopHarness, proposalOf, TEST_IDS } from "./engine-harness.js";

// The receipt page lists every candidate's files (DESIGN §9, §10) and stays bounded: t0's and the best's
// in full, every other candidate's failing gate log first and at most FILES_PER_CANDIDATE links a row,
// CANDIDATES_PER_PAGE rows a page. A loop of 5,000 candidates makes 25 pages of the same size, not one
// page 25 times as large.

const [A, B] = TEST_IDS;
const LOOP_ID = "lp_0123456789abcdef01234567";
const RECEIPT = `rc_${"a".repeat(32)}`;
const ref = (name: string, salt: string): ArtifactRef => ({
  sha256: createHash("sha256").update(`${name} ${salt}`).digest("hex"),
  size: 100,
  name,
  content_type: "text/plain; charset=utf-8",
});

/** An observation where `failing` fail, its gate's log and `files` (as the contract's artifacts) stored. */
function observed(failing: readonly string[], salt: string, files: number): FullObservation {
  return {
    gates: [{ name: "unit", exit_code: failing.length > 0 ? 1 : 0, signal: null, timed_out: false, duration_ms: 5, log: ref("gate-unit.log", salt) }],
    tests: { passing: TEST_IDS.filter((id) => !failing.includes(id)), failing: [...failing] },
    artifacts: Array.from({ length: files }, (_, index) => ref(`profile/run-${index}.cpuprofile`, salt)),
  };
}

/**
 * A loop of `count` candidates, each with `files` files: the second is promoted (it fixes B), every
 * other rejected (no improvement); folded once, as the coordinator folds a log. t0 fails A and B and
 * stored its own log and profile. The first three are decided by the engine's commands; the rest repeat
 * the third's events under their own ids (the commands cost what the loop holds on every call, which a
 * page test need not pay 5,000 times).
 */
function loopOf(count: number, files: number): LoopState {
  const fold = stepwiseFold();
  let state: LoopState | undefined;
  let clock = Date.parse("2026-03-01T09:00:00.000Z");
  const at = () => new Date((clock += 1_000)).toISOString();
  const apply = (events: readonly EventDraft[]) => {
    for (const event of events) state = fold.apply(event);
    return events;
  };
  const contract = contractOf({ stop: { max_iterations: 100_000, no_progress: 100_000 } });
  const created = createLoop({
    loop_id: LOOP_ID,
    contract,
    contract_hash: sha256Hex(canonicalJson(contract)),
    t0: { commit: commitOf("t0"), observation: observed([A, B], "t0", 1) },
    at: at(),
  });
  if (!created.ok) throw new Error(created.error.message);
  apply(created.events);
  let template: EventDraft[] = [];
  for (let index = 1; index <= Math.min(count, 3); index++) {
    if (!state) throw new Error("no state");
    const proposed = proposeCandidate(state, proposalOf(`c${index}`), { request_hash: `h${index}`, at: at() });
    if (!proposed.ok) throw new Error(proposed.error.message);
    template = [...apply(proposed.events)];
    const leased = grantLease(state, { runner_id: "runner", labels: {}, at: at(), ttl_ms: 60_000 });
    if (!leased.ok || !leased.value) throw new Error("no lease");
    template.push(...apply(leased.events));
    const { lease_id, fencing_token } = leased.value;
    const observation = observed(index === 1 ? [A, B] : [A], `c${index}`, files);
    const reported = reportObservation(state, { lease_id, fencing_token, observation, request_hash: `r${index}`, at: at() });
    if (!reported.ok) throw new Error(reported.error.message);
    template.push(...apply(reported.events));
  }
  for (let index = 4; index <= count; index++) {
    const ids = { candidate_id: `c${index}` };
    apply(
      template.map((event) => {
        const data = { ...event.data, ...ids } as Record<string, unknown>;
        if ("idempotency_key" in data) Object.assign(data, { idempotency_key: `key-c${index}`, commit: commitOf(`c${index}`) });
        if ("lease_id" in data) Object.assign(data, { lease_id: `${LOOP_ID}-L${index}`, fencing_token: index });
        if ("observation" in data) data.observation = observed([A], `c${index}`, files);
        return { ...event, at: at(), data } as EventDraft;
      }),
    );
  }
  if (!state) throw new Error("no state");
  return state;
}

function render(state: LoopState, page?: number, files?: string): string {
  const statement = receiptStatement(state, { seq: 1, hash: "0".repeat(64) }, { kind: "interim", issued_at: "2026-03-02T00:00:00.000Z", version: "0.0.0" });
  return receiptPage({ receiptId: RECEIPT, statement, state, url: "http://127.0.0.1/r/x", ...(page ? { page } : {}), ...(files ? { files } : {}) }).toString();
}

/** The rows of the candidates' table. */
function candidateRows(page: string): string[] {
  const table = /<h2 id="candidates">Candidates<\/h2>\s*<table>(.*?)<\/table>/s.exec(page)?.[1] ?? "";
  return [...table.matchAll(/<tr><td>(c\d+)<\/td>.*?<\/tr>/gs)].map((match) => match[0]);
}

describe("the receipt page's files", () => {
  it("lists t0's and the best's files in full and links each candidate's, its failing gate's log first", () => {
    const state = loopOf(3, 2);
    const page = render(state);
    const files = (heading: string) => /<table>(.*?)<\/table>/s.exec(page.slice(page.indexOf(heading)))?.[1] ?? "";
    expect(files("<h2>Files stored with the best</h2>")).toContain(`/files/${ref("profile/run-1.cpuprofile", "c2").sha256}`);
    expect(files("<h2>Files stored with t0 (the baseline)</h2>")).toContain(`/files/${ref("profile/run-0.cpuprofile", "t0").sha256}`);
    const rows = candidateRows(page);
    expect(rows).toHaveLength(3);
    // c1, rejected: its failing gate's log first, marked; then its files.
    const links = [...(rows[0] ?? "").matchAll(/<a href="\/r\/rc_a{32}\/files\/([0-9a-f]{64})"( class="rejected")?/g)].map((match) => [
      match[1],
      match[2] !== undefined,
    ]);
    expect(links).toEqual([
      [ref("gate-unit.log", "c1").sha256, true],
      [ref("profile/run-0.cpuprofile", "c1").sha256, false],
      [ref("profile/run-1.cpuprofile", "c1").sha256, false],
    ]);
    expect(page).not.toContain("data-pages");
  });

  it("caps a row's links at FILES_PER_CANDIDATE and links the page that lists the rest, with the command that does", () => {
    const page = render(loopOf(1, 10));
    const [row] = candidateRows(page);
    expect(row?.match(/<a href="\/r\/rc_a{32}\/files\//g)).toHaveLength(FILES_PER_CANDIDATE);
    expect(row).toContain(`<a href="/r/${RECEIPT}?files=c1#files">+${11 - FILES_PER_CANDIDATE} more</a>`);
    expect(row).toContain(`<code>loopwarden artifacts c1 ${LOOP_ID}</code>`);
    // The page asked for c1's files lists all 11 of them, each linked.
    const all = /<h2 id="files">Files stored with c1<\/h2>\s*<table>(.*?)<\/table>/s.exec(render(loopOf(1, 10), undefined, "c1"))?.[1] ?? "";
    expect(all.match(/<a href="\/r\/rc_a{32}\/files\/[0-9a-f]{64}">/g)).toHaveLength(11);
    expect(page).not.toContain('id="files"');
  });

  it("pages a loop of 5,000 candidates: each page lists CANDIDATES_PER_PAGE of them and is as large as the first", () => {
    const state = loopOf(5_000, 10);
    const first = render(state);
    const last = render(state, 25);
    expect(candidateRows(first)).toHaveLength(CANDIDATES_PER_PAGE);
    expect(candidateRows(first)[0]).toContain("<td>c1</td>");
    expect(candidateRows(last).map((row) => /<td>(c\d+)<\/td>/.exec(row)?.[1])).toEqual(
      Array.from({ length: CANDIDATES_PER_PAGE }, (_, index) => `c${4_801 + index}`),
    );
    expect(first).toContain("Candidates 1–200 of 5000 (page 1 of 25)");
    expect(first).toContain('href="/r/rc_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa?page=2#candidates"');
    expect(last).toContain("Candidates 4801–5000 of 5000 (page 25 of 25)");
    // A page past the last is the last; the best's files are on every page.
    expect(candidateRows(render(state, 99))).toEqual(candidateRows(last));
    expect(last).toContain("<h2>Files stored with the best</h2>");
    // Bounded: every row's links are capped, so a page of 200 rows costs about what 200 rows cost, whatever the loop.
    const small = render(loopOf(CANDIDATES_PER_PAGE, 10));
    expect(first.length).toBeLessThan(small.length * 2);
    expect(first.length).toBeLessThan(1024 * 1024);
  }, 60_000);
});

describe("the receipt page's confinement (DESIGN §6.7)", () => {
  /** A loop where c1 fixes A and c2 fixes B, c2's agent run and evaluation confined as given (c1's and t0's by bwrap). */
  function loop(agent: AgentConfinement | undefined, exec: ExecConfinement | undefined): LoopState {
    const bwrap: ExecConfinement = { mechanism: "bwrap", network: "none" };
    const harness = new LoopHarness([A, B], {}, { exec_zone: bwrap });
    harness.evaluate("c1", [B], { agent: { ...AGENT_OK, confinement: { mechanism: "bwrap", network: "none" } } }, { exec_zone: bwrap });
    harness.evaluate("c2", [], { agent: agent ? { ...AGENT_OK, confinement: agent } : AGENT_OK }, exec ? { exec_zone: exec } : {});
    return harness.state;
  }
  /** The paragraph right after the halt line; empty when there is none there. */
  const besideVerdict = (page: string) => {
    const line = /<p><strong>Halted: [^\n]*\n(<p class="confinement[^\n]*<\/p>)\n/.exec(page);
    return line?.[1] ?? "";
  };

  it("says every run was confined by bwrap, unmarked, when all were", () => {
    const page = render(loop({ mechanism: "bwrap", network: "none" }, { mechanism: "bwrap", network: "none" }));
    expect(besideVerdict(page)).toBe(
      '<p class="confinement" data-confinement="confined"><strong>Confinement:</strong> agent confined by bwrap in 2 of 2 runs (network: none); gates confined by bwrap, network none.</p>',
    );
    expect(page).not.toContain("UNCONFINED");
  });

  it("marks an agent that ran unconfined beside the verdict and in its candidate's row", () => {
    const page = render(loop({ mechanism: "none", network: "host" }, { mechanism: "none", network: "host" }));
    const line = besideVerdict(page);
    expect(line).toContain('data-confinement="unconfined"');
    expect(line).toContain("<strong>⚠ Not every run was confined:</strong>");
    expect(line).toContain("the agent ran UNCONFINED in 1 of 2 runs (isolation: none)");
    const rows = candidateRows(page);
    expect(rows[1]).toContain('<span class="unconfined-mark">(agent and gates UNCONFINED)</span>');
    expect(rows[0]).not.toContain("UNCONFINED");
  });

  it("marks a run whose runner recorded no confinement", () => {
    const line = besideVerdict(render(loop(undefined, undefined)));
    expect(line).toContain('data-confinement="unconfined"');
    expect(line).toContain("1 of 2 agent runs recorded no confinement (a runner older than the agent zone)");
    expect(line).toContain("1 of 3 evaluations recorded no confinement");
  });
});

describe("the receipt page's scope (DESIGN §6.4)", () => {
  /** The scope paragraph of a page: the one marked `data-scope`. */
  const scopeOf = (page: string) => /<p class="confinement[^"]*" data-scope="[^\n]*<\/p>/.exec(page)?.[0] ?? "";
  const changedPaths = (paths: string[]) => ({
    protected_files: {},
    coverage_percent: null,
    contract: null,
    changed_paths: { against: commitOf("t0"), paths, total: paths.length },
  });

  it("names a scoped loop's globs, unmarked", () => {
    const harness = new LoopHarness([A], { scope: ["src/**", "lib/*.js"] });
    harness.evaluate("c1", [], {}, { guards: changedPaths(["src/a.js"]) });
    expect(scopeOf(render(harness.state))).toBe(
      '<p class="confinement" data-scope="scoped"><strong>Scope:</strong> <code>src/**</code>, <code>lib/*.js</code>. A candidate that changed any other path could not be promoted.</p>',
    );
  });

  it("marks a loop without a scope: only the protected set guarded the check", () => {
    const harness = new LoopHarness([A]);
    harness.evaluate("c1", []);
    const line = scopeOf(render(harness.state));
    expect(line).toContain('class="confinement unconfined" data-scope="none"');
    expect(line).toContain("<strong>⚠ No scope:</strong>");
  });

  it("says a receipt from before scopes attests none", () => {
    const harness = new LoopHarness([A]);
    const statement = receiptStatement(
      harness.state,
      { seq: 1, hash: "0".repeat(64) },
      { kind: "interim", issued_at: "2026-03-02T00:00:00.000Z", version: "0.0.0" },
    );
    const { scope: _scope, ...predicate } = statement.predicate;
    const page = receiptPage({ receiptId: RECEIPT, statement: { ...statement, predicate }, state: harness.state, url: "http://127.0.0.1/r/x" }).toString();
    expect(scopeOf(page)).toContain('data-scope="unattested"');
  });
});
