import { ParseError } from "./parse-error.js";

/** How many of something (lines, branches, functions) the instrumentation found, and how many ran. */
export interface CoverageCount {
  found: number;
  hit: number;
}

/** Totals of an lcov tracefile, line totals per source file, and line coverage in percent. */
export interface LcovReport {
  lines: CoverageCount;
  branches: CoverageCount;
  functions: CoverageCount;
  files: Record<string, { lines: CoverageCount }>;
  /** Line coverage, 0..100; 100 when no line was instrumented. */
  percent: number;
}

/** What the records of one source file say; a file may have several records (one per test name, TN). */
interface FileRecords {
  lines: Map<number, number>;
  branches: Map<string, boolean>;
  functions: Map<string, number>;
  summary: Partial<Record<"LF" | "LH" | "BRF" | "BRH" | "FNF" | "FNH", number>>;
}

const COUNT = /^\d+$/;

/**
 * Reads an lcov tracefile (node --test, vitest/c8/istanbul, coverage.py, geninfo). Throws a ParseError
 * naming `source` for text that is not lcov or is cut short. Detail records (DA, BRDA, FNDA) are counted
 * when present and the summaries (LF/LH, BRF/BRH, FNF/FNH) used only when they are not: the details are
 * what the summaries are computed from, and some tools get the summary wrong (coverage.py 6.5 writes
 * an LH larger than LF).
 */
