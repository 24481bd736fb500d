import { parseDuration } from "#shared/duration.js";
import type { Contract } from "#shared/wire/contract.js";
import type { Clone } from "./clone.js";
import { runCommand } from "../process/exec.js";
import { execZone } from "../zones/isolation.js";
import { parseMetrics } from "./parsers/index.js";

// Optimize mode's measurements (DESIGN §6.3): the contract's metric command run in a clean clone, its
// `METRIC name=value` reading taken. Comparisons interleave the best-so-far and the candidate on this
// runner (A B A B …), so slow drift of the machine hits both alike.

/**
 * What the metric command printed, reading by reading, kept as the evaluation's `metric.log` artifact
 * (DESIGN §10): the last MAX_METRIC_LOG_BYTES of it, so a long comparison never grows it without end.
 */
export class MetricLog {
  static readonly MAX_BYTES = 1024 * 1024;
  private text = "";

  add(label: string, output: Buffer): void {
    this.text += `--- ${label}\n${output.toString("utf8")}${output.length > 0 && output.at(-1) !== 0x0a ? "\n" : ""}`;
    if (this.text.length > MetricLog.MAX_BYTES) this.text = `[earlier output cut]\n${this.text.slice(-MetricLog.MAX_BYTES)}`;
  }

  get isEmpty(): boolean {
    return this.text === "";
  }

  bytes(): Uint8Array {
    return new TextEncoder().encode(this.text);
  }
}

/** One reading of the contract's metric (and its secondary metrics) in `clone`, or why there is none. */
export async function measureMetric(
  clone: Clone,
  contract: Contract,
  log?: { into: MetricLog; label: string },
): Promise<{ value: number; secondary: Record<string, number> } | { error: string }> {
  const metric = contract.metric;
  if (!metric) return { error: "the contract has no metric" };
  const result = await runCommand(metric.run, {
    cwd: clone.dir,
    timeoutMs: parseDuration(metric.timeout) ?? 600_000,
    env: clone.env,
    signal: clone.signal,
    network: contract.exec?.network ?? "host",
    zone: execZone(clone, contract),
  });
  log?.into.add(`${log.label}: exit ${result.timed_out ? "timed out" : (result.exit_code ?? result.signal)}`, result.output);
  const tail = result.output.toString("utf8").trim().split("\n").slice(-3).join(" | ");
  if (result.timed_out) return { error: `the metric command timed out after ${metric.timeout}` };
  if (result.exit_code !== 0) return { error: `the metric command exited ${result.exit_code ?? result.signal}: ${tail}` };
  const readings = parseMetrics(result.output.toString("utf8")).metrics;
  const value = readings[metric.name];
  if (value === undefined) return { error: `the metric command printed no METRIC ${metric.name}=…: ${tail}` };
  if (!(value > 0)) return { error: `METRIC ${metric.name}=${value} is not a positive reading` };
  const secondary: Record<string, number> = {};
  for (const { name } of contract.secondary ?? []) {
    const reading = readings[name];
    if (reading === undefined) return { error: `the metric command printed no METRIC ${name}=… (a secondary metric): ${tail}` };
    secondary[name] = reading;
  }
  return { value, secondary };
}

/** Interleaved readings of the best-so-far (A) and the candidate (B); pair i is (best[i], candidate[i]). */
export interface PairedSamples {
  best: number[];
  candidate: number[];
  error?: string;
  secondary?: Record<string, { best: number[]; candidate: number[] }>;
}

/**
 * Adds pairs until there are `pairs` of them: best then candidate, alternating. A failed reading stops
 * the sampling and is recorded (the engine rejects the candidate as no_samples).
 */
export async function samplePairs(
  samples: PairedSamples,
  pairs: number,
  clones: { best: Clone; candidate: Clone },
  contract: Contract,
  onPair?: (done: number, wanted: number) => void,
  log?: MetricLog,
): Promise<PairedSamples> {
  while (samples.best.length < pairs && samples.error === undefined) {
    const pair = samples.best.length + 1;
    const best = await measureMetric(clones.best, contract, log && { into: log, label: `pair ${pair}, best-so-far` });
    const candidate = "error" in best ? best : await measureMetric(clones.candidate, contract, log && { into: log, label: `pair ${pair}, candidate` });
    if ("error" in best) samples.error = `best-so-far: ${best.error}`;
    else if ("error" in candidate) samples.error = `candidate: ${candidate.error}`;
    else {
      samples.best.push(best.value);
      samples.candidate.push(candidate.value);
      for (const [name, value] of Object.entries(best.secondary)) {
        samples.secondary ??= {};
        const series = (samples.secondary[name] ??= { best: [], candidate: [] });
        series.best.push(value);
        series.candidate.push(candidate.secondary[name] ?? Number.NaN);
      }
      onPair?.(samples.best.length, pairs);
    }
  }
  return samples;
}

/**
 * `runs` readings of one commit alone (the baseline's), each run's output added to `log` when given; its
 * secondary metrics' readings too, as `candidate` series with no `best` (what an export's t0 row shows).
 */
export async function sampleAlone(clone: Clone, contract: Contract, runs: number, log?: MetricLog): Promise<PairedSamples> {
  const samples: PairedSamples = { best: [], candidate: [] };
  for (let run = 0; run < runs && samples.error === undefined; run++) {
    const reading = await measureMetric(clone, contract, log && { into: log, label: `reading ${run + 1}` });
    if ("error" in reading) samples.error = reading.error;
    else {
      samples.candidate.push(reading.value);
      for (const [name, value] of Object.entries(reading.secondary)) {
        samples.secondary ??= {};
        (samples.secondary[name] ??= { best: [], candidate: [] }).candidate.push(value);
      }
    }
  }
  return samples;
}
