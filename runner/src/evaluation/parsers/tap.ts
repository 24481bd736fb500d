import { ParseError } from "./parse-error.js";
import { buildTestReport, type TestOutcome, type TestReport } from "./test-report.js";

/** One `ok`/`not ok` line, with the indented subtest block that preceded it, if any. */
interface TestPoint {
  ok: boolean;
  number: number | undefined;
  description: string;
  directive: "skip" | "todo" | undefined;
  /** The `# Subtest: name` announced for the block this point closes (used when the point has no description). */
  subtestName: string | undefined;
  children: Block | undefined;
  line: number;
}

/** The test points and plan at one indentation level: the whole stream, or one subtest. */
interface Block {
  indent: number;
  points: TestPoint[];
  plan: { count: number; line: number } | undefined;
  /** A subtest block parsed at a deeper indentation, waiting for the test point that closes it. */
  pendingChild: Block | undefined;
  /** This block's name from the `# Subtest: name` line before it (TAP 14), if there was one. */
  name: string | undefined;
  /** A `# Subtest: name` seen in this block, naming the next subtest block or test point. */
  announced: string | undefined;
  /** Where the block started, to name an unclosed subtest. */
  line: number;
}

const TEST_POINT = /^(not ok|ok)(?=\s|$)\s*(\d+)?\s*(?:-(?:\s+|$))?(.*)$/;
const PLAN = /^1\.\.(\d+)\s*(?:#.*)?$/;
const BAIL_OUT = /^bail out!\s*(.*)$/i;
const VERSION = /^TAP version \d+\s*$/i;
const SUBTEST = /^#\s*Subtest:\s*(.*)$/;
const DIRECTIVE = /^(skip|todo)\S*(?:\s+(.*))?$/i;

/**
 * Reads TAP 12/13/14 (node --test, tape, Perl's Test::More, ...) into test ids: the descriptions from the
 * outermost subtest down to the test, joined with ` > `. Throws a ParseError naming `source` for output
 * that is not TAP, that bailed out, or that ran fewer or more tests than its plan.
 */
export function parseTap(text: string, source: string): TestReport {
  const { root, sawVersion } = readBlocks(text, source);
  if (root.points.length === 0 && root.plan === undefined && !sawVersion) {
    throw new ParseError(
      source,
      "not TAP output (no `TAP version` line, no plan `1..N`, no `ok`/`not ok` line); did the test command print TAP, e.g. `node --test --test-reporter=tap`?",
    );
  }
  if (root.plan === undefined) {
    // A stream is only complete with its plan; without it a crash halfway would read as fewer tests.
    throw new ParseError(
      source,
      `no plan line (1..N) after ${root.points.length} test(s), so the run cannot be known to be complete; was the test process killed before it finished?`,
    );
  }
  const outcomes: [string, TestOutcome][] = [];
  collect(root, "", false, outcomes);
  return buildTestReport(outcomes);
}

/** One pass over the lines with a stack of blocks by indentation; YAML diagnostics are skipped whole. */
function readBlocks(text: string, source: string): { root: Block; sawVersion: boolean } {
  const lines = text.replace(/^\uFEFF/, "").split(/\r?\n/);
  const stack: Block[] = [newBlock(0, 1)];
  let yamlIndent: number | undefined;
  let yamlStart = 0;
  let afterPoint = false;
  let sawVersion = false;

  for (let index = 0; index < lines.length; index++) {
    const raw = (lines[index] ?? "").replace(/\s+$/, "");
    const lineNumber = index + 1;
    if (raw === "") continue;
    const indent = indentOf(raw);
    const content = raw.trimStart();

    if (yamlIndent !== undefined) {
      // Diagnostics may contain anything (stack traces, "ok", even "Bail out!"): nothing in them is TAP.
      if (content === "..." && indent === yamlIndent) yamlIndent = undefined;
      else if (indent < yamlIndent) {
        throw new ParseError(source, `the YAML diagnostic block opened at line ${yamlStart} is not closed with "..."; the TAP output is damaged`, lineNumber);
      }
      continue;
    }
    let block = stack[stack.length - 1] as Block;
    if (afterPoint && content === "---" && indent > block.indent) {
      yamlIndent = indent;
      yamlStart = lineNumber;
      afterPoint = false;
      continue;
    }
    afterPoint = false;

    const bail = BAIL_OUT.exec(content);
    if (bail) {
      const reason = bail[1] ? ` ("${bail[1]}")` : "";
      throw new ParseError(source, `the test run bailed out${reason}, so its results are incomplete; fix what made it stop and run it again`, lineNumber);
    }

    // Deeper than the current block: a subtest starts. Shallower: the subtests end, and wait (as the
    // parent's pendingChild) for the test point that closes them.
    while (indent < block.indent && stack.length > 1) {
      stack.pop();
      const parent = stack[stack.length - 1] as Block;
      for (const unclosed of [block.pendingChild, parent.pendingChild]) {
        if (unclosed !== undefined && hasTap(unclosed)) {
          throw new ParseError(source, `the subtest that starts at line ${unclosed.line} is never closed by a test point`, lineNumber);
        }
      }
      parent.pendingChild = block;
      block = parent;
    }
    if (indent > block.indent) {
      const child = newBlock(indent, lineNumber);
      child.name = block.announced;
      block.announced = undefined;
      stack.push(child);
      block = child;
    }

    const point = TEST_POINT.exec(content);
    if (point) {
      const [description, directive] = splitDirective(point[3] ?? "");
      const pending = block.pendingChild;
      block.points.push({
        ok: point[1] === "ok",
        number: point[2] === undefined ? undefined : Number(point[2]),
        description,
        directive,
        subtestName: pending?.name ?? block.announced,
        children: pending !== undefined && hasTap(pending) ? pending : undefined,
        line: lineNumber,
      });
      block.pendingChild = undefined;
      block.announced = undefined;
      afterPoint = true;
      continue;
    }
    const plan = PLAN.exec(content);
    if (plan) {
      if (block.plan !== undefined) {
        throw new ParseError(source, `a second plan (${content}) after the one at line ${block.plan.line}; a TAP stream has exactly one`, lineNumber);
      }
      block.plan = { count: Number(plan[1]), line: lineNumber };
      continue;
    }
    const subtest = SUBTEST.exec(content);
    if (subtest) {
      block.announced = (subtest[1] ?? "").trim();
      continue;
    }
    // Pragmas, other comments and unknown lines carry no results (TAP says to ignore them).
    if (VERSION.test(content) && block === stack[0]) sawVersion = true;
  }

  if (yamlIndent !== undefined) {
    throw new ParseError(source, `the YAML diagnostic block opened at line ${yamlStart} is not closed with "..."; the TAP output looks truncated`);
  }
  // A subtest still open at the end never got its closing test point.
  for (const block of stack) {
    const unclosed = [block.pendingChild, block === stack[0] ? undefined : block].find((b) => b !== undefined && hasTap(b));
    if (unclosed !== undefined) {
      throw new ParseError(source, `the subtest that starts at line ${unclosed.line} is never closed by a test point; the TAP output looks truncated`);
    }
  }
  const root = stack[0] as Block;
  checkPlans(root, source);
  return { root, sawVersion };
}

/** Every block with a plan must have run exactly that many tests; subtests without a plan are tolerated. */
function checkPlans(block: Block, source: string): void {
  if (block.plan !== undefined && block.plan.count !== block.points.length) {
    const where = block.indent === 0 ? "" : " (in a subtest)";
    const ran = block.points.length;
    const problem =
      ran < block.plan.count
        ? `plan 1..${block.plan.count}${where} but only ${ran} test(s) ran; the test process probably died before the end`
        : `plan 1..${block.plan.count}${where} but ${ran} tests ran; the TAP output mixes more than one run or its plan is wrong`;
    throw new ParseError(source, problem, block.plan.line);
  }
  for (const point of block.points) if (point.children) checkPlans(point.children, source);
}

/**
 * Leaves are the tests. A test point that closes a subtest is a suite, not a test, except when it failed
 * on its own (node --test reports a failing `after` hook only on the suite): then the suite's path is a
 * failing id, so that failure is not lost. SKIP and TODO mark their whole subtree as skipped.
 */
function collect(block: Block, prefix: string, skippedAbove: boolean, outcomes: [string, TestOutcome][]): void {
  block.points.forEach((point, position) => {
    const name = point.description || point.subtestName || `#${point.number ?? position + 1}`;
    const id = prefix === "" ? name : `${prefix} > ${name}`;
    const skipped = skippedAbove || point.directive !== undefined;
    if (point.children) {
      const before = outcomes.length;
      collect(point.children, id, skipped, outcomes);
      const childFailed = outcomes.slice(before).some(([, outcome]) => outcome === "failing");
      if (!point.ok && !skipped && !childFailed) outcomes.push([id, "failing"]);
      return;
    }
    // TODO means "expected not to work yet": neither its failure nor an unexpected pass is a result.
    outcomes.push([id, skipped ? "skipped" : point.ok ? "passing" : "failing"]);
  });
}

/** Splits `desc # SKIP reason` at the first unescaped `#` that starts a directive, and unescapes `\#`, `\\`. */
function splitDirective(rest: string): [string, "skip" | "todo" | undefined] {
  for (let i = 0; i < rest.length; i++) {
    const char = rest[i];
    if (char === "\\") {
      i++;
      continue;
    }
    if (char !== "#") continue;
    const directive = DIRECTIVE.exec(rest.slice(i + 1).trim());
    if (directive) {
      const kind = (directive[1] ?? "").toLowerCase() === "skip" ? "skip" : "todo";
      return [unescape(rest.slice(0, i)), kind];
    }
    // A bare `#` that does not start a directive is kept as part of the description.
  }
  return [unescape(rest), undefined];
}

function unescape(description: string): string {
  return description.replace(/\\([\\#])/g, "$1").trim();
}

function newBlock(indent: number, line: number): Block {
  return { indent, points: [], plan: undefined, pendingChild: undefined, name: undefined, announced: undefined, line };
}

function hasTap(block: Block): boolean {
  return block.points.length > 0 || block.plan !== undefined;
}

// TAP 14 indents subtests by four spaces; a tab counts as four so that hand-indented streams still nest.
function indentOf(line: string): number {
  let width = 0;
  for (const char of line) {
    if (char === " ") width += 1;
    else if (char === "\t") width += 4;
    else break;
  }
  return width;
}
