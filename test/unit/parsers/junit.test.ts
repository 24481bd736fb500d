import { describe, expect, it } from "vitest";
import { parseJUnit } from "../../../runner/src/evaluation/parsers/index.js";
import { parseErrorOf, readFixture } from "./fixtures.js";

// Each real report comes from the same small sample project (test/fixtures/README.md): a top-level smoke
// test, then in `calc` a pass, an assertion failure, a thrown error, a skipped and a todo test, and nested
// `escape` > `nested` suites whose names hold `<`, `&`, double and single quotes.
describe("parseJUnit on reports written by real tools", () => {
  it("vitest: classname is the file, name the describe path joined by ' > '", () => {
    const file = "test-vitest/calc.test.js";
    expect(parseJUnit(readFixture("junit/vitest.xml"), "junit/vitest.xml")).toEqual({
      passing: [
        `${file}::calc > adds 1 + 2`,
        `${file}::calc > escape > escapes <tags> & "quotes"`,
        `${file}::calc > escape > nested > keeps 'single' quotes`,
        `${file}::top-level smoke test`,
      ],
      failing: [`${file}::calc > divides by zero to Infinity`, `${file}::calc > rounds 0.1 + 0.2 to 0.3`],
      skipped: [`${file}::calc > multiplies big numbers`, `${file}::calc > supports complex numbers`],
    });
  });

  it("jest-junit: by default classname repeats the full title, and a todo test carries no <skipped/>", () => {
    const id = (title: string) => `${title}::${title}`;
    expect(parseJUnit(readFixture("junit/jest-junit.xml"), "junit/jest-junit.xml")).toEqual({
      passing: [
        id("calc adds 1 + 2"),
        id('calc escape escapes <tags> & "quotes"'),
        id("calc escape nested keeps 'single' quotes"),
        // jest-junit 17 writes `it.todo` as a bare <testcase>: the report itself says it passed.
        id("calc supports complex numbers"),
        // Its classname and name start with a space (" top-level smoke test"); ids are trimmed.
        id("top-level smoke test"),
      ],
      failing: [id("calc divides by zero to Infinity"), id("calc rounds 0.1 + 0.2 to 0.3")],
      skipped: [id("calc multiplies big numbers")],
    });
  });

  it("node --test (Node 20): nested <testsuite> per describe, classname always 'test', a testcase directly under <testsuites>", () => {
    expect(parseJUnit(readFixture("junit/node-test.xml"), "junit/node-test.xml")).toEqual({
      passing: [
        "test::adds 1 + 2",
        // Node 20's reporter escapes `"` twice (`&amp;quot;`); decoding the XML once gives `&quot;` back.
        "test::escapes <tags> & &quot;quotes&quot;",
        "test::keeps 'single' quotes",
        // Node's JUnit reporter drops the failing `after` hook of `store`; only TAP keeps it.
        "test::saves a value",
        "test::top-level smoke test",
      ],
      failing: ["test::divides by zero to Infinity", "test::rounds 0.1 + 0.2 to 0.3"],
      // `parses hex` is a todo whose body fails: it has both <skipped type="todo"> and <failure>.
      skipped: ["test::multiplies big numbers", "test::parses hex", "test::supports complex numbers"],
    });
  });

  it("pytest: <error> for a broken fixture is failing, xfail is skipped, parametrize ids keep their special characters", () => {
    expect(parseJUnit(readFixture("junit/pytest.xml"), "junit/pytest.xml")).toEqual({
      passing: [
        "tests.test_calc.TestCalc.TestEscape::test_escapes['-']",
        'tests.test_calc.TestCalc.TestEscape::test_escapes[<a href="x">&</a>-&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;]',
        "tests.test_calc.TestCalc::test_adds",
        "tests.test_calc::test_smoke",
      ],
      failing: ["tests.test_calc.TestCalc::test_divides_by_zero", "tests.test_calc.TestCalc::test_rounds", "tests.test_calc::test_uses_broken_fixture"],
      skipped: ["tests.test_calc.TestCalc::test_complex", "tests.test_calc.TestCalc::test_multiplies_big_numbers"],
    });
  });

  it("gotestsum: subtests are slash paths, parents are testcases too, numeric character references are decoded", () => {
    const id = (name: string) => `example.com/calc::${name}`;
    expect(parseJUnit(readFixture("junit/gotestsum.xml"), "junit/gotestsum.xml")).toEqual({
      passing: [
        id("TestCalc/adds_1_+_2"),
        id("TestCalc/escape"),
        id('TestCalc/escape/escapes_<tags>_&_"quotes"'),
        id("TestCalc/escape/nested"),
        id("TestCalc/escape/nested/keeps_'single'_quotes"),
        id("TestSmoke"),
      ],
      failing: [id("TestCalc"), id("TestCalc/rounds_0.1_+_0.2_to_0.3"), id("TestDividesByZero")],
      skipped: [id("TestCalc/multiplies_big_numbers")],
    });
  });

  it("nextest (hand-written from its documented format): retried failures fail, a flaky test that passed on retry passes", () => {
    expect(parseJUnit(readFixture("junit/nextest-handwritten.xml"), "junit/nextest-handwritten.xml")).toEqual({
      passing: ["calc::integration::flaky_clock", "calc::tests::adds", "calc::tests::escapes_<tags>_&_quotes"],
      failing: ["calc::integration::divides_by_zero", "calc::tests::rounds"],
      skipped: [],
    });
  });
});

