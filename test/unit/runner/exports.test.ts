import { describe, expect, it } from "vitest";
import { foldEvents, type EventDraft, type Verdict } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract } from "#shared/wire/contract.js";
import type { GateResult, Observation } from "#shared/wire/observation.js";
import { benchmarkCsv, candidatesJsonl, csvRecord, exportLoop, resultsTsv, tsvField, type CandidateLine } from "../../../runner/src/loop/export-formats.js";
import { AGENT_FAILED, AGENT_OK, LoopHarness, TEST_IDS, commitOf, observationOf, optimizeLoop, readings } from "../engine-harness.js";

// A realistic history driven through the shared engine: a unit gate with per-test ids, a benchmark
// gate and a soft lint gate that only run once the unit gate passes, a reclaimed lease, a regression
// of a test whose id holds commas, quotes, a newline and non-ASCII text, an agent driving `step`, a
// failed agent with an invalid report, an empty change, and a last promotion, with an agent report,
// that halts the loop.

/** A test id that a CSV or TSV writer could easily get wrong. */
const TRICKY = 'parse "quoted", with commas\nand a newline — ünïcødé ✓';

const CONTRACT = {
  name: "textkit",
  gates: [
    { name: "unit", run: "node --test", tests: { junit: "junit.xml" } },
    { name: "bench", run: "node bench.js" },
    { name: "lint", run: "node lint.js", soft: { metric: "lint_errors", max: 0 } },
  ],
};

/** What the agent of c5 reported; its description holds a tab and a newline. */
const REPORT = {
  agent: { provider: "anthropic", model: "claude-x" },
  cost: { usd: 0.41, input_tokens: 52_000, output_tokens: 3_100 },
  context_files: [{ path: "src/text.js", sha256: sha256Hex("src") }],
  description: "split on whitespace runs\tand strip\nleading dashes",
};

const UNIT_LOG = { sha256: sha256Hex("unit log"), size: 8, name: "unit.log", content_type: "text/plain" };
const PROFILE = { sha256: sha256Hex("unit profile"), size: 1_234, name: "profile/unit.cpuprofile", content_type: "application/json" };

function gate(name: string, exitCode: number, durationMs: number, extra: Partial<GateResult> = {}): GateResult {
  return { name, exit_code: exitCode, signal: null, timed_out: false, duration_ms: durationMs, log: null, ...extra };
}

/** An observation of the fixture's tests plus `TRICKY`, where exactly `failing` fail. */
function observed(failing: readonly string[], gates: GateResult[]): Observation {
  const all = [...TEST_IDS, TRICKY];
  return { gates, tests: { passing: all.filter((id) => !failing.includes(id)), failing: [...failing] } };
}

function lease(loop: LoopHarness) {
  const leased = loop.lease();
  if (!leased.ok || !leased.value) throw new Error("no lease granted");
  return leased.value;
}

function report(loop: LoopHarness, observation: Observation, held = lease(loop)): void {
  const reported = loop.report(held, observation);
  if (!reported.ok) throw new Error(`report refused: ${reported.error.code}`);
}

function propose(loop: LoopHarness, ...args: Parameters<LoopHarness["propose"]>): void {
  const proposed = loop.propose(...args);
  if (!proposed.ok) throw new Error(`propose refused: ${proposed.error.code}`);
}

/** t0: two failing tests, so the unit gate fails and the gates after it never run. */
function history(): LoopHarness {
  const loop = new LoopHarness(["suite.a", "suite.b"], CONTRACT);
  // c1 fixes suite.a (and a test that could not load before now reports); its first lease is reclaimed.
  propose(loop, "c1");
  lease(loop);
  loop.expire(61_000);
  report(loop, { ...observed(["suite.b"], [gate("unit", 1, 1_500, { log: UNIT_LOG })]), artifacts: [PROFILE] });
  // c2, from an agent driving `step`, breaks that test: rejected as a regression.
  propose(loop, "c2", { proposer: { kind: "step" }, agent: null });
  report(loop, observed(["suite.b", TRICKY], [gate("unit", 1, 1_400)]));
  // c3: the agent command failed; c4: it changed nothing. Neither is evaluated.
  propose(loop, "c3", { agent: AGENT_FAILED, agent_report_error: "the agent report is not valid JSON" });
  propose(loop, "c4", { empty: true });
  // c5 fixes the rest: every gate runs and passes, the benchmark prints its metrics.
  propose(loop, "c5", { agent: { ...AGENT_OK, duration_ms: 42_000 }, agent_report: REPORT });
  report(
    loop,
    observed(
      [],
      [
        gate("unit", 0, 1_600),
        gate("bench", 0, 2_500, { metrics: { parse_ms: 12.41, peak_rss_mb: 614.4 } }),
        gate("lint", 1, 700, { metrics: { lint_errors: 0 } }),
      ],
    ),
  );
  return loop;
}

