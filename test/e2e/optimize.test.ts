import path from "node:path";
import { describe, expect, it } from "vitest";
import { LoopEvent } from "#shared/engine/index.js";
import { api, makeRepo, runCli, sharedCoordinator } from "../support/cli.js";
import { timedWorkProject } from "../support/timed-work-project.js";

// An optimize loop through the real stack: the runner reads the benchmark interleaved (best, then
// candidate) in two clean clones, and the coordinator's sequential test keeps a real speed-up and
// rejects a change that only looks different.
describe("an optimize loop", () => {
  const { tmp, coordinator } = sharedCoordinator("optimize");

  it("promotes a real speed-up and not a no-op change, with the estimate and the pairs on record", async () => {
    const repo = makeRepo(path.join(tmp.dir, "repo"), {
      ...timedWorkProject(),
      // Iteration 1 halves DELAY (a real 2x speed-up); iteration 2 only adds a comment.
      "agent.mjs": [
        "import { readFileSync, writeFileSync } from 'node:fs';",
        "const file = 'src/work.js';",
        "const source = readFileSync(file, 'utf8');",
        "writeFileSync(file, process.env.LOOPWARDEN_ITERATION === '1' ? source.replace('DELAY = 40', 'DELAY = 20') : `// tidied\\n${source}`);",
      ].join("\n"),
      "loop.yaml": [
        "name: faster-work",
        "mode: optimize",
        "gates:",
        "  - name: unit",
        "    run: node --test",
        "metric:",
        "  run: node bench.mjs",
        "  name: work_ms",
        "  direction: lower",
        "  min_effect: 5%",
        "  samples: { min: 5, max: 20 }",
        "secondary:",
        "  - { name: rss_mb, direction: lower, max_regression: 50% }",
        "stop:",
        "  max_iterations: 2",
        "agent:",
        "  run: node agent.mjs",
        "",
      ].join("\n"),
      ".gitignore": ".loopwarden/\n",
    });

    const result = await runCli(["--json", "--server", coordinator.url, "run"], { cwd: repo });
    expect(result.code, result.stderr).toBe(12);
    const output = JSON.parse(result.stdout) as { loop_id: string };
    expect(output).toMatchObject({ halt_reason: "max_iterations_reached", still_improving: true, iteration: 2 });

    const events = (await (await api(`${coordinator.url}/v1/loops/${output.loop_id}/events`)).text())
      .trim()
      .split("\n")
      .map((line) => LoopEvent.parse(JSON.parse(line)));
    const finals = events.flatMap((event) => (event.type === "verdict" && event.data.decision !== "need_samples" ? [event.data] : []));
    expect(finals.map((verdict) => [verdict.candidate_id, verdict.decision, verdict.reason])).toEqual([
      ["c1", "promoted", "improved"],
      ["c2", "rejected", "not_improved"],
    ]);
    const [faster, noop] = finals;
    // Half the delay: about 2x, i.e. an improvement near 100% (best/candidate − 1).
    expect(faster?.metric?.estimate).toBeGreaterThan(0.5);
    expect(faster?.metric?.pairs).toBeGreaterThanOrEqual(5);
    // The no-op's evidence shows no demonstrated gain: its interval's lower end is under min_effect (5%).
    // A point estimate is not asserted: on a loaded machine noise moves it, while the verdict holds.
    expect(noop?.metric?.interval?.[0] ?? Number.NEGATIVE_INFINITY).toBeLessThan(0.05);
    // The baseline's own readings were recorded with t0.
    const created = events[0];
    if (created?.type !== "loop_created") throw new Error("no loop_created");
    expect(created.data.t0.observation.samples?.candidate).toHaveLength(5);
    // The secondary guardrail was read from the same runs, paired the same way.
    const report = events.find((event) => event.type === "observation_reported" && event.data.candidate_id === "c1");
    if (report?.type !== "observation_reported") throw new Error("no report for c1");
    const rss = report.data.observation.samples?.secondary?.rss_mb;
    expect(rss?.best.length).toBe(report.data.observation.samples?.best.length);

    // The metric command's output is stored with each report (metric.log, by digest; each report on a
    // lease has all its readings so far) and with t0's readings: `logs --metric` prints the last report's,
    // reading by reading, its digest checked.
    const lastReport = events.findLast((event) => event.type === "observation_reported" && event.data.candidate_id === "c1");
    const lastArtifacts = lastReport?.type === "observation_reported" ? lastReport.data.observation.artifacts : undefined;
    const metricLog = lastArtifacts?.find((artifact) => artifact.name === "metric.log");
    expect(metricLog, JSON.stringify(lastArtifacts)).toMatchObject({ content_type: "text/plain; charset=utf-8" });
    expect(report.data.observation.artifacts?.find((artifact) => artifact.name === "metric.log")).toBeDefined();
    const stored = await api(`${coordinator.url}/v1/loops/${output.loop_id}/artifacts/${metricLog?.sha256 ?? "none"}`);
    expect(stored.status).toBe(200);
    const storedText = await stored.text();
    expect(storedText).toContain("--- pair 1, best-so-far: exit 0\n");
    expect(storedText).toContain("--- pair 1, candidate: exit 0\n");
    expect(storedText).toMatch(/METRIC work_ms=[\d.]+/);
    const metricOutput = await runCli(["--server", coordinator.url, "logs", "c1", "--metric"], { cwd: repo });
    expect(metricOutput.code, metricOutput.stderr).toBe(0);
    expect(metricOutput.stderr).toContain(`c1 the metric command's output: metric.log, ${metricLog?.size} bytes`);
    expect(metricOutput.stdout).toBe(storedText);
    const t0Metric = created.data.t0.observation.artifacts?.find((artifact) => artifact.name === "metric.log");
    expect(t0Metric).toBeDefined();
    const t0Output = await runCli(["--server", coordinator.url, "logs", "t0", "--metric"], { cwd: repo });
    expect(t0Output.code, t0Output.stderr).toBe(0);
    expect(t0Output.stdout.match(/^--- reading \d+: exit 0$/gm)).toEqual(["1", "2", "3", "4", "5"].map((reading) => `--- reading ${reading}: exit 0`));
    expect(t0Output.stdout).toMatch(/METRIC work_ms=[\d.]+/);

    // The halt is followed by the confirm measurement of t0 against the best, interleaved on this
    // runner (DESIGN §6.3): the receipt's headline, recomputed by the coordinator from the readings.
    const confirmed = events.find((event) => event.type === "confirm_measured");
    if (confirmed?.type !== "confirm_measured") throw new Error("no confirm measurement after the halt");
    const proposedC1 = events.find((event) => event.type === "candidate_proposed" && event.data.candidate_id === "c1");
    expect(confirmed.data).toMatchObject({
      candidate_id: "c1",
      commit: proposedC1?.type === "candidate_proposed" ? proposedC1.data.commit : "",
      metric: "work_ms",
    });
    expect(confirmed.data.t0_commit).toBe(events[0]?.type === "loop_created" ? events[0].data.t0.commit : "");
    expect(confirmed.data.pairs).toBeGreaterThanOrEqual(5);
    expect(confirmed.data.samples.t0).toHaveLength(confirmed.data.pairs);
    // Half the delay is a real gain: the interval's lower end is above zero (an interval, not a point estimate).
    expect(confirmed.data.interval?.[0] ?? Number.NEGATIVE_INFINITY).toBeGreaterThan(0);
    // The final receipt, re-issued after the measurement, carries it as its headline and verifies.
    const loop = (await (await api(`${coordinator.url}/v1/loops/${output.loop_id}`)).json()) as { receipt_id: string };
    const receiptUrl = `${coordinator.url}/r/${loop.receipt_id}`;
    const verified = await runCli(["--json", "verify", receiptUrl], { cwd: repo });
    expect(verified.code, verified.stdout).toBe(0);
    const statement = JSON.parse(
      Buffer.from(((await (await fetch(`${receiptUrl}.json`)).json()) as { payload: string }).payload, "base64").toString("utf8"),
    ) as {
      predicate: { confirm: { estimate: number; pairs: number } | null };
    };
    expect(statement.predicate.confirm).toMatchObject({ estimate: confirmed.data.estimate, pairs: confirmed.data.pairs });
    // The public page leads with that figure.
    const page = await (await fetch(receiptUrl)).text();
    expect(page).toMatch(/Confirmed against t0:<\/strong> c1 is [\d.]+% better on work_ms \[[\d.-]+%, [\d.-]+%\]/);

    // autoresearch's ledger carries each commit's median reading of the metric.
    const tsv = await runCli(["--server", coordinator.url, "export", "--format", "results.tsv"], { cwd: repo });
    const rows = tsv.stdout
      .trim()
      .split("\n")
      .map((line) => line.split("\t"));
    expect(rows[0]).toEqual(["commit", "work_ms", "memory_gb", "status", "description"]);
    expect(rows.slice(1).map((row) => row[3])).toEqual(["keep", "keep", "discard"]);
    const [t0Ms, fasterMs] = [Number(rows[1]?.[1]), Number(rows[2]?.[1])];
    expect(t0Ms).toBeGreaterThan(100);
    expect(fasterMs).toBeLessThan(t0Ms * 0.7);

    // candidates.jsonl and benchmark.csv carry the metric as the verdicts recorded it, not only in their detail text.
    const jsonl = await runCli(["--server", coordinator.url, "export", "--format", "candidates.jsonl"], { cwd: repo });
    expect(jsonl.code, jsonl.stderr).toBe(0);
    const lines = jsonl.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { candidate_id: string; metric: Record<string, unknown> | null });
    expect(lines.map((line) => line.candidate_id)).toEqual(["c1", "c2"]);
    for (const [line, verdict] of lines.map((line, index) => [line, finals[index]] as const)) {
      expect(line.metric).toEqual({
        name: "work_ms",
        median: verdict?.metric?.candidate_median,
        estimate: verdict?.metric?.estimate,
        interval: verdict?.metric?.interval,
        level: verdict?.metric?.level,
        pairs: verdict?.metric?.pairs,
        secondary: { rss_mb: expect.any(Number) },
      });
    }
    const csv = await runCli(["--server", coordinator.url, "export", "--format", "benchmark.csv"], { cwd: repo });
    expect(csv.code, csv.stderr).toBe(0);
    const [header, ...records] = csv.stdout
      .split("\r\n")
      .slice(0, -1)
      .map((line) => line.split(","));
    expect(header?.slice(0, 9)).toEqual([
      "candidate_id",
      "commit",
      "status",
      "work_ms",
      "work_ms_estimate",
      "work_ms_ci_low",
      "work_ms_ci_high",
      "work_ms_pairs",
      "rss_mb",
    ]);
    const byColumn = (record: string[] | undefined) => Object.fromEntries((header ?? []).map((name, index) => [name, record?.[index]]));
    const [t0Row, ...candidateRows] = records.map(byColumn);
    // t0 first, at the median of its own readings, the same figure results.tsv shows; it was never compared.
    const t0Readings = [...(created.data.t0.observation.samples?.candidate ?? [])].sort((a, b) => a - b);
    // Its secondary metric too, read in the same runs as its metric (one reading a run), at their median.
    const t0Rss = [...(created.data.t0.observation.samples?.secondary?.rss_mb?.candidate ?? [])].sort((a, b) => a - b);
    expect(t0Rss).toHaveLength(t0Readings.length);
    expect(Number(t0Row?.rss_mb)).toBe(t0Rss[2]);
    expect(t0Row).toMatchObject({ candidate_id: "t0", status: "baseline", work_ms_estimate: "", work_ms_ci_low: "", work_ms_pairs: "" });
    expect(Number(t0Row?.work_ms)).toBe(t0Readings[2]);
    expect(Number(t0Row?.work_ms)).toBeCloseTo(t0Ms, 5);
    expect(candidateRows.map((row) => [row.candidate_id, row.status])).toEqual([
      ["c1", "promoted"],
      ["c2", "rejected"],
    ]);
    for (const [row, verdict] of candidateRows.map((row, index) => [row, finals[index]] as const)) {
      // An early rejection can come before any interval: its cells are then empty.
      const figure = (cell: string | undefined) => (cell === "" ? null : Number(cell));
      expect([row.work_ms, row.work_ms_estimate, row.work_ms_ci_low, row.work_ms_ci_high, row.work_ms_pairs].map(figure)).toEqual([
        verdict?.metric?.candidate_median,
        verdict?.metric?.estimate,
        verdict?.metric?.interval?.[0] ?? null,
        verdict?.metric?.interval?.[1] ?? null,
        verdict?.metric?.pairs,
      ]);
      expect(Number(row.rss_mb)).toBeGreaterThan(0);
    }
  });
});