describe("parseJUnit on the shapes JUnit files take", () => {
  it("uses the enclosing suite's name when classname is missing or blank, and the name alone when there is none", () => {
    const xml = `<testsuite name="  tests/math.spec.ts ">
      <testcase name=" adds "/>
      <testcase name="subtracts" classname="   "/>
      <testsuite><testcase name="nested, unnamed suite"/></testsuite>
      <testsuite name="inner"><testcase name="inner test"/></testsuite>
    </testsuite>`;
    expect(parseJUnit(xml, "r.xml").passing).toEqual([
      "inner::inner test",
      "tests/math.spec.ts::adds",
      "tests/math.spec.ts::nested, unnamed suite",
      "tests/math.spec.ts::subtracts",
    ]);
    expect(parseJUnit(`<testsuites name="run"><testcase name="lonely"/></testsuites>`, "r.xml").passing).toEqual(["lonely"]);
  });

  it("keeps one id per test when a report repeats it: failing beats passing beats skipped", () => {
    const xml = `<testsuites>
      <testsuite name="first run"><testcase classname="a" name="t"/><testcase classname="a" name="u"><skipped/></testcase></testsuite>
      <testsuite name="retry"><testcase classname="a" name="t"><failure/></testcase><testcase classname="a" name="u"/></testsuite>
      <testsuite name="again"><testcase classname="a" name="t"/><testcase classname="a" name="v"><skipped/></testcase><testcase classname="a" name="v"><skipped/></testcase></testsuite>
    </testsuites>`;
    expect(parseJUnit(xml, "r.xml")).toEqual({ passing: ["a::u"], failing: ["a::t"], skipped: ["a::v"] });
  });

  it("decodes entities and character references once, reads CDATA as text, and ignores a byte-order mark", () => {
    const xml = `\uFEFF<?xml version="1.0" encoding="UTF-8"?>
      <!-- written by hand -->
      <testsuite name="s">
        <testcase classname="x" name="&lt;a&gt; &amp;amp; &#60;b&#x3E; &quot;q&quot; &apos;s&apos; &#x1F600;"/>
        <testcase classname="x" name="has a CDATA failure"><failure><![CDATA[expected <testcase name="fake"/> & more]]></failure></testcase>
        <testcase classname="x" name="has system-out"><system-out><![CDATA[<skipped/>]]></system-out></testcase>
      </testsuite>`;
    expect(parseJUnit(xml, "r.xml")).toEqual({
      passing: [`x::<a> &amp; <b> "q" 's' \u{1F600}`, "x::has system-out"],
      failing: ["x::has a CDATA failure"],
      skipped: [],
    });
  });

  it("does not expand entities declared in a DOCTYPE", () => {
    const xml = `<!DOCTYPE testsuite [<!ENTITY boom "lol">]><testsuite name="s"><testcase name="&boom;"/></testsuite>`;
    expect(parseJUnit(xml, "r.xml").passing).toEqual(["s::&boom;"]);
  });

  it("counts <error> as failing and only a final <failure>, not <flakyFailure> or <rerunFailure> alone, as a failure", () => {
    const xml = `<testsuite name="s">
      <testcase name="crashed"><error message="segfault"/></testcase>
      <testcase name="flaky"><flakyFailure type="test failure">first try</flakyFailure></testcase>
      <testcase name="rerun only"><rerunFailure type="test failure">odd</rerunFailure></testcase>
    </testsuite>`;
    expect(parseJUnit(xml, "r.xml")).toEqual({ passing: ["s::flaky", "s::rerun only"], failing: ["s::crashed"], skipped: [] });
  });

  it("reads an empty suite as a valid report with no tests", () => {
    const empty = { passing: [], failing: [], skipped: [] };
    expect(parseJUnit(`<testsuites/>`, "r.xml")).toEqual(empty);
    expect(parseJUnit(`<?xml version="1.0"?>\n<testsuite name="none" tests="0" failures="0"></testsuite>`, "r.xml")).toEqual(empty);
    expect(parseJUnit(`<testsuites name="nextest-run" tests="0"><!-- tests 0 --></testsuites>`, "r.xml")).toEqual(empty);
  });
});

