import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Contract } from "#shared/wire/contract.js";
import { ChangedLines, MAX_UNCOVERED_FILES, MAX_UNCOVERED_LINES_PER_FILE } from "#shared/wire/observation.js";
import { changedLinesReading, parseNewLines, readChangedLines, repoPathOf } from "../../../runner/src/evaluation/changed-lines.js";
import { clearCoverageReport, readGuardsAfterGates } from "../../../runner/src/evaluation/guard-readings.js";

// guards.coverage.changed_lines (DESIGN §6.4): the runner reads which lines a candidate changed since
// its parent that no gate executed, from a real repository's diff and the lcov report the gates wrote.

const tmp = mkdtempSync(path.join(os.tmpdir(), "lw-changed-lines-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let serial = 0;

const git = (cwd: string, ...args: string[]) => execFileSync("git", args, { cwd, encoding: "utf8" }).trim();

/** A repository with `before` committed as the parent and `after` on top of it (null deletes a file). */
function twoCommits(before: Record<string, string>, after: Record<string, string | null>): { dir: string; parent: string; commit: string } {
  const dir = path.join(tmp, `repo-${++serial}`);
  mkdirSync(dir);
  git(dir, "init", "-q", "-b", "main");
  const write = (files: Record<string, string | null>) => {
    for (const [name, content] of Object.entries(files)) {
      const file = path.join(dir, name);
      if (content === null) rmSync(file);
      else {
        mkdirSync(path.dirname(file), { recursive: true });
        writeFileSync(file, content);
      }
    }
    git(dir, "add", "-A");
    git(dir, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "--allow-empty", "-m", "commit");
    return git(dir, "rev-parse", "HEAD");
  };
  const parent = write(before);
  const commit = write(after);
  return { dir, parent, commit };
}

/** An lcov record per file: `{ "src/a.js": { 1: 1, 2: 0 } }` is SF:src/a.js with DA:1,1 and DA:2,0. */
function lcov(files: Record<string, Record<number, number>>): string {
  return Object.entries(files)
    .map(([file, lines]) => [`SF:${file}`, ...Object.entries(lines).map(([line, hits]) => `DA:${line},${hits}`), "end_of_record"].join("\n"))
    .join("\n");
}

const CALC = ["/** Arithmetic. */", "export function add(a, b) {", "  return a + b;", "}", "", "export function sub(a, b) {", "  return a - b;", "}", ""].join(
  "\n",
);
// What a coverage tool instruments of CALC: the code lines, add called and sub not.
const CALC_HITS = { 2: 1, 3: 1, 4: 1, 6: 1, 7: 0, 8: 0 };

const readingOf = async (repo: { dir: string; parent: string; commit: string }, text: string | null) =>
  ChangedLines.parse(await readChangedLines(repo.dir, repo.parent, repo.commit, { path: "coverage/lcov.info", text }));

describe("changed lines judged on the gates' lcov report", () => {
  it("a changed line the report gives a hit is executed; one it gives none is listed, against the parent", async () => {
    const repo = twoCommits(
      { "src/calc.js": CALC },
      { "src/calc.js": CALC.replace("return a + b;", "return b + a;").replace("return a - b;", "return -(b - a);") },
    );
    expect(await readingOf(repo, lcov({ "src/calc.js": CALC_HITS }))).toEqual({
      against: repo.parent,
      measured: 2,
      uncovered: [{ path: "src/calc.js", lines: [7] }],
      uncovered_count: 1,
    });
  });

  it("a change to lines the report does not instrument (a comment, a blank) counts for nothing", async () => {
    const repo = twoCommits(
      { "src/calc.js": CALC },
      { "src/calc.js": CALC.replace("/** Arithmetic. */", "/** Arithmetic, exactly. */").replace("}\n\nexport", "}\n\n\nexport") },
    );
    // The candidate's own lines, as its report has them: sub is a line further down.
    const hits = { 2: 1, 3: 1, 4: 1, 7: 1, 8: 0, 9: 0 };
    expect(await readingOf(repo, lcov({ "src/calc.js": hits }))).toEqual({ against: repo.parent, measured: 0, uncovered: [], uncovered_count: 0 });
  });

  it("a change that only deletes lines adds none to judge, and neither does a deleted file", async () => {
    const repo = twoCommits(
      { "src/calc.js": CALC, "src/old.js": "export const x = 1;\n" },
      { "src/calc.js": CALC.replace("\nexport function sub(a, b) {\n  return a - b;\n}\n", ""), "src/old.js": null },
    );
    expect(parseNewLines(git(repo.dir, "diff", "-U0", repo.parent, repo.commit))).toEqual(new Map());
    expect(await readingOf(repo, lcov({ "src/calc.js": { 2: 1, 3: 1, 4: 1 } }))).toMatchObject({ measured: 0, uncovered_count: 0 });
  });

  it("absolute SF paths inside the clone are read as repository paths", async () => {
    const repo = twoCommits({ "src/calc.js": CALC }, { "src/calc.js": CALC.replace("return a - b;", "return b - a;") });
    const text = lcov({ [path.join(repo.dir, "src", "calc.js")]: CALC_HITS, "/usr/lib/node/internal.js": { 1: 0 } });
    expect(await readingOf(repo, text)).toMatchObject({ measured: 1, uncovered: [{ path: "src/calc.js", lines: [7] }], uncovered_count: 1 });
    expect(repoPathOf(`file://${path.join(repo.dir, "src", "calc.js")}`, [repo.dir])).toBe("src/calc.js");
    expect(repoPathOf("./src/../src/calc.js", [repo.dir])).toBe("src/calc.js");
    expect(repoPathOf("../elsewhere.js", [repo.dir])).toBeNull();
    expect(repoPathOf(path.join(path.dirname(repo.dir), "other", "calc.js"), [repo.dir])).toBeNull();
  });

  it("a changed file the report never lists, of a kind it measures, has every non-blank changed line uncovered; other kinds are not code it measures", async () => {
    const repo = twoCommits(
      { "src/calc.js": CALC, "README.md": "# calc\n" },
      {
        "src/calc.js": CALC,
        "src/unused.js": "// never imported\nexport const answer = 42;\n\nexport const half = 21;\n",
        "README.md": "# calc\n\nAdds.\n",
        "src/types.d.ts": "export type N = number;\n",
      },
    );
    expect(await readingOf(repo, lcov({ "src/calc.js": CALC_HITS, "src/other.ts": { 1: 1 } }))).toEqual({
      against: repo.parent,
      measured: 3,
      uncovered: [{ path: "src/unused.js", lines: [1, 2, 4] }],
      uncovered_count: 3,
    });
  });

  it("renamed files count only their edits; paths with spaces and quotes are read as they are; a binary file adds no line", async () => {
    const body = Array.from({ length: 12 }, (_, index) => `export const v${index} = ${index};`).join("\n");
    const repo = twoCommits(
      { "src/old name.js": `${body}\n`, 'src/q"uote.js': "export const q = 1;\n" },
      {
        "src/old name.js": null,
        "src/new name.js": `${body}\nexport const v12 = 12;\n`,
        'src/q"uote.js': "export const q = 2;\n",
        "src/blob.bin": "\u0000\u0001\u0002",
      },
    );
    const text = lcov({ "src/new name.js": { 1: 1, 13: 0 }, 'src/q"uote.js': { 1: 0 } });
    expect(await readingOf(repo, text)).toEqual({
      against: repo.parent,
      measured: 2,
      uncovered: [
        { path: "src/new name.js", lines: [13] },
        { path: 'src/q"uote.js', lines: [1] },
      ],
      uncovered_count: 2,
    });
  });

  it("a report not written, unreadable, or naming no file of the repository is a reading with an error", async () => {
    const repo = twoCommits({ "src/calc.js": CALC }, { "src/calc.js": CALC.replace("return a - b;", "return b - a;") });
    expect(await readingOf(repo, null)).toMatchObject({
      against: repo.parent,
      uncovered_count: 0,
      error: expect.stringContaining("coverage/lcov.info: no coverage report was written"),
    });
    expect((await readingOf(repo, "SF:src/calc.js\nDA:7,1\n")).error).toMatch(/no end_of_record/);
    expect((await readingOf(repo, lcov({ "/elsewhere/src/calc.js": CALC_HITS }))).error).toMatch(/none of its 1 source file\(s\) is in the repository/);
    const summaryOnly = await readingOf(repo, "SF:src/calc.js\nLF:6\nLH:4\nend_of_record\n");
    expect(summaryOnly.error).toMatch(/src\/calc.js has line totals but no per-line records/);
  });

  it("lists at most 100 files of at most 200 lines each, sorted, and counts every uncovered line", () => {
    const changed = new Map(
      Array.from({ length: 150 }, (_, file) => [
        `src/f${String(file).padStart(3, "0")}.js`,
        Array.from({ length: 300 }, (_, line) => ({ line: 300 - line, blank: false })),
      ]),
    );
    const hits = Object.fromEntries(
      [...changed.keys()].map((file) => [file, Object.fromEntries(Array.from({ length: 300 }, (_, line) => [line + 1, line % 6 === 0 ? 1 : 0]))]),
    );
    const reading = ChangedLines.parse(changedLinesReading("a".repeat(40), changed, { path: "lcov.info", text: lcov(hits) }, [tmp]));
    expect(reading.measured).toBe(150 * 300);
    expect(reading.uncovered_count).toBe(150 * 250);
    expect(reading.uncovered).toHaveLength(MAX_UNCOVERED_FILES);
    expect(reading.uncovered[0]).toEqual({
      path: "src/f000.js",
      lines: Array.from({ length: 300 }, (_, line) => line + 1)
        .filter((line) => line % 6 !== 1)
        .slice(0, MAX_UNCOVERED_LINES_PER_FILE),
    });
    expect(reading.uncovered.at(-1)?.path).toBe("src/f099.js");
  });
});

describe("the readings after the gates", () => {
  const contractOf = (changedLines: boolean) =>
    Contract.parse({
      name: "p",
      mode: "check_fixpoint",
      gates: [{ name: "unit", run: "npm test" }],
      agent: { run: "./agent.sh" },
      guards: { coverage: { lcov: "coverage/lcov.info", floor: "0%", ...(changedLines ? { changed_lines: true } : {}) } },
    });
  const contract = contractOf(true);

  it("read a candidate against its parent commit, and t0 not at all", async () => {
    const repo = twoCommits({ "src/calc.js": CALC }, { "src/calc.js": CALC.replace("return a - b;", "return b - a;") });
    mkdirSync(path.join(repo.dir, "coverage"));
    writeFileSync(path.join(repo.dir, "coverage", "lcov.info"), lcov({ "src/calc.js": CALC_HITS }));
    const candidate = await readGuardsAfterGates(repo.dir, contract, { contractFile: null, baseline: repo.parent });
    expect(candidate.readings.changed_lines).toMatchObject({ against: repo.parent, uncovered: [{ path: "src/calc.js", lines: [7] }] });
    expect(candidate.readings.coverage_percent).toBeCloseTo((4 / 6) * 100);
    const t0 = await readGuardsAfterGates(repo.dir, contract, { contractFile: null, baseline: repo.commit });
    expect(t0.readings).toEqual({ coverage_percent: candidate.readings.coverage_percent });
    const notAsked = await readGuardsAfterGates(repo.dir, contractOf(false), { contractFile: null, baseline: repo.parent });
    expect(notAsked.readings).toEqual({ coverage_percent: candidate.readings.coverage_percent });
  });

  it("never take a committed report for this run's: it is removed before the gates, and its directory made", async () => {
    const repo = twoCommits(
      { "src/calc.js": CALC },
      { "src/calc.js": CALC.replace("return a - b;", "return b - a;"), "coverage/lcov.info": lcov({ "src/calc.js": { 7: 1 } }) },
    );
    await clearCoverageReport(repo.dir, contract);
    const after = await readGuardsAfterGates(repo.dir, contract, { contractFile: null, baseline: repo.parent });
    expect(after.readings.changed_lines?.error).toMatch(/no coverage report was written/);
    expect(after.notes).toEqual(["coverage/lcov.info: no coverage report was written"]);
  });
});
