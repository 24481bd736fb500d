import { realpath } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { MAX_UNCOVERED_FILES, MAX_UNCOVERED_LINES_PER_FILE, type ChangedLines } from "#shared/wire/observation.js";
import { git } from "../process/git.js";
import { parseLcov } from "./parsers/index.js";

// The runner's half of `guards.coverage.changed_lines` (DESIGN §6.4): which lines a candidate added or
// rewrote since its parent, and which of them no gate executed, read from the lcov report the gates
// wrote in the candidate's clone. The engine rejects the candidate `check_inadequate` when any is left.

/** A line a change adds or rewrites, on the new side: its number, and whether it is blank. */
export interface NewLine {
  line: number;
  blank: boolean;
}

// The diff's options, so that no configuration of the repository or the user changes what is read: no
// external diff or textconv driver, no colour, the usual a/ b/ prefixes (git runs at the root), and
// renames found (a file moved unchanged adds no line; moved and edited, only its edits).
const DIFF_OPTIONS = ["-U0", "--no-color", "--no-ext-diff", "--no-textconv", "--find-renames", "--src-prefix=a/", "--dst-prefix=b/"];

/** A path of a `---`/`+++` line: C-quoted by git when it has unusual characters, a tab after it when it has a space. */
function patchPath(text: string): string {
  const name = text.endsWith("\t") ? text.slice(0, -1) : text;
  if (!name.startsWith('"') || !name.endsWith('"') || name.length < 2) return name;
  const escapes: Record<string, number> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, "\\": 92 };
  const bytes: number[] = [];
  const body = name.slice(1, -1);
  for (let at = 0; at < body.length; at++) {
    const char = body[at] as string;
    if (char !== "\\") {
      bytes.push(...Buffer.from(char, "utf8"));
      continue;
    }
    const octal = /^[0-7]{3}/.exec(body.slice(at + 1));
    if (octal) {
      bytes.push(parseInt(octal[0], 8));
      at += 3;
    } else {
      const next = body[at + 1] ?? "";
      bytes.push(escapes[next] ?? next.charCodeAt(0));
      at += 1;
    }
  }
  return Buffer.from(bytes).toString("utf8");
}

/**
 * The lines a `git diff -U0` patch adds or rewrites, by the new side's path, in order. A hunk that only
 * deletes (`+N,0`), a deleted file, a binary file and a mode change add none. The lines of a hunk are
 * counted off its header, so a line whose text begins with `+++` or `diff` is read as a line.
 */
export function parseNewLines(patch: string): Map<string, NewLine[]> {
  const files = new Map<string, NewLine[]>();
  const lines = patch.split("\n");
  let current: NewLine[] | null = null;
  for (let index = 0; index < lines.length; index++) {
    const text = lines[index] as string;
    if (text.startsWith("diff --git ")) current = null;
    else if (text.startsWith("+++ ")) {
      const name = text.slice(4);
      if (name === "/dev/null") current = null;
      else {
        const file = patchPath(name).replace(/^b\//, "");
        current = files.get(file) ?? [];
        files.set(file, current);
      }
    } else if (text.startsWith("@@ ")) {
      const hunk = /^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/.exec(text);
      if (!hunk) continue;
      let removed = Number(hunk[1] ?? 1);
      let added = Number(hunk[3] ?? 1);
      let at = Number(hunk[2]);
      // With no context, a hunk is its removed lines, then its added ones (and "\ No newline" markers).
      while ((removed > 0 || added > 0) && index + 1 < lines.length) {
        const line = lines[++index] as string;
        if (line.startsWith("-") && removed > 0) removed--;
        else if (line.startsWith("+") && added > 0) {
          current?.push({ line: at++, blank: line.slice(1).trim() === "" });
          added--;
        } else if (!line.startsWith("\\")) break;
      }
    }
  }
  for (const [file, added] of files) if (added.length === 0) files.delete(file);
  return files;
}

/** The lines an lcov report instruments in one source file, with how often each ran (several records summed). */
interface ReportedFile {
  hits: Map<number, number>;
  /** Lines found by the report's summary (LF) or details: more than zero with no DA record means no per-line detail. */
  found: number;
}

/** A report's `SF:` path as a path in the repository: absolute inside `roots`, or relative to the root; null elsewhere. */
export function repoPathOf(name: string, roots: readonly string[]): string | null {
  let file = name;
  if (file.startsWith("file://")) {
    try {
      file = fileURLToPath(file);
    } catch {
      return null;
    }
  }
  if (path.isAbsolute(file)) {
    for (const root of roots) {
      const relative = path.relative(root, file);
      if (relative !== "" && relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative)) {
        return relative.split(path.sep).join("/");
      }
    }
    return null;
  }
  const normal = path.posix.normalize(file);
  return normal === "." || normal === ".." || normal.startsWith("../") ? null : normal;
}

