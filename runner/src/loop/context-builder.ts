import { lstat, mkdir, readFile, realpath, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { sha256Hex } from "#shared/hash.js";
import { git } from "../process/git.js";

// The agent's context (docs/agent.md, "What the agent is told"; docs/design.md §6.9): before each run the
// runner writes a directory the agent is pointed at (LOOPWARDEN_CONTEXT) — context.md and copies of the
// files it names — built from the last evaluation and widened tier by tier while it fits the budget:
//   1. stack_trace: the failing tests, their gates' output, the last candidate's verdict and diff, and
//      every tracked file the output's stack traces name;
//   2. import_closure: what the tier-1 test files import, transitively (JavaScript/TypeScript, Python);
//   3. dependents: the tracked files that import a file of tiers 1-2 (one hop).
// A tier is added whole or not at all, so nothing is silently evicted; one left out is named in
// context.md with its size. A budget tier 1 does not fit in is `unsatisfiable`: the loop halts.
// Imports are read with regular expressions, not a parser: a specifier built at run time, a path alias
// (tsconfig `paths`, a bundler's) or a Python namespace package is not followed. Other languages get
// the stack-trace tier only.

export type ContextTier = "stack_trace" | "import_closure" | "dependents";

export interface ContextInput {
  /** The agent's work tree (a clone of the best commit): files are read here; `git ls-files` says what exists. */
  tree: string;
  /** The work tree's tracked files when already listed (`git ls-files` run ahead, issue 30); else listed here. */
  tracked?: Promise<string[]>;
  /** Failing ids at the last evaluation, each marked regressed when it passed at the best. */
  failing: { id: string; regressed: boolean }[];
  /** Tails of the failing gates' logs (the test runner's output, with its stack traces). */
  logs: { gate: string; text: string }[];
  /** The last candidate: its id, its verdict in a line, and its diff; null before any. */
  last: { candidate_id: string; verdict: string; diff: string } | null;
  /** `agent.context.budget`, in tokens. */
  budget: number;
}

/** One file of a built context: where it is in the repository, its content's sha256, its tier, its size in tokens. */
export interface ContextFile {
  path: string;
  sha256: string;
  tier: ContextTier;
  tokens: number;
}

export type ContextResult =
  | {
      status: "built";
      dir: string;
      context_sha256: string;
      files: ContextFile[];
      tokens: number;
      tiers: { tier: ContextTier; files: number; tokens: number; included: boolean }[];
    }
  | { status: "unsatisfiable"; tier: "stack_trace"; needed: number; budget: number };

/** Files larger than this are never read into a context (a data file, a bundle). */
const MAX_FILE_BYTES = 1024 * 1024;
/** The most files a widening tier reads: the tiers stay bounded on a large repository. */
const MAX_TIER_FILES = 500;
/** The most files the dependents tier scans for imports. */
const MAX_SCANNED_FILES = 5_000;

const WORD = /[A-Za-z]/;
const DIGIT = /[0-9]/;

/**
 * Tokens of a text as a BPE tokenizer of today's models counts them, estimated for code: a word splits
 * into pieces of about four letters, a number into pieces of about three digits, and most punctuation
 * (`(`, `.`, `=>`'s each character) is a token of its own, as a run of newlines is; spaces ride along.
 * chars/4, the rule of thumb for prose, undercounts code by a third or more, and a budget must be a
 * ceiling, never a target silently overrun.
 */
export function estimateTokens(text: string): number {
  let tokens = 0;
  for (const match of text.matchAll(/[A-Za-z]+|[0-9]+|\n+|[^\sA-Za-z0-9]/g)) {
    const piece = match[0];
    const first = piece[0] ?? "";
    if (WORD.test(first)) tokens += Math.ceil(piece.length / 4);
    else if (DIGIT.test(first)) tokens += Math.ceil(piece.length / 3);
    else tokens += 1;
  }
  return tokens;
}

/** Paths named in stack traces: `at f (/x/y.js:10:5)`, `file:///x/y.mjs:3:4`, `src/a.ts:12`, Python's `File "/x/y.py", line 3`. */
function tracedPaths(text: string): string[] {
  const found: string[] = [];
  for (const match of text.matchAll(/File "([^"\n]+)", line \d+/g)) if (match[1]) found.push(match[1]);
  for (const match of text.matchAll(/((?:file:\/\/)?[\w.@+/-]*[\w@+-]\.[A-Za-z][A-Za-z0-9]{0,5}):\d+/g)) {
    if (match[1]) found.push(match[1].replace(/^file:\/\//, ""));
  }
  return found;
}

/**
 * The tracked file a traced path names: the longest suffix of its components that git tracks (a trace
 * from another clone names it under that clone's directory). Null for node_modules, Node's own modules,
 * and anything the tree does not track.
 */
function trackedFileOf(traced: string, tracked: ReadonlySet<string>): string | null {
  if (traced.startsWith("node:") || traced.split("/").includes("node_modules")) return null;
  const parts = traced.split("/").filter((part) => part !== "" && part !== ".");
  for (let start = 0; start < parts.length; start++) {
    const suffix = parts.slice(start).join("/");
    if (tracked.has(suffix)) return suffix;
  }
  return null;
}

/** Whether a path looks like a test file by the common conventions. */
export function looksLikeTest(file: string): boolean {
  return /(^|\/)(test|tests|__tests__|spec|specs)\//.test(file) || /[._-](test|spec)\.[^/]+$/.test(file) || /(^|\/)test_[^/]+\.py$/.test(file);
}

const JS_FILE = /\.(?:[cm]?[jt]sx?)$/;
const JS_EXTENSIONS = [".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts"];
const JS_IMPORT =
  /(?:^|[^\w.$])(?:import|export)\s[^'"`;]*?\sfrom\s*['"]([^'"\n]+)['"]|(?:^|[^\w.$])import\s*['"]([^'"\n]+)['"]|\brequire\(\s*['"]([^'"\n]+)['"]\s*\)|\bimport\(\s*['"]([^'"\n]+)['"]\s*\)/g;

/** The tracked files a JavaScript/TypeScript file imports by a relative specifier. */
function jsImports(file: string, text: string, tracked: ReadonlySet<string>): string[] {
  const found: string[] = [];
  for (const match of text.matchAll(JS_IMPORT)) {
    const specifier = match[1] ?? match[2] ?? match[3] ?? match[4];
    if (!specifier || !(specifier.startsWith("./") || specifier.startsWith("../"))) continue;
    const joined = path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier));
    const stem = joined.replace(/\.(?:[cm]?js|jsx)$/, "");
    const options = [joined, ...JS_EXTENSIONS.map((ext) => `${stem}${ext}`), ...JS_EXTENSIONS.map((ext) => `${joined}/index${ext}`)];
    const hit = options.find((option) => tracked.has(option));
    if (hit) found.push(hit);
  }
  return found;
}

