import { XMLParser, XMLValidator, type EntityDecoderOptions } from "fast-xml-parser";
import { ParseError } from "./parse-error.js";
import { buildTestReport, type TestOutcome, type TestReport } from "./test-report.js";

// Decodes exactly what XML defines: the five predefined entities and numeric character references,
// in one pass (so `&amp;quot;` stays `&quot;`, as XML says). fast-xml-parser's default decoder leaves
// numeric references such as gotestsum's `&#34;` undecoded, which would give one test two ids depending
// on the tool. Entities declared in a DOCTYPE are deliberately not expanded: no test report needs them
// and expanding them is how "billion laughs" files blow up a reader.
const PREDEFINED: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };
const ENTITY = /&(#[xX][0-9a-fA-F]+|#[0-9]+|[A-Za-z_][\w.-]*);/g;
const xmlEntities: EntityDecoderOptions = {
  setExternalEntities: () => {},
  addInputEntities: () => {},
  reset: () => {},
  setXmlVersion: () => {},
  decode: (text) =>
    text.includes("&")
      ? text.replace(ENTITY, (whole, entity: string) => {
          if (entity.startsWith("#")) {
            const hex = entity[1] === "x" || entity[1] === "X";
            const codePoint = Number.parseInt(entity.slice(hex ? 2 : 1), hex ? 16 : 10);
            return codePoint <= 0x10ffff ? String.fromCodePoint(codePoint) : whole;
          }
          return PREDEFINED[entity] ?? whole;
        })
      : text,
};

// Elements that may repeat are always arrays, so one <testcase> and many read the same way. Attributes
// keep a prefix: node --test writes a `failure="..."` attribute next to the <failure> element, and an
// attribute must never be mistaken for a child element.
const REPEATED = new Set(["testsuite", "testcase", "failure", "error", "skipped"]);
const ATTRIBUTE = "@_";
const parser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: ATTRIBUTE,
  parseAttributeValue: false,
  parseTagValue: false,
  ignoreDeclaration: true,
  ignorePiTags: true,
  entityDecoder: xmlEntities,
  isArray: (name, _path, _isLeaf, isAttribute) => !isAttribute && REPEATED.has(name),
});

type XmlNode = Record<string, unknown>;

/**
 * Reads a JUnit XML report (vitest, jest-junit, node --test, pytest, gotestsum, nextest, ...) into test
 * ids `classname::name`. Throws a ParseError naming `source` when the text is not a JUnit report.
 */
export function parseJUnit(xml: string, source: string): TestReport {
  const text = xml.startsWith("\uFEFF") ? xml.slice(1) : xml;
  if (text.trim() === "") {
    throw new ParseError(source, "empty file, expected JUnit XML (a <testsuites> or <testsuite> root); did the test command write a report?");
  }
  if (looksLikeHtml(text)) {
    throw new ParseError(
      source,
      "an HTML page, not JUnit XML (expected a <testsuites> or <testsuite> root); did a server or proxy answer instead of the test tool?",
    );
  }
  if (!text.trimStart().startsWith("<")) {
    throw new ParseError(
      source,
      `not XML (it starts with ${excerpt(text)}), expected JUnit XML with a <testsuites> or <testsuite> root; did the test command write a report?`,
    );
  }
  const verdict = XMLValidator.validate(text);
  if (verdict !== true) throw malformed(verdict.err, source);
  const document = parser.parse(text) as XmlNode;
  const roots = Object.keys(document).filter((key) => key !== "#text");
  const rootName = roots[0];
  if (rootName !== "testsuites" && rootName !== "testsuite") {
    const found = rootName === undefined ? "no root element" : `root element <${rootName}>`;
    throw new ParseError(source, `not JUnit XML (${found}, expected <testsuite> or <testsuites>); did the test command write a report?`);
  }
  const rootValue = document[rootName];
  // The validator accepts several top-level elements; a JUnit file has one (two mean reports were concatenated).
  if (roots.length > 1 || (Array.isArray(rootValue) && rootValue.length > 1)) {
    throw new ParseError(source, "more than one root element, expected a single <testsuites> or <testsuite>; were two reports written to the same file?");
  }
  const root = asNode(Array.isArray(rootValue) ? rootValue[0] : rootValue);
  const outcomes: [string, TestOutcome][] = [];
  if (rootName === "testsuites") {
    // The <testsuites> name ("vitest tests", "nextest-run") names the run, not a suite of tests, so it is
    // not a fallback classname; node --test even puts top-level testcases directly under it.
    collectSuite(root, "", source, outcomes);
  } else {
    collectSuite(root, attr(root, "name"), source, outcomes);
  }
  return buildTestReport(outcomes);
}

