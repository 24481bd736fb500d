import { describe, expect, it } from "vitest";
import { parseTap } from "../../../runner/src/evaluation/parsers/index.js";
import { parseErrorOf, readFixture } from "./fixtures.js";

const lines = (...text: string[]) => text.join("\n") + "\n";

describe("parseTap on streams written by real tools", () => {
  it("node --test: nested subtests become 'suite > test' paths, SKIP and TODO are skipped, a failing after-hook fails its suite", () => {
    expect(parseTap(readFixture("tap/node-test.tap"), "tap/node-test.tap")).toEqual({
      passing: [
        "calc > adds 1 + 2",
        'calc > escape > escapes <tags> & "quotes"',
        "calc > escape > nested > keeps 'single' quotes",
        "store > saves a value",
        "top-level smoke test",
      ],
      // `calc` itself is `not ok` only because two of its tests failed, so it is no test of its own;
      // `store` is `not ok` because its `after` hook threw while its one test passed.
      failing: ["calc > divides by zero to Infinity", "calc > rounds 0.1 + 0.2 to 0.3", "store"],
      // `parses hex` is `not ok ... # TODO`: an expected failure, not a failing test.
      skipped: ["calc > multiplies big numbers", "calc > parses hex", "calc > supports complex numbers"],
    });
  });

  it("tape (TAP 13): flat assertions without ' - ', YAML diagnostics skipped", () => {
    expect(parseTap(readFixture("tap/tape.tap"), "tap/tape.tap")).toEqual({
      passing: ["1 + 1 is 2", "adds 1 + 2", 'escapes <tags> & "quotes"', "throws RangeError"],
      failing: ["rounds 0.1 + 0.2 to 0.3"],
      skipped: ["multiplies big numbers", "supports complex numbers"],
    });
  });

  it("Perl Test::More (no version line, plan first): subtests, lower-case `# skip` without a name, escaped `\\#`", () => {
    expect(parseTap(readFixture("tap/perl-test-more.tap"), "tap/perl-test-more.tap")).toEqual({
      passing: [
        "calc > adds 1 + 2",
        'calc > escape > escapes <tags> & "quotes"',
        "calc > escape > nested > keeps 'single' quotes",
        // Test::More's `is` compares as strings: "0.3" eq "0.3".
        "calc > rounds 0.1 + 0.2 to 0.3",
        // Printed as `hash \\\# in a name`: an escaped backslash, then an escaped `#`.
        "hash \\# in a name",
        "top-level smoke test",
      ],
      failing: ["divides by zero to Infinity"],
      // `skip` gives its test point no description: the id falls back to its number.
      skipped: ["calc > #3", "calc > supports complex numbers"],
    });
  });
});

describe("parseTap on the shapes TAP takes", () => {
  it("names a subtest from its closing test point, or from `# Subtest:` when that point has no description", () => {
    const tap = lines(
      "TAP version 14",
      "1..2",
      "# Subtest: announced name",
      "    1..1",
      "    ok 1 - inner",
      "ok 1 - closing name",
      "# Subtest: parser",
      "    1..1",
      "    not ok 1 - handles empty input",
      "not ok 2",
    );
    expect(parseTap(tap, "t.tap")).toEqual({ passing: ["closing name > inner"], failing: ["parser > handles empty input"], skipped: [] });
  });

  it("reads directives case-insensitively after the first unescaped `#`, and TODO as skipped whether ok or not", () => {
    const tap = lines(
      "1..6",
      "ok 1 - plain",
      "ok 2 - issue \\#12 is fixed",
      "ok 3 - loads config # skip no config on CI",
      "not ok 4 - parses dates # TODO timezones",
      "ok 5 - unexpectedly works # todo",
      "not ok 6 - issue #7 regression",
    );
    expect(parseTap(tap, "t.tap")).toEqual({
      passing: ["issue #12 is fixed", "plain"],
      failing: ["issue #7 regression"],
      skipped: ["loads config", "parses dates", "unexpectedly works"],
    });
  });

  it("marks a whole subtree skipped under a SKIP or TODO parent", () => {
    const tap = lines("1..1", "    1..2", "    not ok 1 - broken", "    ok 2 - fine", "not ok 1 - experimental # TODO not ready");
    expect(parseTap(tap, "t.tap")).toEqual({ passing: [], failing: [], skipped: ["experimental > broken", "experimental > fine"] });
  });

  it("ignores YAML diagnostics, comments and other output, whatever they contain", () => {
    const tap = lines(
      "TAP version 13",
      "console output before the tests",
      "not ok 1 - reads the file",
      "  ---",
      "  message: |",
      "    not ok 2 - this is only text",
      "    Bail out! also only text",
      "    1..99",
      "  ...",
      "# a comment: ok 3 - not a test",
      "ok 2 - writes the file",
      "1..2",
    );
    expect(parseTap(tap, "t.tap")).toEqual({ passing: ["writes the file"], failing: ["reads the file"], skipped: [] });
  });

  it("accepts CRLF line endings, a byte-order mark, and tab-indented subtests", () => {
    const tap = "\uFEFFTAP version 14\r\n1..1\r\n\t1..1\r\n\tok 1 - child\r\nok 1 - parent\r\n";
    expect(parseTap(tap, "t.tap")).toEqual({ passing: ["parent > child"], failing: [], skipped: [] });
  });

  it("reads `1..0` as a valid run of no tests", () => {
    expect(parseTap("TAP version 13\n1..0 # SKIP no tests on this platform\n", "t.tap")).toEqual({ passing: [], failing: [], skipped: [] });
  });
});