describe("parseJUnit refuses what is not a JUnit report, naming the file and the problem", () => {
  it("a report cut short while being written", () => {
    const error = parseErrorOf(() => parseJUnit(readFixture("malformed/truncated-vitest.xml"), ".loopwarden/out/junit.xml"));
    expect(error.source).toBe(".loopwarden/out/junit.xml");
    expect(error.message).toBe(
      ".loopwarden/out/junit.xml: the XML ends inside <testsuites> > <testsuite> > <testcase> > <failure>, expected a complete JUnit report; was the file truncated, or the test command killed while writing it?",
    );
  });

  it("an HTML error page saved under the report's name", () => {
    const error = parseErrorOf(() => parseJUnit(readFixture("malformed/html-404.xml"), "out/junit.xml"));
    expect(error.message).toMatch(/^out\/junit\.xml: an HTML page, not JUnit XML \(expected a <testsuites> or <testsuite> root\)/);
  });

  it.each([
    ["an empty file", "  \n", /^r\.xml: empty file, expected JUnit XML/],
    ["plain text", "Error: Cannot find module 'vitest'", /^r\.xml: not XML \(it starts with "Error: Cannot find module 'vitest'"\), expected JUnit XML/],
    ["JSON", `{"numFailedTests": 0}`, /^r\.xml: not XML \(it starts with "\{\\"numFailedTests\\": 0\}"\)/],
    [
      "another XML document",
      `<?xml version="1.0"?><coverage line-rate="0.9"/>`,
      /^r\.xml: not JUnit XML \(root element <coverage>, expected <testsuite> or <testsuites>\)/,
    ],
    ["well-formed XHTML", `<html><body><p>502</p></body></html>`, /^r\.xml: an HTML page, not JUnit XML/],
    ["two reports in one file", `<testsuite name="a"/><testsuite name="b"/>`, /^r\.xml: more than one root element/],
    ["mismatched tags", `<testsuites>\n<testsuite name="a">\n</testsuites>`, /^r\.xml:3: not well-formed XML \(Expected closing tag 'testsuite'/],
    ["a testcase without a name", `<testsuite name="s"><testcase classname="c"/></testsuite>`, /^r\.xml: a <testcase> in suite "s" has no name attribute/],
  ])("%s", (_what, xml, message) => {
    const error = parseErrorOf(() => parseJUnit(xml, "r.xml"));
    expect(error.source).toBe("r.xml");
    expect(error.message).toMatch(message);
  });
});