/**
 * The report's source files by `SF:` path as written, with each instrumented line's hits. `parseLcov`
 * validates the text first (the reader the coverage floor uses, so both guards accept the same
 * reports and refuse the same ones), then its DA records are read line by line, as it reads them.
 */
function reportedFiles(text: string, source: string): Map<string, ReportedFile> {
  const report = parseLcov(text, source);
  const files = new Map<string, ReportedFile>();
  let current: ReportedFile | undefined;
  for (const raw of text.replace(/^\uFEFF/, "").split(/\r?\n/)) {
    const line = raw.trim();
    if (line.startsWith("SF:")) {
      const name = line.slice(3).trim();
      current = files.get(name) ?? { hits: new Map(), found: report.files[name]?.lines.found ?? 0 };
      files.set(name, current);
    } else if (line === "end_of_record") current = undefined;
    else if (current && line.startsWith("DA:")) {
      const [at, count] = line.slice(3).split(",");
      const number = Number(at);
      current.hits.set(number, (current.hits.get(number) ?? 0) + Number(count));
    }
  }
  return files;
}

/**
 * The kind of source file a path is, as far as a coverage report goes: its extension, lower case, with
 * a TypeScript declaration file (`.d.ts`, `.d.mts`, `.d.cts`) a kind of its own, since no tool
 * instruments one. Empty for a file without an extension.
 */
export function sourceKind(file: string): string {
  const base = path.posix.basename(file).toLowerCase();
  const declaration = /\.d\.[cm]?ts$/.exec(base);
  return declaration ? declaration[0] : path.posix.extname(base);
}

/** Why the changed lines could not be judged, as a reading the engine rejects the candidate on. */
function unreadable(against: string, error: string): ChangedLines {
  return { against, measured: 0, uncovered: [], uncovered_count: 0, error: error.length > 1_000 ? `${error.slice(0, 999)}…` : error };
}

/**
 * The changed-lines reading of a candidate from what it changed since its parent (`parseNewLines`) and
 * the report the gates wrote (`text`, null when they wrote none), for a clone at `roots` (its path as
 * given and as resolved):
 * - a changed line of a file the report lists counts when the report instruments it (a `DA:` record),
 *   and is executed when that record has a hit; a line it does not instrument (a comment, a blank, a
 *   declaration) is no code, and does not count;
 * - a changed file the report does not list at all, of a kind of source it lists other files of (the
 *   same extension: a `.js` file in a report of `.js` files), was never loaded by any gate: each of its
 *   non-blank changed lines counts, as not executed. Without the report's instrumentation nothing tells
 *   its code from its comments, and the conservative reading is the one that cannot pass unexecuted
 *   code;
 * - a changed file of a kind the report lists no file of (a README, a stylesheet, a manifest) is not
 *   code the report measures, and none of its lines counts.
 * At most MAX_UNCOVERED_FILES files and MAX_UNCOVERED_LINES_PER_FILE lines of each are listed, by path
 * and line; `measured` and `uncovered_count` count them all.
 */