describe("parseTap refuses incomplete or foreign output, naming the file and the problem", () => {
  it("a run that bailed out (Test::More's BAIL_OUT)", () => {
    const error = parseErrorOf(() => parseTap(readFixture("malformed/bail-out.tap"), "out/tests.tap"));
    expect(error.source).toBe("out/tests.tap");
    expect(error.line).toBe(3);
    expect(error.message).toBe(
      'out/tests.tap:3: the test run bailed out ("database schema is missing; run migrations first"), so its results are incomplete; fix what made it stop and run it again',
    );
  });

  it("a bail-out inside a subtest", () => {
    const error = parseErrorOf(() => parseTap(lines("1..1", "    ok 1 - a", "    Bail out! disk full"), "t.tap"));
    expect(error.message).toBe('t.tap:3: the test run bailed out ("disk full"), so its results are incomplete; fix what made it stop and run it again');
  });

  it("a process that died before its plan was met (Test::More, plan 1..5, three tests)", () => {
    const error = parseErrorOf(() => parseTap(readFixture("malformed/plan-short.tap"), "out/tests.tap"));
    expect(error.message).toBe("out/tests.tap:1: plan 1..5 but only 3 test(s) ran; the test process probably died before the end");
  });

  it("text that is not TAP at all (npm's missing-script error)", () => {
    const error = parseErrorOf(() => parseTap(readFixture("malformed/not-tap.txt"), "out/tests.tap"));
    expect(error.message).toMatch(/^out\/tests\.tap: not TAP output \(no `TAP version` line, no plan `1\.\.N`, no `ok`\/`not ok` line\)/);
  });

  it.each([
    ["no plan at all", lines("TAP version 14", "ok 1 - a", "ok 2 - b"), /^t\.tap: no plan line \(1\.\.N\) after 2 test\(s\)/],
    ["only a version line", "TAP version 14\n", /^t\.tap: no plan line \(1\.\.N\) after 0 test\(s\)/],
    ["more tests than planned", lines("1..1", "ok 1 - a", "ok 2 - b"), /^t\.tap:1: plan 1\.\.1 but 2 tests ran/],
    ["a subtest short of its plan", lines("1..1", "    1..3", "    ok 1 - a", "ok 1 - s"), /^t\.tap:2: plan 1\.\.3 \(in a subtest\) but only 1 test\(s\) ran/],
    [
      "a subtest never closed",
      lines("TAP version 14", "# Subtest: s", "    ok 1 - a", "    1..1"),
      /^t\.tap: the subtest that starts at line 3 is never closed by a test point/,
    ],
    [
      "an unterminated YAML block",
      lines("1..1", "not ok 1 - a", "  ---", "  message: boom"),
      /^t\.tap: the YAML diagnostic block opened at line 3 is not closed/,
    ],
    ["two plans", lines("1..1", "ok 1 - a", "1..1"), /^t\.tap:3: a second plan \(1\.\.1\) after the one at line 1/],
    ["an empty file", "", /^t\.tap: not TAP output/],
  ])("%s", (_what, tap, message) => {
    expect(parseErrorOf(() => parseTap(tap, "t.tap")).message).toMatch(message);
  });
});