/**
 * A strict RFC 4180 reader: records end with CRLF; a field is quoted or holds no quote, comma, CR or
 * LF; inside quotes a quote is doubled. Anything else throws, so a sloppy writer cannot pass.
 */
function readCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let i = 0;
  for (;;) {
    let field = "";
    if (text[i] === '"') {
      for (i++; ;) {
        if (i >= text.length) throw new Error("unterminated quoted field");
        if (text[i] !== '"') field += text[i++];
        else if (text[i + 1] === '"') {
          field += '"';
          i += 2;
        } else {
          i++;
          break;
        }
      }
    } else {
      while (i < text.length && text[i] !== "," && text[i] !== "\r") {
        if (text[i] === '"' || text[i] === "\n") throw new Error(`an unquoted field holds ${JSON.stringify(text[i])} at ${i}`);
        field += text[i++];
      }
    }
    record.push(field);
    if (text[i] === ",") {
      i++;
      continue;
    }
    if (text.slice(i, i + 2) !== "\r\n") throw new Error(`expected a comma or CRLF at ${i}`);
    records.push(record);
    record = [];
    i += 2;
    if (i === text.length) return records;
  }
}

describe("candidates.jsonl", () => {
  it("has one object per candidate in proposal order, with its verdict, agent run, gates and test counts", () => {
    const loop = history();
    const agent = { kind: "command", command: "agent --one-change" };
    const unitGate = (duration_ms: number, exit_code: number, log_sha256: string | null = null) => ({
      name: "unit",
      exit_code,
      signal: null,
      timed_out: false,
      duration_ms,
      log_sha256,
      metrics: {},
      report_error: null,
    });
    const expected = [
      {
        candidate_id: "c1",
        parent: "t0",
        commit: commitOf("c1"),
        proposed_at: "2026-03-01T09:00:02.000Z",
        decided_at: "2026-03-01T09:01:06.000Z",
        status: "promoted",
        decision: "promoted",
        reason: "fewer_failures",
        detail: "failing tests 2 → 1, gates 3 → 3",
        failing_before: 5,
        failing_after: 4,
        regressed: [],
        metric: null,
        agent: { exit_code: 0, timed_out: false, duration_ms: 1_000 },
        agent_report: null,
        agent_report_error: null,
        proposer: agent,
        gates: [unitGate(1_500, 1, UNIT_LOG.sha256)],
        tests: { passing: 5, failing: 4 },
        artifacts: [{ name: PROFILE.name, sha256: PROFILE.sha256, size: PROFILE.size }],
      },
      {
        candidate_id: "c2",
        parent: "c1",
        commit: commitOf("c2"),
        proposed_at: "2026-03-01T09:01:07.000Z",
        decided_at: "2026-03-01T09:01:09.000Z",
        status: "rejected",
        decision: "rejected",
        reason: "regressed",
        detail: `broke 1 passing test(s): ${TRICKY}`,
        failing_before: 4,
        failing_after: 5,
        regressed: [TRICKY],
        metric: null,
        agent: null,
        agent_report: null,
        agent_report_error: null,
        proposer: { kind: "step" },
        gates: [unitGate(1_400, 1)],
        tests: { passing: 4, failing: 5 },
        artifacts: [],
      },
      {
        candidate_id: "c3",
        parent: "c1",
        commit: commitOf("c3"),
        proposed_at: "2026-03-01T09:01:10.000Z",
        decided_at: "2026-03-01T09:01:10.000Z",
        status: "rejected",
        decision: "rejected",
        reason: "agent_failed",
        detail: "the agent command exited with 2",
        failing_before: 4,
        failing_after: null,
        regressed: [],
        metric: null,
        agent: { exit_code: 2, timed_out: false, duration_ms: 1_000 },
        agent_report: null,
        agent_report_error: "the agent report is not valid JSON",
        proposer: agent,
        gates: [],
        tests: null,
        artifacts: [],
      },
      {
        candidate_id: "c4",
        parent: "c1",
        commit: commitOf("c4"),
        proposed_at: "2026-03-01T09:01:11.000Z",
        decided_at: "2026-03-01T09:01:11.000Z",
        status: "rejected",
        decision: "rejected",
        reason: "no_change",
        detail: "the agent changed nothing",
        failing_before: 4,
        failing_after: null,
        regressed: [],
        metric: null,
        agent: { exit_code: 0, timed_out: false, duration_ms: 1_000 },
        agent_report: null,
        agent_report_error: null,
        proposer: agent,
        gates: [],
        tests: null,
        artifacts: [],
      },
      {
        candidate_id: "c5",
        parent: "c1",
        commit: commitOf("c5"),
        proposed_at: "2026-03-01T09:01:12.000Z",
        decided_at: "2026-03-01T09:01:14.000Z",
        status: "promoted",
        decision: "promoted",
        reason: "fewer_failures",
        detail: "failing tests 1 → 0, gates 3 → 0",
        failing_before: 4,
        failing_after: 0,
        regressed: [],
        metric: null,
        agent: { exit_code: 0, timed_out: false, duration_ms: 42_000 },
        agent_report: REPORT,
        agent_report_error: null,
        proposer: agent,
        gates: [
          unitGate(1_600, 0),
          { ...unitGate(2_500, 0), name: "bench", metrics: { parse_ms: 12.41, peak_rss_mb: 614.4 } },
          { ...unitGate(700, 1), name: "lint", metrics: { lint_errors: 0 } },
        ],
        tests: { passing: 9, failing: 0 },
        artifacts: [],
      },
    ];
    const text = candidatesJsonl(loop.events);
    // Exact contents, key order included; a newline inside a value is escaped, so each line is one object.
    expect(text).toBe(expected.map((line) => `${JSON.stringify(line)}\n`).join(""));
    expect(
      text
        .split("\n")
        .slice(0, -1)
        .map((line) => JSON.parse(line) as unknown),
    ).toEqual(expected);
  });

  it("lists a candidate still being evaluated, without a verdict or an observation", () => {
    const loop = new LoopHarness(["suite.a"]);
    propose(loop, "c1");
    lease(loop);
    const [line] = candidatesJsonl(loop.events).split("\n");
    expect(JSON.parse(line ?? "")).toMatchObject({
      candidate_id: "c1",
      status: "leased",
      decided_at: null,
      decision: null,
      reason: null,
      failing_after: null,
      regressed: [],
      metric: null,
      gates: [],
      tests: null,
      artifacts: [],
    });
    expect(resultsTsv(loop.events).split("\n")).toHaveLength(3); // header, t0, and the final newline
    expect(benchmarkCsv(loop.events).split("\r\n")).toHaveLength(3);
  });
});

