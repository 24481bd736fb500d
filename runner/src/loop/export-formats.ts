import {
  BASELINE_ID,
  foldEvents,
  median,
  type AgentRun,
  type CandidateState,
  type EventDraft,
  type LoopState,
  type Proposer,
  type TestStanding,
  type Verdict,
} from "#shared/engine/index.js";
import type { AgentReport } from "#shared/wire/agent-report.js";
import type { Contract } from "#shared/wire/contract.js";
import type { GateResult, Observation } from "#shared/wire/observation.js";

// `loopwarden export`: a loop's history as files a spreadsheet, pandas or autoresearch's tooling open
// as they are. Pure functions of the event log: the state comes from the shared engine's fold, and what
// the state does not keep (the observation itself, the proposer, when a verdict was given) from the
// events. Rows are in proposal order; the baseline (t0) comes first where a row of it makes sense.

/** The export formats, named after the file each one is meant to be saved as. */
export const EXPORT_FORMATS = ["candidates.jsonl", "benchmark.csv", "results.tsv"] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];

/** Whether a string names an export format. */
export function isExportFormat(value: string): value is ExportFormat {
  return (EXPORT_FORMATS as readonly string[]).includes(value);
}

/** One candidate with what the events say about it beyond the folded state. */
interface CandidateRecord {
  candidate: CandidateState;
  proposer: Proposer | null;
  /** Why the agent's report was not recorded, when it wrote an invalid one. */
  agent_report_error: string | null;
  /** The observation the verdict was given on (the last one reported); null when none was. */
  observation: Observation | null;
  decided_at: string | null;
}

/** The folded state and, in proposal order, every candidate's record. */
interface History {
  state: LoopState;
  t0: Observation;
  records: CandidateRecord[];
}

function historyOf(events: readonly EventDraft[]): History {
  const state = foldEvents(events);
  if (!state) throw new Error("the loop has no events");
  let t0: Observation | null = null;
  const proposals = new Map<string, { proposer: Proposer; agent_report_error: string | null }>();
  const observations = new Map<string, Observation>();
  const decided = new Map<string, string>();
  for (const event of events) {
    if (event.type === "loop_created") t0 = event.data.t0.observation;
    else if (event.type === "candidate_proposed") {
      proposals.set(event.data.candidate_id, { proposer: event.data.proposer, agent_report_error: event.data.agent_report_error ?? null });
    } else if (event.type === "observation_reported") observations.set(event.data.candidate_id, event.data.observation);
    else if (event.type === "verdict") decided.set(event.data.candidate_id, event.at);
  }
  if (!t0) throw new Error("the loop has no loop_created event");
  const records = state.candidate_order.flatMap((id) => {
    const candidate = state.candidates[id];
    if (!candidate) return [];
    const proposal = proposals.get(id);
    return [
      {
        candidate,
        proposer: proposal?.proposer ?? null,
        agent_report_error: proposal?.agent_report_error ?? null,
        observation: observations.get(id) ?? null,
        decided_at: decided.get(id) ?? null,
      },
    ];
  });
  return { state, t0, records };
}

/** Gate names in the contract's order, then any other gate an observation names, in the order seen. */
function gateNames(state: LoopState, observations: readonly Observation[]): string[] {
  const names = state.contract.gates.map((gate) => gate.name);
  for (const observation of observations) {
    for (const gate of observation.gates) if (!names.includes(gate.name)) names.push(gate.name);
  }
  return names;
}

const gateOf = (observation: Observation, name: string): GateResult | undefined => observation.gates.find((gate) => gate.name === name);

// ——— the loop's metric (a contract with `metric`) ———

