import { describe, expect, it } from "vitest";
import { parseMetrics } from "../../../runner/src/evaluation/parsers/index.js";
import { readFixture } from "./fixtures.js";

describe("parseMetrics on real benchmark output", () => {
  it("a Node benchmark: METRIC lines among progress output, several pairs on one line, scientific notation", () => {
    expect(parseMetrics(readFixture("metric/node-bench.txt"))).toEqual({
      metrics: { parse_ms: 0.6219, peak_rss_mb: 46.4, heap_used_mb: 4, ops_per_sec: 1608 },
      errors: [],
    });
  });

  it("a Python benchmark: dotted names; `METRICS ...` prose and indented text are not METRIC lines", () => {
    expect(parseMetrics(readFixture("metric/python-bench.txt"))).toEqual({
      metrics: { sort_ms: 0.0527, "sort.peak_kib": 78.2 },
      errors: [],
    });
  });

  it("a sloppy benchmark (CRLF): every malformed METRIC line is reported with its line number, the first of a duplicate kept", () => {
    const { metrics, errors } = parseMetrics(readFixture("metric/malformed.txt"));
    expect(metrics).toEqual({ parse_ms: 12.41, p50_ms: 11.9, indented_ms: 2.5 });
    expect(errors).toEqual([
      { line: 3, text: "METRIC parse_ms=13.41", reason: 'duplicate metric "parse_ms" (first printed on line 2, whose value is kept)' },
      { line: 4, text: "METRIC rss=48MB", reason: 'rss: value "48MB" has a unit; print the bare number and put the unit in the name (e.g. parse_ms=12.4)' },
      { line: 5, text: "METRIC errors=NaN", reason: "errors: value NaN is not a finite number" },
      { line: 6, text: "METRIC throughput=Infinity", reason: "throughput: value Infinity is not a finite number" },
      { line: 7, text: "METRIC 9lives=3", reason: 'bad metric name "9lives": use letters, digits, "_" and ".", not starting with a digit' },
      { line: 8, text: "METRIC cache-hits=10", reason: 'bad metric name "cache-hits": use letters, digits, "_" and ".", not starting with a digit' },
      { line: 9, text: "METRIC gc_ms 3.5", reason: '"gc_ms" has no "=": write name=value' },
      { line: 9, text: "METRIC gc_ms 3.5", reason: '"3.5" has no "=": write name=value' },
      { line: 10, text: "METRIC", reason: "no name=value pair after METRIC" },
      { line: 11, text: "METRIC hex=0x1F", reason: 'hex: value "0x1F" is not a decimal number' },
      { line: 12, text: "METRIC p50_ms=11.9 p99_ms=", reason: 'p99_ms: no value after "="' },
      { line: 13, text: "METRIC: colon_ms=1", reason: '"METRIC" must be followed by a space, then name=value pairs' },
    ]);
  });
});

describe("parseMetrics", () => {
  it.each([
    ["METRIC a=1", { a: 1 }],
    ["METRIC a=-2.5e3 b=+0.5 c=.25 d=5. e=1E-3", { a: -2500, b: 0.5, c: 0.25, d: 5, e: 0.001 }],
    ["METRIC\ta=1\t b=2  ", { a: 1, b: 2 }],
    ["METRIC _private=0 v1.2.x=3", { _private: 0, "v1.2.x": 3 }],
  ])("reads %j", (line, metrics) => {
    expect(parseMetrics(`noise\n${line}\nmore noise`)).toEqual({ metrics, errors: [] });
  });

  it.each([["METRICS parse_ms=1"], ["metric parse_ms=1"], ["# METRIC parse_ms=1"], ["result: METRIC parse_ms=1"], ["METRIC_parse_ms=1"]])(
    "ignores %j: not a METRIC line",
    (line) => {
      expect(parseMetrics(line)).toEqual({ metrics: {}, errors: [] });
    },
  );

  it.each([
    ["METRIC big=1e999", "big: value 1e999 is too large to be a finite number"],
    ["METRIC nan=nan", "nan: value nan is not a finite number"],
    ["METRIC inf=-inf", "inf: value -inf is not a finite number"],
    ["METRIC pct=12%", 'pct: value "12%" has a unit; print the bare number and put the unit in the name (e.g. parse_ms=12.4)'],
    ["METRIC sep=1_000", 'sep: value "1_000" is not a decimal number'],
    ["METRIC ratio=1/3", 'ratio: value "1/3" is not a decimal number'],
    ["METRIC a=b=1", 'a: value "b=1" is not a decimal number'],
    ["METRIC =4", 'bad metric name "": use letters, digits, "_" and ".", not starting with a digit'],
    [`METRIC ${"n".repeat(65)}=1`, `metric name "${"n".repeat(65)}" is longer than 64 characters`],
  ])("reports %j", (line, reason) => {
    expect(parseMetrics(line)).toEqual({ metrics: {}, errors: [{ line: 1, text: line, reason }] });
  });

  it("keeps the good pairs of a line that also has a bad one, and reports a duplicate within one line", () => {
    expect(parseMetrics("METRIC a=1 b=x a=2")).toEqual({
      metrics: { a: 1 },
      errors: [
        { line: 1, text: "METRIC a=1 b=x a=2", reason: 'b: value "x" is not a decimal number' },
        { line: 1, text: "METRIC a=1 b=x a=2", reason: 'duplicate metric "a" (first printed on line 1, whose value is kept)' },
      ],
    });
  });

  it("reads nothing from empty output", () => {
    expect(parseMetrics("")).toEqual({ metrics: {}, errors: [] });
  });
});