describe("benchmark.csv", () => {
  it("has one row per evaluated commit, t0 first, a column per gate metric and per gate duration, and test counts", () => {
    const text = benchmarkCsv(history().events);
    expect(text).toBe(
      [
        "candidate_id,commit,status,bench.parse_ms,bench.peak_rss_mb,lint.lint_errors,unit.duration_ms,bench.duration_ms,lint.duration_ms,failing,passing",
        // t0 stopped at the failing unit gate: the gates after it did not run, their cells are empty.
        `t0,${commitOf("t0")},baseline,,,,120,,,5,3`,
        `c1,${commitOf("c1")},promoted,,,,1500,,,4,5`,
        `c2,${commitOf("c2")},rejected,,,,1400,,,5,4`,
        // c3 (agent failed) and c4 (no change) were never evaluated.
        `c5,${commitOf("c5")},promoted,12.41,614.4,0,1600,2500,700,0,9`,
        "",
      ].join("\r\n"),
    );
    const records = readCsv(text);
    expect(records).toHaveLength(5);
    for (const record of records) expect(record).toHaveLength(11);
  });

  it("quotes fields per RFC 4180, so commas, quotes, line breaks and non-ASCII text round-trip", () => {
    expect(csvRecord(["a,b", 'say "hi"', "plain", ""])).toBe('"a,b","say ""hi""",plain,\r\n');
    const tricky = ["plain", "a,b", 'say "hi"', '"', "line 1\nline 2", "crlf\r\nend", "lone\rcr", "ünïcødé ✓ 😀", "", " padded ", TRICKY];
    expect(readCsv(csvRecord(tricky) + csvRecord(["next"]))).toEqual([tricky, ["next"]]);
    // The reader is strict: what a sloppy writer produces does not parse.
    expect(() => readCsv("a,b\nc\r\n")).toThrow(/unquoted field/);
    expect(() => readCsv('say "hi"\r\n')).toThrow(/unquoted field/);
  });
});