/** What an export says of the loop's metric for one evaluated candidate. */
export interface MetricFigures {
  /** The contract's `metric.name`. */
  name: string;
  /** The median of the candidate's readings: what it is kept at if promoted; null when none was read. */
  median: number | null;
  /** The verdict's relative improvement over the best-so-far (0.08: 8% better); null when it compared none. */
  estimate: number | null;
  /** The verdict's interval of that improvement, at `level`; null before the first look or without a comparison. */
  interval: number[] | null;
  level: number | null;
  /** The pairs (best, candidate) the verdict judged on; without a comparison, the complete pairs the observation holds. */
  pairs: number;
  /** Each of the contract's `secondary` metrics, in its order: the median of the candidate's readings, or null. */
  secondary: Record<string, number | null>;
}

type Samples = NonNullable<Observation["samples"]>;

/** The median of each secondary metric's readings of the measured commit (`candidate`: t0 itself for t0). */
function secondaryMedians(contract: Contract, samples: Samples | undefined): Record<string, number | null> {
  return Object.fromEntries((contract.secondary ?? []).map(({ name }) => [name, median(samples?.secondary?.[name]?.candidate ?? [])]));
}

/**
 * A candidate's metric figures, from the observation its verdict was given on: the comparison exactly as
 * the verdict records it (a final one, else the last `need_samples` answer while it is still measured);
 * null without a metric in the contract or without an observation.
 */
function metricFiguresOf(contract: Contract, candidate: CandidateState, observation: Observation | null): MetricFigures | null {
  if (!contract.metric || !observation) return null;
  const samples = observation.samples;
  const compared = (candidate.verdict ?? candidate.pending)?.metric;
  return {
    name: contract.metric.name,
    median: compared?.candidate_median ?? median(samples?.candidate ?? []),
    estimate: compared?.estimate ?? null,
    interval: compared?.interval ?? null,
    level: compared?.level ?? null,
    pairs: compared?.pairs ?? Math.min(samples?.best.length ?? 0, samples?.candidate.length ?? 0),
    secondary: secondaryMedians(contract, samples),
  };
}

// ——— candidates.jsonl ———

/** One line of `candidates.jsonl`. */
export interface CandidateLine {
  candidate_id: string;
  parent: string;
  commit: string;
  proposed_at: string;
  decided_at: string | null;
  status: CandidateState["status"];
  decision: Verdict["decision"] | null;
  reason: string | null;
  detail: string | null;
  failing_before: number | null;
  failing_after: number | null;
  regressed: string[];
  /** The loop's metric (`MetricFigures`); null in a loop without one and for a candidate never evaluated. */
  metric: MetricFigures | null;
  agent: AgentRun | null;
  /** What the agent reported about its run (model, sampling, cost, context files pinned by hash, description). */
  agent_report: AgentReport | null;
  agent_report_error: string | null;
  proposer: Proposer | null;
  gates: {
    name: string;
    exit_code: number | null;
    signal: string | null;
    timed_out: boolean;
    duration_ms: number;
    log_sha256: string | null;
    metrics: Record<string, number>;
    report_error: string | null;
  }[];
  tests: { passing: number; failing: number } | null;
  /** The files its evaluation stored besides gate logs (the contract's `artifacts`, `metric.log`), by digest. */
  artifacts: { name: string; sha256: string; size: number }[];
}

function candidateLine(contract: Contract, record: CandidateRecord): CandidateLine {
  const { candidate, observation } = record;
  const verdict = candidate.verdict;
  return {
    candidate_id: candidate.candidate_id,
    parent: candidate.parent,
    commit: candidate.commit,
    proposed_at: candidate.proposed_at,
    decided_at: record.decided_at,
    status: candidate.status,
    decision: verdict?.decision ?? null,
    reason: verdict?.reason ?? null,
    detail: verdict?.detail ?? null,
    failing_before: verdict?.failing_before ?? null,
    failing_after: verdict?.failing_after ?? null,
    regressed: verdict?.regressed ?? [],
    metric: metricFiguresOf(contract, candidate, observation),
    agent: candidate.agent,
    agent_report: candidate.agent_report,
    agent_report_error: record.agent_report_error,
    proposer: record.proposer,
    gates: (observation?.gates ?? []).map((gate) => ({
      name: gate.name,
      exit_code: gate.exit_code,
      signal: gate.signal,
      timed_out: gate.timed_out,
      duration_ms: gate.duration_ms,
      log_sha256: gate.log?.sha256 ?? null,
      metrics: gate.metrics ?? {},
      report_error: gate.report_error ?? null,
    })),
    // The counts the ratchet compares: reported test ids plus one `gate:<name>` test per gate.
    tests: candidate.report ? countsOf(candidate.report.tests) : null,
    artifacts: (observation?.artifacts ?? []).map(({ name, sha256, size }) => ({ name, sha256, size })),
  };
}