export function parseLcov(text: string, source: string): LcovReport {
  const files = new Map<string, FileRecords>();
  let current: FileRecords | undefined;
  let currentStart = 0;
  const lines = text.replace(/^\uFEFF/, "").split(/\r?\n/);

  for (const [index, raw] of lines.entries()) {
    const lineNumber = index + 1;
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const bad = (problem: string) => new ParseError(source, problem, lineNumber);
    if (line === "end_of_record") {
      if (current === undefined) throw bad("end_of_record without a preceding SF: record");
      current = undefined;
      continue;
    }
    const colon = line.indexOf(":");
    const key = colon === -1 ? "" : line.slice(0, colon);
    if (!/^[A-Z][A-Z_]*$/.test(key)) {
      throw bad(`not an lcov record (${excerpt(line)}); expected KEY:value lines such as SF:, DA:, end_of_record`);
    }
    const value = line.slice(colon + 1);
    if (key === "TN") continue;
    if (key === "SF") {
      if (current !== undefined) throw bad(`SF: before the end_of_record of the file opened at line ${currentStart}`);
      if (value.trim() === "") throw bad("SF: without a file path");
      const path = value.trim();
      current = files.get(path) ?? { lines: new Map(), branches: new Map(), functions: new Map(), summary: {} };
      files.set(path, current);
      currentStart = lineNumber;
      continue;
    }
    if (current === undefined) {
      // VER: (lcov 2) and other headers may precede the first file; data may not.
      if (["DA", "LF", "LH", "BRDA", "BRF", "BRH", "FN", "FNDA", "FNF", "FNH", "FNL", "FNA"].includes(key)) {
        throw bad(`${key}: outside a file record (no SF: before it)`);
      }
      continue;
    }
    const record = current;
    switch (key) {
      case "DA": {
        // DA:<line>,<count>[,<checksum>] — coverage.py appends a checksum.
        const [at, count] = value.split(",");
        if (!COUNT.test(at ?? "") || !COUNT.test(count ?? "")) throw bad(`DA:${value} is not DA:<line>,<count>`);
        const lineAt = Number(at);
        record.lines.set(lineAt, (record.lines.get(lineAt) ?? 0) + Number(count));
        continue;
      }
      case "BRDA": {
        // BRDA:<line>,<block>,<branch>,<taken>; taken is "-" when the branch's block never ran.
        const parts = value.split(",");
        const taken = parts[parts.length - 1] ?? "";
        if (parts.length < 4 || !COUNT.test(parts[0] ?? "") || (taken !== "-" && !COUNT.test(taken))) {
          throw bad(`BRDA:${value} is not BRDA:<line>,<block>,<branch>,<taken>`);
        }
        const branch = parts.slice(0, -1).join(",");
        record.branches.set(branch, (record.branches.get(branch) ?? false) || (taken !== "-" && Number(taken) > 0));
        continue;
      }
      case "FN": {
        // FN:<line>,<name> (lcov 1) or FN:<line>,<end line>,<name> (lcov 2): found, maybe never called.
        const match = /^\d+,(?:\d+,)?(.+)$/.exec(value);
        if (!match) throw bad(`FN:${value} is not FN:<line>,<name>`);
        const name = match[1] as string;
        if (!record.functions.has(name)) record.functions.set(name, 0);
        continue;
      }
      case "FNDA": {
        const match = /^(\d+),(.+)$/.exec(value);
        if (!match) throw bad(`FNDA:${value} is not FNDA:<count>,<name>`);
        addCalls(record.functions, match[2] as string, Number(match[1]));
        continue;
      }
      case "FNA": {
        // FNA:<index>,<count>,<name> (lcov 2.2), the function's leader line being in FNL.
        const match = /^\d+,(\d+),(.+)$/.exec(value);
        if (!match) throw bad(`FNA:${value} is not FNA:<index>,<count>,<name>`);
        addCalls(record.functions, match[2] as string, Number(match[1]));
        continue;
      }
      case "LF":
      case "LH":
      case "BRF":
      case "BRH":
      case "FNF":
      case "FNH": {
        if (!COUNT.test(value.trim())) throw bad(`${key}:${value} is not a count`);
        // A file split over several records is summarised once per record: keep the largest.
        record.summary[key] = Math.max(record.summary[key] ?? 0, Number(value.trim()));
        continue;
      }
      default:
        // Records this reader does not use (FNL, VER, MC/DC...): newer lcov versions add some.
        continue;
    }
  }

  if (current !== undefined) {
    throw new ParseError(source, `the record for the file opened at line ${currentStart} has no end_of_record; the tracefile looks truncated`);
  }
  if (files.size === 0) {
    // An empty tracefile would read as 100% of nothing: a coverage floor must not pass that way.
    throw new ParseError(source, "no coverage records (SF: ... end_of_record), expected an lcov tracefile; did the coverage tool run and write it?");
  }

  const totals: Omit<LcovReport, "files" | "percent"> = {
    lines: { found: 0, hit: 0 },
    branches: { found: 0, hit: 0 },
    functions: { found: 0, hit: 0 },
  };
  const perFile: LcovReport["files"] = {};
  for (const [path, record] of files) {
    const summary = record.summary;
    const lines = tally(
      [...record.lines.values()].map((hits) => hits > 0),
      summary.LF,
      summary.LH,
      `${path}: LH`,
      source,
    );
    const branches = tally([...record.branches.values()], summary.BRF, summary.BRH, `${path}: BRH`, source);
    const functions = tally(
      [...record.functions.values()].map((calls) => calls > 0),
      summary.FNF,
      summary.FNH,
      `${path}: FNH`,
      source,
    );
    perFile[path] = { lines };
    add(totals.lines, lines);
    add(totals.branches, branches);
    add(totals.functions, functions);
  }
  const percent = totals.lines.found === 0 ? 100 : (totals.lines.hit / totals.lines.found) * 100;
  return { ...totals, files: perFile, percent };
}

/** Counts the detail records (one boolean "was hit" each) when there are any, else believes a consistent summary. */
function tally(details: boolean[], found: number | undefined, hit: number | undefined, what: string, source: string): CoverageCount {
  if (details.length > 0) return { found: details.length, hit: details.filter(Boolean).length };
  const summary = { found: found ?? 0, hit: hit ?? 0 };
  if (summary.hit > summary.found) {
    throw new ParseError(source, `${what} ${summary.hit} is larger than the count found (${summary.found}), and there are no detail records to recount from`);
  }
  return summary;
}

function addCalls(functions: Map<string, number>, name: string, calls: number): void {
  functions.set(name, (functions.get(name) ?? 0) + calls);
}

function add(total: CoverageCount, part: CoverageCount): void {
  total.found += part.found;
  total.hit += part.hit;
}

function excerpt(line: string): string {
  return JSON.stringify(line.length > 60 ? `${line.slice(0, 60)}…` : line);
}