/** The tracked files a Python file imports: `import a.b`, `from a.b import c`, `from . import x`, `from .m import y`. */
function pythonImports(file: string, text: string, tracked: ReadonlySet<string>): string[] {
  const found: string[] = [];
  const here = path.posix.dirname(file);
  const moduleFile = (dir: string, dotted: string): string | null => {
    const base = path.posix.normalize(path.posix.join(dir, ...dotted.split(".").filter(Boolean)));
    return [`${base}.py`, `${base}/__init__.py`].find((option) => tracked.has(option)) ?? null;
  };
  const roots = [".", here, "src"];
  for (const match of text.matchAll(/^[ \t]*import[ \t]+([\w. \t,]+)$/gm)) {
    for (const name of (match[1] ?? "").split(",")) {
      const dotted = name.trim().split(/\s+/)[0] ?? "";
      for (const root of roots) {
        const hit = moduleFile(root, dotted);
        if (hit) {
          found.push(hit);
          break;
        }
      }
    }
  }
  for (const match of text.matchAll(/^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\(?([\w*, \t]+)/gm)) {
    const dots = (match[1] ?? "").length;
    const dotted = match[2] ?? "";
    const names = (match[3] ?? "")
      .split(",")
      .map((name) => name.trim().split(/\s+/)[0] ?? "")
      .filter((name) => name && name !== "*");
    const bases = dots > 0 ? [path.posix.normalize(path.posix.join(here, ...Array<string>(dots - 1).fill("..")))] : roots;
    for (const base of bases) {
      const module = dotted ? moduleFile(base, dotted) : null;
      const submodules = names.map((name) => moduleFile(base, dotted ? `${dotted}.${name}` : name)).filter((hit): hit is string => hit !== null);
      if (module || submodules.length > 0) {
        if (module) found.push(module);
        found.push(...submodules);
        break;
      }
    }
  }
  return found;
}

/** The tracked files a file imports (JavaScript/TypeScript or Python; none for other languages). */
function importsOf(file: string, text: string, tracked: ReadonlySet<string>): string[] {
  if (JS_FILE.test(file)) return jsImports(file, text, tracked);
  if (file.endsWith(".py")) return pythonImports(file, text, tracked);
  return [];
}

/** A file's text, when it is a regular file inside the tree (never a symlink out of it), small enough, and text. */
async function readTreeFile(tree: string, realTree: string, file: string): Promise<string | null> {
  const full = path.join(tree, file);
  try {
    const stat = await lstat(full);
    if (!stat.isFile() || stat.size > MAX_FILE_BYTES) return null;
    const real = await realpath(full);
    if (!real.startsWith(`${realTree}${path.sep}`)) return null;
    const bytes = await readFile(full);
    if (bytes.includes(0)) return null;
    return bytes.toString("utf8");
  } catch {
    return null;
  }
}

function section(title: string, body: string): string {
  return `## ${title}\n\n${body.trimEnd()}\n\n`;
}

function fenced(text: string): string {
  const fence = text.includes("```") ? "~~~~" : "```";
  return `${fence}\n${text.trimEnd()}\n${fence}`;
}

/** The tracked files of a work tree (`git ls-files`); none when git cannot list them. */
export async function listTracked(tree: string): Promise<string[]> {
  const listed = await git(tree, ["ls-files", "-z"]).catch(() => "");
  return listed.split("\0").filter(Boolean);
}

/** Builds the context into `outDir` (cleared first), or answers that its first tier does not fit the budget. */
export async function buildContext(input: ContextInput, outDir: string): Promise<ContextResult> {
  const realTree = await realpath(input.tree);
  const tracked = new Set(await (input.tracked ?? listTracked(input.tree)));
  const texts = new Map<string, string | null>();
  const textOf = async (file: string): Promise<string | null> => {
    if (!texts.has(file)) texts.set(file, await readTreeFile(input.tree, realTree, file));
    return texts.get(file) ?? null;
  };

  // Tier 1: every tracked file the stack traces name, and why.
  const why = new Map<string, string>();
  for (const log of input.logs) {
    for (const traced of tracedPaths(log.text)) {
      const file = trackedFileOf(traced, tracked);
      if (file && !why.has(file) && (await textOf(file)) !== null) why.set(file, `named by a stack trace in the ${log.gate} gate's output`);
    }
  }
  const tier1 = [...why.keys()].sort();

  // Tier 2: the import closure of the tier-1 tests (of every tier-1 file when none looks like a test).
  const seeds = tier1.some(looksLikeTest) ? tier1.filter(looksLikeTest) : tier1;
  const inTiers = new Set(tier1);
  const tier2: string[] = [];
  const queue = [...seeds];
  while (queue.length > 0 && tier2.length < MAX_TIER_FILES) {
    const file = queue.shift() ?? "";
    const text = await textOf(file);
    if (text === null) continue;
    for (const imported of importsOf(file, text, tracked)) {
      if (inTiers.has(imported) || (await textOf(imported)) === null) continue;
      inTiers.add(imported);
      tier2.push(imported);
      why.set(imported, `imported by ${file}`);
      queue.push(imported);
    }
  }
  tier2.sort();

  const tierFiles = async (files: readonly string[], tier: ContextTier): Promise<ContextFile[]> =>
    Promise.all(
      files.map(async (file) => {
        const text = (await textOf(file)) ?? "";
        return { path: file, sha256: sha256Hex(text), tier, tokens: estimateTokens(text) };
      }),
    );
  const tiers: { tier: ContextTier; files: ContextFile[] }[] = [
    { tier: "stack_trace", files: await tierFiles(tier1, "stack_trace") },
    { tier: "import_closure", files: await tierFiles(tier2, "import_closure") },
  ];

  const render = (included: number): string => {
    const parts = [
      "# What to look at\n\n",
      "The runner wrote this from the last evaluation. It is what the check saw; the files named below are copies, under `files/`, of the ones in your work tree.\n\n",
    ];
    const failing = input.failing.map((test) => `- ${test.id}${test.regressed ? " (regressed: it passed at the best so far)" : ""}`).join("\n");
    parts.push(section("Failing tests", failing || "Nothing failed at the last evaluation."));
    for (const log of input.logs) parts.push(section(`The ${log.gate} gate's output (its tail)`, fenced(log.text)));
    if (input.last) parts.push(section(`The last candidate, ${input.last.candidate_id}: ${input.last.verdict}`, fenced(input.last.diff || "(no change)")));
    tiers.forEach((tier, index) => {
      const tokens = tier.files.reduce((sum, file) => sum + file.tokens, 0);
      const title = { stack_trace: "Files the stack traces name", import_closure: "What the failing tests import", dependents: "Files that import those" }[
        tier.tier
      ];
      if (index < included) {
        const lines = tier.files.map((file) => `- files/${file.path} — ${why.get(file.path) ?? tier.tier}`).join("\n");
        parts.push(section(title, lines || "None."));
      } else if (tier.files.length > 0) {
        parts.push(section(title, `Left out for the budget: ${tier.files.length} file(s), about ${tokens} tokens.`));
      }
    });
    return parts.join("");
  };
  const total = (included: number) =>
    estimateTokens(render(included)) + tiers.slice(0, included).reduce((sum, tier) => sum + tier.files.reduce((s, f) => s + f.tokens, 0), 0);

  const needed = total(1);
  if (needed > input.budget) return { status: "unsatisfiable", tier: "stack_trace", needed, budget: input.budget };
  let included = 1;
  if (total(2) <= input.budget) {
    included = 2;
    // Tier 3, only worth scanning for when tier 2 fits: the tracked files that import one of tiers 1-2.
    const dependents: string[] = [];
    for (const file of [...tracked].filter((name) => JS_FILE.test(name) || name.endsWith(".py")).slice(0, MAX_SCANNED_FILES)) {
      if (inTiers.has(file) || dependents.length >= MAX_TIER_FILES) continue;
      const text = await textOf(file);
      const target = text === null ? undefined : importsOf(file, text, tracked).find((imported) => inTiers.has(imported));
      if (target) {
        dependents.push(file);
        why.set(file, `imports ${target}`);
      }
    }
    tiers.push({ tier: "dependents", files: await tierFiles(dependents.sort(), "dependents") });
    if (total(3) <= input.budget) included = 3;
  }

  const markdown = render(included);
  const files = tiers.slice(0, included).flatMap((tier) => tier.files);
  await rm(outDir, { recursive: true, force: true });
  await mkdir(outDir, { recursive: true });
  await writeFile(path.join(outDir, "context.md"), markdown);
  for (const file of files) {
    const copy = path.join(outDir, "files", file.path);
    await mkdir(path.dirname(copy), { recursive: true });
    await writeFile(copy, (await textOf(file.path)) ?? "");
  }
  return {
    status: "built",
    dir: outDir,
    context_sha256: sha256Hex(markdown),
    files,
    tokens: total(included),
    tiers: tiers.map((tier, index) => ({
      tier: tier.tier,
      files: tier.files.length,
      tokens: tier.files.reduce((sum, file) => sum + file.tokens, 0),
      included: index < included,
    })),
  };
}