export function changedLinesReading(
  against: string,
  changed: ReadonlyMap<string, readonly NewLine[]>,
  report: { path: string; text: string | null },
  roots: readonly string[],
): ChangedLines {
  if (report.text === null) return unreadable(against, `${report.path}: no coverage report was written, so nothing shows which changed lines ran`);
  let files: Map<string, ReportedFile>;
  try {
    files = reportedFiles(report.text, report.path);
  } catch (error) {
    return unreadable(against, (error as Error).message);
  }
  const byPath = new Map<string, ReportedFile>();
  const kinds = new Set<string>();
  for (const [name, file] of files) {
    // A file outside the clone (a dependency, the runtime's own) still says what kind of code is measured.
    kinds.add(sourceKind(name));
    const repoPath = repoPathOf(name, roots);
    if (repoPath === null) continue;
    const merged = byPath.get(repoPath);
    if (!merged) byPath.set(repoPath, { hits: new Map(file.hits), found: file.found });
    else {
      for (const [line, hits] of file.hits) merged.hits.set(line, (merged.hits.get(line) ?? 0) + hits);
      merged.found = Math.max(merged.found, file.found);
    }
  }
  if (byPath.size === 0) {
    const example = files.keys().next().value ?? "";
    return unreadable(
      against,
      `${report.path}: none of its ${files.size} source file(s) is in the repository (SF:${example}); write paths relative to the repository's root, or absolute inside the clone the gates run in`,
    );
  }
  let measured = 0;
  const uncovered: { path: string; lines: number[] }[] = [];
  for (const [file, lines] of changed) {
    const reported = byPath.get(file);
    if (reported && reported.hits.size === 0 && reported.found > 0) {
      return unreadable(against, `${report.path}: ${file} has line totals but no per-line records (DA:), so its changed lines cannot be checked`);
    }
    let counted: number[];
    let missed: number[];
    if (reported) {
      counted = lines.filter(({ line }) => reported.hits.has(line)).map(({ line }) => line);
      missed = counted.filter((line) => (reported.hits.get(line) ?? 0) === 0);
    } else if (kinds.has(sourceKind(file)) && sourceKind(file) !== "") {
      counted = lines.filter(({ blank }) => !blank).map(({ line }) => line);
      missed = counted;
    } else continue;
    measured += counted.length;
    if (missed.length > 0) uncovered.push({ path: file, lines: [...missed].sort((a, b) => a - b) });
  }
  uncovered.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return {
    against,
    measured,
    uncovered: uncovered.slice(0, MAX_UNCOVERED_FILES).map((file) => ({ path: file.path, lines: file.lines.slice(0, MAX_UNCOVERED_LINES_PER_FILE) })),
    uncovered_count: uncovered.reduce((sum, file) => sum + file.lines.length, 0),
  };
}

/**
 * Reads the changed-lines reading of `commit`, checked out in the clone `dir`, against `parent`: the
 * new side of `git diff -U0 <parent> <commit>` judged on the lcov `report` the gates wrote, by the rules
 * of `changedLinesReading`. A diff git cannot take (the parent missing from a shallow checkout) is a
 * reading with an error, as a missing report is: nothing shows the changed lines ran.
 */
export async function readChangedLines(dir: string, parent: string, commit: string, report: { path: string; text: string | null }): Promise<ChangedLines> {
  let patch: string;
  try {
    patch = await git(dir, ["-c", "core.quotePath=false", "diff", ...DIFF_OPTIONS, parent, commit]);
  } catch (error) {
    return unreadable(parent, `cannot read what the candidate changed since its parent ${parent.slice(0, 12)}: ${(error as Error).message.trim()}`);
  }
  const roots = [...new Set([path.resolve(dir), await realpath(dir).catch(() => path.resolve(dir))])];
  return changedLinesReading(parent, parseNewLines(patch), report, roots);
}
