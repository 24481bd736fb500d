import { readFile } from "node:fs/promises";
import path from "node:path";
import { isNode, LineCounter, parseDocument, type Document } from "yaml";
import type { z } from "zod";
import { canonicalJson } from "#shared/canonical-json.js";
import { sha256Hex } from "#shared/hash.js";
import { Contract } from "#shared/wire/contract.js";
import { UserError } from "../errors.js";

/** A contract as loaded and pinned: its hash is the one the coordinator records (invariant 4). */
export interface LoadedContract {
  contract: Contract;
  hash: string;
  /** Where it came from: a file path relative to the repository, or `flags`. */
  source: string;
}

/** The contract's file relative to the repository, or null in flag-only mode (guards protect the file). */
export function contractFileOf(loaded: LoadedContract): string | null {
  return loaded.source === "flags" ? null : loaded.source;
}

/** The contract hash (DESIGN §4.4): sha256 of the canonical JSON of the parsed contract, defaults applied. */
export function contractHash(contract: Contract): string {
  return sha256Hex(canonicalJson(contract));
}

// Every key the contract knows, for "did you mean" hints on misspelt keys.
const KNOWN_KEYS = [
  "name",
  "mode",
  "objective",
  "gates",
  "run",
  "tests",
  "junit",
  "tap",
  "timeout",
  "soft",
  "metric",
  "max",
  "min",
  "direction",
  "min_effect",
  "confidence",
  "samples",
  "target",
  "secondary",
  "max_regression",
  "guards",
  "protected",
  "tests_never_shrink",
  "coverage",
  "lcov",
  "floor",
  "on_violation",
  "stop",
  "max_iterations",
  "no_progress",
  "evaluate",
  "labels",
  "budget",
  "wall",
  "cost_usd",
  "agent",
  "artifacts",
  "exec",
  "network",
  "tasks",
  "id",
  "title",
  "check",
];

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0] ?? 0;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j] ?? 0;
      row[j] = Math.min(above + 1, (row[j - 1] ?? 0) + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length] ?? 0;
}

function suggestion(key: string): string {
  const best = KNOWN_KEYS.map((known) => ({ known, cost: distance(key, known) })).sort((x, y) => x.cost - y.cost)[0];
  return best && best.cost <= 2 ? `; did you mean "${best.known}"?` : "";
}

/** `gates[1].timeout` from a zod path. */
export function formatPath(pathParts: readonly PropertyKey[]): string {
  return pathParts.reduce<string>((text, part) => (typeof part === "number" ? `${text}[${part}]` : text ? `${text}.${String(part)}` : String(part)), "");
}

function valueAt(doc: Document, parts: readonly PropertyKey[]): unknown {
  const node = doc.getIn(parts as unknown[], true);
  return isNode(node) ? node.toJSON() : node;
}

/** One line per zod issue: `file:line path: "value" message`. */
function describeIssues(error: z.ZodError, file: string, doc: Document | null, lines: LineCounter | null): string[] {
  return error.issues.slice(0, 12).map((issue) => {
    const where = formatPath(issue.path);
    const node = doc ? doc.getIn(issue.path as unknown[], true) : undefined;
    const range = isNode(node) ? node.range : undefined;
    const position = range && lines ? `:${lines.linePos(range[0]).line}` : "";
    if (issue.code === "unrecognized_keys") {
      return issue.keys.map((key) => `${file}${position} ${where ? `${where}.` : ""}${key}: unknown key${suggestion(key)}`).join("\n");
    }
    const value = doc ? valueAt(doc, issue.path) : undefined;
    const shown = value === undefined || value === "" || typeof value === "object" ? "" : ` ${JSON.stringify(value)}`;
    return `${file}${position} ${where || "(contract)"}:${shown} ${issue.message}`;
  });
}

/**
 * Where two contracts differ, one line per differing value, as `path: before → after` (e.g.
 * `stop.max_iterations: 3 → 50`); `(none)` for a value one side lacks. Empty when they are equal.
 */
export function contractDifferences(before: unknown, after: unknown, at: PropertyKey[] = []): string[] {
  const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);
  if (Array.isArray(before) && Array.isArray(after) && before.length === after.length) {
    return before.flatMap((item, index) => contractDifferences(item, after[index], [...at, index]));
  }
  if (isObject(before) && isObject(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    return keys.flatMap((key) => contractDifferences(before[key], after[key], [...at, key]));
  }
  if (JSON.stringify(before) === JSON.stringify(after)) return [];
  const shown = (value: unknown) => (value === undefined ? "(none)" : JSON.stringify(value));
  return [`${formatPath(at) || "(contract)"}: ${shown(before)} → ${shown(after)}`];
}

/** Validates contract input (from YAML or flags); refuses what is invalid or not enforceable yet. */
export function validateContract(input: unknown, source: string, doc: Document | null = null, lines: LineCounter | null = null): LoadedContract {
  const parsed = Contract.safeParse(input);
  if (!parsed.success) {
    throw new UserError(`invalid contract:\n${describeIssues(parsed.error, source, doc, lines).join("\n")}`, 2);
  }
  return { contract: parsed.data, hash: contractHash(parsed.data), source };
}

/** Reads and validates `loop.yaml` (or `--contract FILE`), relative to the repository. */
export async function loadContractFile(repo: string, file: string): Promise<LoadedContract> {
  const absolute = path.resolve(repo, file);
  const shown = path.relative(repo, absolute) || file;
  let text: string;
  try {
    text = await readFile(absolute, "utf8");
  } catch {
    throw new UserError(`no contract at ${shown}; write one with \`loopwarden init\`, or run flag-only with --check CMD --exec CMD`, 2);
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    const messages = doc.errors.slice(0, 5).map((error) => `${shown}:${error.linePos?.[0].line ?? "?"} ${error.message.split("\n")[0]}`);
    throw new UserError(`${shown} is not valid YAML:\n${messages.join("\n")}`, 2);
  }
  return validateContract(doc.toJSON(), shown, doc, lines);
}