/** Walks one suite and the suites nested in it (node --test nests one per describe). */
function collectSuite(suite: XmlNode, suiteName: string, source: string, outcomes: [string, TestOutcome][]): void {
  for (const item of asArray(suite.testcase)) {
    const testcase = asNode(item);
    const name = attr(testcase, "name");
    if (name === "") {
      const where = suiteName === "" ? "" : ` in suite "${suiteName}"`;
      throw new ParseError(source, `a <testcase>${where} has no name attribute; every JUnit testcase needs one to be identified`);
    }
    // Tools that leave classname out usually name the suite after the file or module instead (the
    // `file` attribute is not used: it is absent from most tools and would make ids path-dependent).
    const classname = attr(testcase, "classname") || suiteName;
    outcomes.push([classname === "" ? name : `${classname}::${name}`, outcomeOf(testcase)]);
  }
  for (const item of asArray(suite.testsuite)) {
    const nested = asNode(item);
    collectSuite(nested, attr(nested, "name") || suiteName, source, outcomes);
  }
}

/**
 * <skipped> wins over <failure>: node --test writes both for a `todo` test whose body fails, an expected
 * failure (as TAP's `not ok # TODO`). <flakyFailure>/<rerunFailure> (nextest, surefire) describe retries;
 * only a final <failure> or <error> makes the test failing.
 */
function outcomeOf(testcase: XmlNode): TestOutcome {
  if (testcase.skipped !== undefined) return "skipped";
  if (testcase.failure !== undefined || testcase.error !== undefined) return "failing";
  return "passing";
}

/** Turns the validator's complaint into what a user can act on; an unfinished file is the common case. */
function malformed(error: { code: string; msg: string; line: number }, source: string): ParseError {
  // fast-xml-parser reports elements left open at the end of the input as "Invalid '[...names]' found."
  const open = error.code === "InvalidXml" && error.msg.startsWith("Invalid '[") ? [...error.msg.matchAll(/"([^"]+)"/g)].map((m) => `<${m[1]}>`) : [];
  if (open.length > 0) {
    return new ParseError(
      source,
      `the XML ends inside ${open.join(" > ")}, expected a complete JUnit report; was the file truncated, or the test command killed while writing it?`,
    );
  }
  return new ParseError(
    source,
    `not well-formed XML (${error.msg}), expected a JUnit report; was it truncated or written by two processes at once?`,
    error.line,
  );
}

function excerpt(text: string): string {
  const start = text.trim().slice(0, 40);
  return JSON.stringify(start.length < text.trim().length ? `${start}…` : start);
}

function looksLikeHtml(text: string): boolean {
  return /^\s*(<\?xml[^>]*>\s*)?(<!--[\s\S]*?-->\s*)*<(!doctype\s+html|html)[\s>]/i.test(text);
}

// An element without attributes or children parses as "" (e.g. `<testsuite/>`), and one with only text
// as a string: both are treated as an element with nothing in it.
function asNode(value: unknown): XmlNode {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as XmlNode) : {};
}

function asArray(value: unknown): unknown[] {
  if (value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}

function attr(element: XmlNode, name: string): string {
  const value = element[ATTRIBUTE + name];
  return typeof value === "string" ? value.trim() : "";
}