describe("results.tsv", () => {
  it("follows autoresearch's ledger: commit, metric, memory_gb, status keep/discard/crash, description", () => {
    const text = resultsTsv(history().events);
    const short = (label: string) => commitOf(label).slice(0, 7);
    expect(text).toBe(
      [
        "commit\tfailing_tests\tmemory_gb\tstatus\tdescription",
        `${short("t0")}\t5\t0.0\tkeep\tbaseline`,
        `${short("c1")}\t4\t0.0\tkeep\tfailing tests 2 → 1, gates 3 → 3`,
        // The newline in the test id became a space; everything else is kept, non-ASCII text included.
        `${short("c2")}\t5\t0.0\tdiscard\tbroke 1 passing test(s): parse "quoted", with commas and a newline — ünïcødé ✓`,
        `${short("c3")}\t0\t0.0\tcrash\tthe agent command exited with 2`,
        // An empty change is its parent's tree: c1's figures.
        `${short("c4")}\t4\t0.0\tdiscard\tthe agent changed nothing`,
        // peak_rss_mb 614.4 → 0.6 GB; the agent's own description, its tab and newline made spaces.
        `${short("c5")}\t0\t0.6\tkeep\tsplit on whitespace runs and strip leading dashes`,
        "",
      ].join("\n"),
    );
    for (const line of text.split("\n").slice(0, -1)) expect(line.split("\t")).toHaveLength(5);
  });

  it("names the metric column after the contract's primary metric and writes it as autoresearch does", () => {
    const [created, ...rest] = history().events;
    if (created?.type !== "loop_created") throw new Error("the log starts with loop_created");
    const contract = Contract.parse({ ...created.data.contract, metric: { run: "node bench.js", name: "parse_ms", direction: "lower" } });
    const events: EventDraft[] = [{ ...created, data: { ...created.data, contract } }, ...rest];
    expect(
      resultsTsv(events)
        .split("\n")
        .map((line) => line.split("\t").slice(0, 4).join(" ")),
    ).toEqual([
      "commit parse_ms memory_gb status",
      // Unmeasured (the benchmark gate did not run) and crashed rows carry autoresearch's 0.000000.
      `${commitOf("t0").slice(0, 7)} 0.000000 0.0 keep`,
      `${commitOf("c1").slice(0, 7)} 0.000000 0.0 keep`,
      `${commitOf("c2").slice(0, 7)} 0.000000 0.0 discard`,
      `${commitOf("c3").slice(0, 7)} 0.000000 0.0 crash`,
      `${commitOf("c4").slice(0, 7)} 0.000000 0.0 discard`,
      `${commitOf("c5").slice(0, 7)} 12.410000 0.6 keep`,
      "",
    ]);
  });

  it("replaces tabs and line breaks with spaces, and quotes a field that opens with a quote", () => {
    expect(tsvField("a\tb\r\nc\nd\re ✓")).toBe("a b c d e ✓");
    expect(tsvField('say "hi"')).toBe('say "hi"');
    // pandas and Python's csv read an opening quote as quoting: written quoted, it reads back as it was.
    expect(tsvField('"quoted" first\tthen')).toBe('"""quoted"" first then"');
  });
});

