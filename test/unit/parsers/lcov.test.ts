import { describe, expect, it } from "vitest";
import { parseLcov } from "../../../runner/src/evaluation/parsers/index.js";
import { parseErrorOf, readFixture } from "./fixtures.js";

describe("parseLcov on tracefiles written by real tools", () => {
  it("node --test --experimental-test-coverage: the module and the test file", () => {
    expect(parseLcov(readFixture("lcov/node-test.info"), "lcov/node-test.info")).toEqual({
      lines: { found: 34, hit: 33 },
      branches: { found: 19, hit: 18 },
      functions: { found: 17, hit: 16 },
      files: {
        "src/calc.js": { lines: { found: 9, hit: 8 } },
        "test-node/calc.test.js": { lines: { found: 25, hit: 25 } },
      },
      percent: (33 / 34) * 100,
    });
  });

  it("vitest with @vitest/coverage-v8: one branch of the `b === 0` test never taken", () => {
    expect(parseLcov(readFixture("lcov/vitest-v8.info"), "lcov/vitest-v8.info")).toEqual({
      lines: { found: 4, hit: 3 },
      branches: { found: 2, hit: 1 },
      functions: { found: 3, hit: 3 },
      files: { "src/calc.js": { lines: { found: 4, hit: 3 } } },
      percent: 75,
    });
  });

  it("coverage.py 6.5: DA lines carry a checksum, and are believed over its LF:6/LH:7 summary", () => {
    const report = parseLcov(readFixture("lcov/coveragepy.info"), "lcov/coveragepy.info");
    expect(report.files).toEqual({
      "calc.py": { lines: { found: 7, hit: 7 } },
      "tests/test_calc.py": { lines: { found: 26, hit: 24 } },
    });
    expect(report.lines).toEqual({ found: 33, hit: 31 });
    expect(report.branches).toEqual({ found: 0, hit: 0 });
    expect(report.functions).toEqual({ found: 0, hit: 0 });
    expect(report.percent).toBeCloseTo(93.939, 3);
  });

  it("a hand-written tracefile without summaries: LF/LH, BRF/BRH and FNF/FNH computed from DA, BRDA and FN/FNDA", () => {
    expect(parseLcov(readFixture("lcov/no-summary-handwritten.info"), "lcov/no-summary-handwritten.info")).toEqual({
      lines: { found: 9, hit: 6 },
      // BRDA taken "-" means the block never ran: found, not hit.
      branches: { found: 4, hit: 1 },
      functions: { found: 2, hit: 1 },
      files: {
        "src/tokenize.js": { lines: { found: 7, hit: 4 } },
        "src/join.js": { lines: { found: 2, hit: 2 } },
      },
      percent: (6 / 9) * 100,
    });
  });
});

describe("parseLcov", () => {
  it("uses the summaries when a record has no detail lines", () => {
    const report = parseLcov("SF:a.c\nLF:10\nLH:4\nBRF:6\nBRH:3\nFNF:2\nFNH:2\nend_of_record\n", "c.info");
    expect(report).toEqual({
      lines: { found: 10, hit: 4 },
      branches: { found: 6, hit: 3 },
      functions: { found: 2, hit: 2 },
      files: { "a.c": { lines: { found: 10, hit: 4 } } },
      percent: 40,
    });
  });

  it("merges the records of one file written once per test name, summing hits by line", () => {
    const text = [
      "TN:first",
      "SF:a.js",
      "DA:1,1",
      "DA:2,0",
      "LF:2",
      "LH:1",
      "end_of_record",
      "TN:second",
      "SF:a.js",
      "DA:2,3",
      "DA:3,0",
      "LF:2",
      "LH:1",
      "end_of_record",
    ].join("\n");
    expect(parseLcov(text, "c.info").files).toEqual({ "a.js": { lines: { found: 3, hit: 2 } } });
  });

  it("reads lcov 2 records: VER header, FN with an end line, FNL/FNA, and a BRDA branch given as an expression", () => {
    const text = [
      "VER:2.0",
      "SF:src/x.py",
      "FN:3,9,parse",
      "FNL:0,12,20",
      "FNA:0,0,unused",
      "FNDA:2,parse",
      "BRDA:4,0,jump to line 6,1",
      "BRDA:4,0,jump to line 8,0",
      "DA:3,2",
      "DA:4,2",
      "end_of_record",
    ].join("\n");
    expect(parseLcov(text, "c.info")).toMatchObject({
      lines: { found: 2, hit: 2 },
      branches: { found: 2, hit: 1 },
      functions: { found: 2, hit: 1 },
    });
  });

  it("gives 100 percent when no line is instrumented", () => {
    expect(parseLcov("SF:empty.js\nend_of_record\n", "c.info")).toMatchObject({ lines: { found: 0, hit: 0 }, percent: 100 });
  });
});

describe("parseLcov refuses what is not a complete tracefile, naming the file and the problem", () => {
  it("a tracefile cut off inside a record", () => {
    const error = parseErrorOf(() => parseLcov(readFixture("malformed/truncated-lcov.info"), "coverage/lcov.info"));
    expect(error.source).toBe("coverage/lcov.info");
    expect(error.message).toBe("coverage/lcov.info: the record for the file opened at line 2 has no end_of_record; the tracefile looks truncated");
  });

  it.each([
    ["an empty file", "", /^c\.info: no coverage records \(SF: \.\.\. end_of_record\), expected an lcov tracefile/],
    ["a coverage summary in another format", "All files | 93.9 | 100 |", /^c\.info:1: not an lcov record \("All files \| 93\.9 \| 100 \|"\)/],
    ["an HTML report", "<!DOCTYPE html>\n<html>", /^c\.info:1: not an lcov record/],
    ["data before any SF", "TN:\nDA:1,1\nend_of_record", /^c\.info:2: DA: outside a file record/],
    ["an SF inside an open record", "SF:a\nDA:1,1\nSF:b\nend_of_record", /^c\.info:3: SF: before the end_of_record of the file opened at line 1/],
    ["end_of_record without SF", "end_of_record", /^c\.info:1: end_of_record without a preceding SF/],
    ["a DA without a count", "SF:a\nDA:1\nend_of_record", /^c\.info:2: DA:1 is not DA:<line>,<count>/],
    ["a negative count", "SF:a\nDA:1,-1\nend_of_record", /^c\.info:2: DA:1,-1 is not DA:<line>,<count>/],
    ["a bad BRDA", "SF:a\nBRDA:1,0,0\nend_of_record", /^c\.info:2: BRDA:1,0,0 is not BRDA:<line>,<block>,<branch>,<taken>/],
    ["a non-numeric summary", "SF:a\nLF:ten\nend_of_record", /^c\.info:2: LF:ten is not a count/],
    ["an SF without a path", "SF:\nend_of_record", /^c\.info:1: SF: without a file path/],
    ["a summary that hits more than it found", "SF:a.c\nLF:3\nLH:5\nend_of_record", /^c\.info: a\.c: LH 5 is larger than the count found \(3\)/],
  ])("%s", (_what, text, message) => {
    expect(parseErrorOf(() => parseLcov(text, "c.info")).message).toMatch(message);
  });
});