const countsOf = (tests: TestStanding) => ({ passing: tests.passing_count, failing: tests.failing.length });

function candidatesTable(history: History): CandidateLine[] {
  return history.records.map((record) => candidateLine(history.state.contract, record));
}

/** `candidates.jsonl`: one JSON object per candidate (the baseline is not a candidate), in proposal order. */
export function candidatesJsonl(events: readonly EventDraft[]): string {
  return jsonLines(candidatesTable(historyOf(events)));
}

const jsonLines = (lines: readonly CandidateLine[]) => lines.map((line) => `${JSON.stringify(line)}\n`).join("");

// ——— benchmark.csv ———

/** A CSV field per RFC 4180: quoted when it holds a comma, a quote, CR or LF; quotes doubled. */
export function csvField(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

/** A CSV record per RFC 4180, ending with CRLF. */
export function csvRecord(fields: readonly string[]): string {
  return `${fields.map(csvField).join(",")}\r\n`;
}

const numberField = (value: number | undefined | null) => (value === undefined || value === null ? "" : String(value));

/** A row's metric cells: a candidate's figures, or t0's readings (never compared, so no pairs). */
type MetricCells = Omit<MetricFigures, "name" | "level" | "pairs"> & { pairs: number | null };

/** The rows of `benchmark.csv`, header first. */
function benchmarkTable(history: History): string[][] {
  const { contract } = history.state;
  const t0Metric: MetricCells | null = contract.metric
    ? {
        median: median(history.t0.samples?.candidate ?? []),
        estimate: null,
        interval: null,
        pairs: null,
        secondary: secondaryMedians(contract, history.t0.samples),
      }
    : null;
  const rows: { id: string; commit: string; status: string; observation: Observation; tests: TestStanding; metric: MetricCells | null }[] = [
    { id: BASELINE_ID, commit: history.state.t0.commit, status: "baseline", observation: history.t0, tests: history.state.t0, metric: t0Metric },
    ...history.records.flatMap(({ candidate, observation }) =>
      observation && candidate.report
        ? [
            {
              id: candidate.candidate_id,
              commit: candidate.commit,
              status: candidate.status,
              observation,
              tests: candidate.report.tests,
              metric: metricFiguresOf(contract, candidate, observation),
            },
          ]
        : [],
    ),
  ];
  const gates = gateNames(
    history.state,
    rows.map((row) => row.observation),
  );
  // Columns by (gate, metric): a gate `a.b` with metric `c` and a gate `a` with `b.c` stay two columns.
  const metricColumns = gates.flatMap((gate) => {
    const names = new Set<string>();
    for (const row of rows) for (const name of Object.keys(gateOf(row.observation, gate)?.metrics ?? {})) names.add(name);
    return [...names].sort().map((metric) => ({ gate, metric }));
  });
  // The loop's metric, when the contract has one, right after the status: it is what the loop optimises.
  const primary = contract.metric?.name;
  const secondaries = (contract.secondary ?? []).map(({ name }) => name);
  const loopMetricHeader =
    primary === undefined ? [] : [primary, `${primary}_estimate`, `${primary}_ci_low`, `${primary}_ci_high`, `${primary}_pairs`, ...secondaries];
  const loopMetricCells = (metric: MetricCells | null) =>
    primary === undefined
      ? []
      : [
          numberField(metric?.median),
          numberField(metric?.estimate),
          numberField(metric?.interval?.[0]),
          numberField(metric?.interval?.[1]),
          numberField(metric?.pairs),
          ...secondaries.map((name) => numberField(metric?.secondary[name])),
        ];
  const header = [
    "candidate_id",
    "commit",
    "status",
    ...loopMetricHeader,
    ...metricColumns.map(({ gate, metric }) => `${gate}.${metric}`),
    ...gates.map((gate) => `${gate}.duration_ms`),
    "failing",
    "passing",
  ];
  return [
    header,
    ...rows.map((row) => [
      row.id,
      row.commit,
      row.status,
      ...loopMetricCells(row.metric),
      ...metricColumns.map(({ gate, metric }) => numberField(gateOf(row.observation, gate)?.metrics?.[metric])),
      ...gates.map((gate) => numberField(gateOf(row.observation, gate)?.duration_ms)),
      String(row.tests.failing.length),
      String(row.tests.passing_count),
    ]),
  ];
}

/**
 * `benchmark.csv`: one row per evaluated commit (t0, then every candidate with an observation):
 * `candidate_id, commit, status`; with a metric in the contract, `<metric>` (the median of the commit's
 * readings), `<metric>_estimate`, `<metric>_ci_low`, `<metric>_ci_high` (the verdict's comparison with
 * the best-so-far, empty where none was made), `<metric>_pairs` (the pairs it judged on, else those
 * measured; empty for t0, measured alone) and one column per secondary metric (its median reading); one `<gate>.<metric>` column per METRIC reading any gate
 * printed, one `<gate>.duration_ms` per gate, then the `failing` and `passing` test counts. A gate that
 * did not run, or did not print a metric, leaves its cell empty.
 */
export function benchmarkCsv(events: readonly EventDraft[]): string {
  return benchmarkTable(historyOf(events)).map(csvRecord).join("");
}

// ——— results.tsv ———

/**
 * A TSV field: tabs, carriage returns and newlines (which plain TSV cannot hold) become single spaces.
 * pandas, Python's csv module and spreadsheets read a field that opens with a quote as a quoted field,
 * so such a field is written quoted (quotes doubled) and reads back as it was.
 */
export function tsvField(value: string): string {
  const flat = value.replace(/\r\n|[\t\r\n]/g, " ");
  return flat.startsWith('"') ? `"${flat.replaceAll('"', '""')}"` : flat;
}

/** METRIC names read as peak memory, most specific first, with their scale to gigabytes. */
const MEMORY_METRICS: readonly (readonly [name: string, toGb: number])[] = [
  ["memory_gb", 1],
  ["peak_memory_gb", 1],
  ["peak_vram_mb", 1 / 1024],
  ["peak_rss_mb", 1 / 1024],
  ["peak_memory_mb", 1 / 1024],
  ["memory_mb", 1 / 1024],
];

/** The value the first gate that printed `name` reported. */
function metricOf(observation: Observation, name: string): number | undefined {
  for (const gate of observation.gates) {
    const value = gate.metrics?.[name];
    if (value !== undefined) return value;
  }
  return undefined;
}

/** Optimize mode: the median of the candidate's paired readings of `name` (primary or secondary), if any. */
function sampledOf(observation: Observation, name: string, primary: string | undefined): number | undefined {
  const readings = name === primary ? observation.samples?.candidate : observation.samples?.secondary?.[name]?.candidate;
  return median(readings ?? []) ?? undefined;
}

function memoryGbOf(observation: Observation, primary: string | undefined): string {
  for (const [name, scale] of MEMORY_METRICS) {
    const value = sampledOf(observation, name, primary) ?? metricOf(observation, name);
    if (value !== undefined) return (value * scale).toFixed(1);
  }
  return "0.0";
}

/** The rows of `results.tsv`, header first (see `resultsTsv`). */
function resultsTable(history: History): string[][] {
  const primary = history.state.contract.metric?.name;
  const crash = { metric: primary === undefined ? "0" : "0.000000", memory: "0.0" };
  const figuresOf = (observation: Observation, tests: TestStanding) => {
    const value = primary === undefined ? tests.failing.length : (sampledOf(observation, primary, primary) ?? metricOf(observation, primary));
    return {
      metric: primary === undefined ? String(value) : value === undefined ? crash.metric : value.toFixed(6),
      memory: memoryGbOf(observation, primary),
    };
  };
  const baseline = figuresOf(history.t0, history.state.t0);
  const figures = new Map([[BASELINE_ID, baseline]]);
  const rows = [[history.state.t0.commit.slice(0, 7), baseline.metric, baseline.memory, "keep", "baseline"]];
  for (const { candidate, observation } of history.records) {
    const verdict = candidate.verdict;
    if (!verdict) continue;
    const own =
      observation && candidate.report
        ? figuresOf(observation, candidate.report.tests)
        : verdict.reason === "no_change"
          ? (figures.get(candidate.parent) ?? crash)
          : crash;
    figures.set(candidate.candidate_id, own);
    const status = verdict.decision === "promoted" ? "keep" : verdict.reason === "agent_failed" ? "crash" : "discard";
    rows.push([candidate.commit.slice(0, 7), own.metric, own.memory, status, candidate.agent_report?.description ?? verdict.detail]);
  }
  return [["commit", primary ?? "failing_tests", "memory_gb", "status", "description"], ...rows];
}

/**
 * `results.tsv` in the layout of autoresearch's ledger: `commit, <metric>, memory_gb, status,
 * description`, tab-separated, one row for t0 (`keep`, `baseline`) and then one per decided candidate.
 *
 * - commit: the first 7 characters of the commit id.
 * - metric: with a primary metric in the contract (`metric.name`), the column is named after it and
 *   holds the value the first gate that printed it reported, with 6 decimals as autoresearch writes
 *   it; in a check_fixpoint loop it is `failing_tests`, the failing test count the ratchet compares
 *   (reported test ids plus one `gate:<name>` test per gate; lower is better, 0 is success).
 * - memory_gb: a `memory_gb`/`peak_memory_gb` METRIC, else `peak_vram_mb`/`peak_rss_mb`/
 *   `peak_memory_mb`/`memory_mb` divided by 1024, one decimal; `0.0` when no gate printed one.
 * - status: promoted → `keep`; rejected because the agent failed or timed out → `crash`; any other
 *   rejection → `discard`. A crash has no measurement and carries `0`/`0.0`, as autoresearch records
 *   crashes: filter on status before plotting. An empty change is its parent's tree and repeats the
 *   parent's figures. Candidates still being evaluated are left out.
 * - description: what the agent said it tried (its report's `description`), else the verdict's detail
 *   (t0: `baseline`).
 */
export function resultsTsv(events: readonly EventDraft[]): string {
  return tsvText(resultsTable(historyOf(events)));
}

const tsvText = (rows: readonly string[][]) => rows.map((fields) => `${fields.map(tsvField).join("\t")}\n`).join("");

// ——— all formats ———

/** The export of a loop in one format, with its number of data rows (the header not counted). */
export function exportLoop(format: ExportFormat, events: readonly EventDraft[]): { text: string; rows: number } {
  const history = historyOf(events);
  switch (format) {
    case "candidates.jsonl": {
      const lines = candidatesTable(history);
      return { text: jsonLines(lines), rows: lines.length };
    }
    case "benchmark.csv": {
      const table = benchmarkTable(history);
      return { text: table.map(csvRecord).join(""), rows: table.length - 1 };
    }
    case "results.tsv": {
      const table = resultsTable(history);
      return { text: tsvText(table), rows: table.length - 1 };
    }
  }
}