// An optimize loop with a secondary metric (rss_mb, lower, at most 10% worse), t0 reading 100 ms and
// about 500 MB: c1 is undecided on 3 pairs, then promoted on 8; c2 is fast but breaks a test; c3's agent
// fails; c4 is faster still but 37% fatter (secondary_regressed); c5 is still being measured.
const RSS = { name: "rss_mb", direction: "lower", max_regression: "10%" } as const;

function optimizeHistory(): LoopHarness {
  const loop = optimizeLoop({ secondary: [RSS] });
  const [created] = loop.events;
  if (created?.type !== "loop_created") throw new Error("the log starts with loop_created");
  created.data.t0.observation.samples = { best: [], candidate: readings(100, 5), secondary: { rss_mb: { best: [], candidate: readings(500, 5, 2) } } };
  loop.state = foldEvents([created]) ?? loop.state;
  const measured = (best: string, ms: [number[], number[]], rss: [number[], number[]], failing: string[] = []): Observation => ({
    ...observationOf(failing),
    samples: { best: ms[0], candidate: ms[1], secondary: { rss_mb: { best: rss[0], candidate: rss[1] } } },
    compared_to: commitOf(best),
  });
  propose(loop, "c1");
  const c1 = lease(loop);
  report(loop, measured("t0", [readings(100, 3), readings(70, 3, 3)], [readings(500, 3), readings(510, 3, 1)]), c1);
  report(loop, measured("t0", [readings(100, 8), readings(70, 8, 3)], [readings(500, 8), readings(510, 8, 1)]), c1);
  propose(loop, "c2");
  report(loop, measured("c1", [readings(70, 5), readings(60, 5, 1)], [readings(510, 5), readings(505, 5, 2)], ["suite.a"]));
  propose(loop, "c3", { agent: AGENT_FAILED });
  propose(loop, "c4");
  report(loop, measured("c1", [readings(70, 8), readings(50, 8, 2)], [readings(510, 8), readings(700, 8, 3)]));
  propose(loop, "c5");
  report(loop, measured("c1", [readings(70, 3), readings(69, 3, 4)], [readings(510, 3), readings(512, 3, 1)]));
  return loop;
}

/** The median, computed here rather than by the engine's own function. */
function middle(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const half = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[half] ?? Number.NaN) : ((sorted[half - 1] ?? Number.NaN) + (sorted[half] ?? Number.NaN)) / 2;
}

/** The last verdict of each candidate in the log (final or need_samples), by candidate id. */
function lastVerdicts(events: readonly EventDraft[]): Map<string, Verdict> {
  return new Map(events.flatMap((event) => (event.type === "verdict" ? [[event.data.candidate_id, event.data] as const] : [])));
}

describe("the loop's metric in an optimize loop's exports", () => {
  it("candidates.jsonl: each evaluated candidate's metric is its verdict's estimate, interval and pairs, with its median readings", () => {
    const loop = optimizeHistory();
    const verdicts = lastVerdicts(loop.events);
    expect([...verdicts].map(([id, verdict]) => [id, verdict.decision, verdict.reason])).toEqual([
      ["c1", "promoted", "improved"],
      ["c2", "rejected", "regressed"],
      ["c3", "rejected", "agent_failed"],
      ["c4", "rejected", "secondary_regressed"],
      ["c5", "need_samples", "undecided"],
    ]);
    const lines = candidatesJsonl(loop.events)
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as CandidateLine);
    const metricOf = (id: string) => lines.find((line) => line.candidate_id === id)?.metric;
    // Compared with the best-so-far: the figures are the verdict's, the final one's for c1 (not its
    // 3-pair answer), and the last answer's for c5, still being measured.
    for (const id of ["c1", "c4", "c5"]) {
      const compared = verdicts.get(id)?.metric;
      if (!compared) throw new Error(`${id}'s verdict compared nothing`);
      expect(metricOf(id)).toEqual({
        name: "parse_ms",
        median: compared.candidate_median,
        estimate: compared.estimate,
        interval: compared.interval,
        level: compared.level,
        pairs: compared.pairs,
        secondary: { rss_mb: expect.any(Number) },
      });
    }
    expect(metricOf("c1")).toMatchObject({ pairs: 8, median: middle(readings(70, 8, 3)), secondary: { rss_mb: middle(readings(510, 8, 1)) } });
    expect(metricOf("c1")?.estimate).toBeGreaterThan(0.3);
    expect(metricOf("c1")?.interval?.[0]).toBeGreaterThan(0.3);
    // c4's gain is real, and its line shows the secondary reading that cost it the promotion.
    expect(metricOf("c4")?.estimate).toBeGreaterThan(0.3);
    expect(metricOf("c4")?.secondary.rss_mb).toBe(middle(readings(700, 8, 3)));
    // Three pairs is before the first look: an estimate so far, no interval yet.
    expect(metricOf("c5")).toMatchObject({ pairs: 3, interval: null, level: null });
    expect(lines.find((line) => line.candidate_id === "c5")).toMatchObject({ status: "leased", decision: null });
    // c2 was measured but rejected on its tests: its readings, and no comparison.
    expect(metricOf("c2")).toEqual({
      name: "parse_ms",
      median: middle(readings(60, 5, 1)),
      estimate: null,
      interval: null,
      level: null,
      pairs: 5,
      secondary: { rss_mb: middle(readings(505, 5, 2)) },
    });
    // The agent failed: nothing was measured.
    expect(metricOf("c3")).toBeNull();
  });

  it("benchmark.csv: t0 first with its own readings, then a metric, estimate, interval, pairs and secondary column per evaluated commit", () => {
    const loop = optimizeHistory();
    const verdicts = lastVerdicts(loop.events);
    const [header, ...rows] = readCsv(benchmarkCsv(loop.events));
    expect(header).toEqual([
      "candidate_id",
      "commit",
      "status",
      "parse_ms",
      "parse_ms_estimate",
      "parse_ms_ci_low",
      "parse_ms_ci_high",
      "parse_ms_pairs",
      "rss_mb",
      "unit.duration_ms",
      "failing",
      "passing",
    ]);
    const cells = (row: readonly string[] | undefined) => Object.fromEntries((header ?? []).map((name, index) => [name, row?.[index]]));
    // c3 (the agent failed) was never evaluated.
    expect(rows.map((row) => [row[0], row[2]])).toEqual([
      ["t0", "baseline"],
      ["c1", "promoted"],
      ["c2", "rejected"],
      ["c4", "rejected"],
      ["c5", "leased"],
    ]);
    // t0 was measured alone: its median readings, no comparison and no pairs.
    expect(cells(rows[0])).toMatchObject({
      parse_ms: String(middle(readings(100, 5))),
      parse_ms_estimate: "",
      parse_ms_ci_low: "",
      parse_ms_ci_high: "",
      parse_ms_pairs: "",
      rss_mb: String(middle(readings(500, 5, 2))),
    });
    for (const row of rows.slice(1)) {
      const line = cells(row);
      const compared = verdicts.get(line.candidate_id ?? "")?.metric;
      const interval = compared?.interval ?? null;
      expect(line).toMatchObject({
        parse_ms: expect.stringMatching(/^\d/),
        parse_ms_estimate: compared ? String(compared.estimate) : "",
        parse_ms_ci_low: interval ? String(interval[0]) : "",
        parse_ms_ci_high: interval ? String(interval[1]) : "",
        rss_mb: expect.stringMatching(/^\d/),
      });
      if (compared) expect(Number(line.parse_ms)).toBe(compared.candidate_median);
    }
    expect(cells(rows[1])).toMatchObject({ parse_ms_pairs: "8", rss_mb: String(middle(readings(510, 8, 1))) });
    expect(Number(cells(rows[1]).parse_ms_ci_low)).toBeGreaterThan(0.3);
    // c2, rejected on its tests, keeps its readings and leaves the comparison empty.
    expect(cells(rows[2])).toMatchObject({ parse_ms: String(middle(readings(60, 5, 1))), parse_ms_estimate: "", parse_ms_pairs: "5" });
  });
});

describe("exportLoop", () => {
  it("counts data rows, the header excluded, whatever the fields hold", () => {
    const { events } = history();
    expect(exportLoop("candidates.jsonl", events).rows).toBe(5);
    expect(exportLoop("benchmark.csv", events)).toEqual({ text: benchmarkCsv(events), rows: 4 });
    expect(exportLoop("results.tsv", events)).toEqual({ text: resultsTsv(events), rows: 6 });
  });
});
