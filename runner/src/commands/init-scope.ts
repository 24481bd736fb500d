import path from "node:path";
import picomatch from "picomatch";
import { parse as parseToml } from "smol-toml";
import { DEFAULT_PROTECTED_GLOBS, inScope } from "#shared/engine/index.js";
import { Scope } from "#shared/wire/contract.js";

// The scope `loopwarden init` writes (DESIGN §6.4): the paths the project's own tooling declares as its
// source, never its tests, configuration, manifests or dotfiles. Only what git tracks counts, since a
// candidate is judged in a clone that holds nothing else. The rules, by project shape:
//
// - npm (a tracked root package.json): the paths its `main`, `module`, `browser` (a string), `bin` (a
//   string, or an object's values), `exports` (every string value, however nested) and `files` name,
//   less a leading ./, a trailing / and any glob tail. A path inside a directory gives that top-level
//   directory as `dir/**`; a root file gives the file itself when it is JavaScript or TypeScript source
//   and no configuration (`*.config.*`). And by convention `src/` and `lib/`, which hold the sources of
//   a package built to an untracked output directory.
// - Python: each import package, a tracked `X/__init__.py` at the root or `src/X/__init__.py`, as `X/**`
//   or `src/X/**`. Without one, in a Python project (pyproject.toml, setup.py or setup.cfg), its root
//   modules: pyproject's `[tool.setuptools] py-modules` when it names them, else every root `*.py` but
//   tests (`test_*.py`, `*_test.py`, conftest.py) and tooling (setup.py, noxfile.py).
// - Cargo: `D/src/**` for every tracked `D/Cargo.toml` with tracked files under `D/src/` (the root
//   crate's is `src/**`): never a crate's tests/, benches/, examples/ or build.rs.
// - Go (a tracked go.mod): the packages, directories holding `.go` files that are not `_test.go`, outside
//   testdata/, vendor/ and dot directories: `*.go` for the root package, `dir/**/*.go` for each
//   top-level directory holding packages (or `pkg/*.go` for each of its packages, when a testdata/ or
//   vendor/ below holds `.go` files that `dir/**/*.go` would admit).
//
// Never a top-level test directory (test, tests, spec, __tests__), a dot path, node_modules, or a path
// git does not track (an untracked dist/). Every glob must admit a tracked file the default protected set
// does not name; a glob inside another's `dir/**` is left out. Tests inside a source directory
// (src/x.test.ts) are admitted, and stay off limits all the same: the protected set is checked as well.

/** What the scope is inferred from: the tracked files and the texts of the root manifests (null when absent or untracked). */
export interface ScopeFacts {
  tracked: readonly string[];
  packageJson: string | null;
  pyproject: string | null;
}

/** An inferred scope: its globs, sorted, and one short line for each way they were found. */
export interface InferredScope {
  globs: string[];
  how: string[];
}

/** Directory names that hold tests, never source. */
const TEST_DIRS = new Set(["test", "tests", "spec", "__tests__"]);
/** Directory names that never hold a project's own source. */
const NOT_SOURCE_DIRS = new Set([...TEST_DIRS, "testdata", "vendor", "node_modules", "target"]);
/** The package.json fields that name a package's entry points and shipped files. */
const NPM_FIELDS = ["main", "module", "browser", "bin", "exports", "files"] as const;
/** A root file a package.json may name as source: JavaScript or TypeScript. */
const SCRIPT_FILE = /\.(?:[cm]?[jt]s|[jt]sx)$/;
/** A tool's configuration file (eslint.config.js, rollup.config.mjs, …). */
const CONFIG_FILE = /\.config\.[^/]+$/;
/** A glob character: a path segment holding one is a pattern, not a name. */
const GLOB_CHAR = /[*?[\]{}()!+@]/;
/** The most globs a scope holds (shared/wire/contract.ts). */
const MAX_GLOBS = 200;

const isProtected = picomatch([...DEFAULT_PROTECTED_GLOBS], { dot: true });
const isDotPath = (file: string) => file.split("/").some((segment) => segment.startsWith("."));
/** A tracked file the agent could usefully change: not a dotfile, and not in the default protected set. */
const isSourceFile = (file: string) => !isDotPath(file) && !isProtected(file);

/** A package.json path as a repository path: no ./, no trailing /, cut before its first glob segment; null when it cannot name one. */
function declaredPath(value: string): string | null {
  const text = value.trim();
  if (text === "" || text.startsWith("!") || text.startsWith("/") || text.includes("\\")) return null;
  const segments = text.split("/");
  const cut = segments.findIndex((segment) => GLOB_CHAR.test(segment));
  const kept = (cut === -1 ? segments : segments.slice(0, cut)).filter((segment) => segment !== "" && segment !== ".");
  if (kept.length === 0 || kept.includes("..")) return null;
  return kept.join("/");
}

/** Every string inside a JSON value (package.json `exports` nests them in conditions and arrays). */
function strings(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.flatMap(strings);
  if (typeof value === "object" && value !== null) return Object.values(value).flatMap(strings);
  return [];
}

/** The paths a package.json field names. */
function fieldPaths(field: (typeof NPM_FIELDS)[number], value: unknown): string[] {
  if (field === "main" || field === "module" || field === "browser") return typeof value === "string" ? [value] : [];
  if (field === "bin") return typeof value === "string" ? [value] : typeof value === "object" && value !== null ? strings(value) : [];
  if (field === "files") return Array.isArray(value) ? value.filter((entry): entry is string => typeof entry === "string") : [];
  return strings(value);
}

/** One glob and how it was found. */
interface Finding {
  glob: string;
  how: string;
}

/** The tracked files of a repository, for the rules' look-ups. */
class Tree {
  readonly files: ReadonlySet<string>;
  /** The tracked files the agent could usefully change (`isSourceFile`). */
  readonly sources: readonly string[];
  /** Every directory with such a file somewhere below it. */
  private readonly sourceDirs = new Set<string>();
  constructor(readonly tracked: readonly string[]) {
    this.files = new Set(tracked);
    this.sources = tracked.filter(isSourceFile);
    for (const file of this.sources) {
      for (let dir = path.posix.dirname(file); dir !== "."; dir = path.posix.dirname(dir)) this.sourceDirs.add(dir);
    }
  }
  /** Whether a tracked source file lies under `dir/`. */
  holdsSource(dir: string): boolean {
    return this.sourceDirs.has(dir);
  }
}

/** Whether a glob admits `file`. */
const admits = (glob: string) => {
  const scope = [glob];
  return (file: string) => inScope(scope, file);
};

/** Whether a top-level directory may be in the scope by name: no test directory, dot directory, dependency or output tree. */
const sourceDirName = (dir: string) => !NOT_SOURCE_DIRS.has(dir) && !dir.startsWith(".") && !GLOB_CHAR.test(dir);

function npmScope(tree: Tree, packageJson: string | null): Finding[] {
  if (packageJson === null || !tree.files.has("package.json")) return [];
  let manifest: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(packageJson);
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return [];
    manifest = parsed as Record<string, unknown>;
  } catch {
    return [];
  }
  // Which fields name each glob, in the order of NPM_FIELDS.
  const named = new Map<string, Set<string>>();
  const add = (glob: string, field: string) => named.set(glob, (named.get(glob) ?? new Set()).add(field));
  for (const field of NPM_FIELDS) {
    for (const value of fieldPaths(field, manifest[field])) {
      const declared = declaredPath(value);
      if (declared === null) continue;
      const [top = ""] = declared.split("/");
      if (declared === top) {
        // A root name: a file (as written, or as node resolves a main without an extension) or a directory.
        const file = [top, `${top}.js`, `${top}.mjs`, `${top}.cjs`].find((name) => tree.files.has(name));
        if (file !== undefined) {
          if (SCRIPT_FILE.test(file) && !CONFIG_FILE.test(file) && isSourceFile(file)) add(file, field);
          continue;
        }
      }
      if (sourceDirName(top) && tree.holdsSource(top)) add(`${top}/**`, field);
    }
  }
  const findings = [...named].map(([glob, fields]) => {
    const shown = glob.endsWith("/**") ? glob.slice(0, -2) : glob;
    return { glob, how: `package.json ${[...fields].join(", ")} name${fields.size === 1 ? "s" : ""} ${shown}` };
  });
  for (const dir of ["src", "lib"]) {
    if (!named.has(`${dir}/**`) && tree.holdsSource(dir)) findings.push({ glob: `${dir}/**`, how: `${dir}/, by the npm convention for a package's sources` });
  }
  return findings;
}

/** The root modules pyproject.toml's `[tool.setuptools] py-modules` names, or null when it names none. */
function setuptoolsModules(pyproject: string | null): string[] | null {
  if (pyproject === null) return null;
  try {
    const tool = parseToml(pyproject).tool as { setuptools?: { "py-modules"?: unknown } } | undefined;
    const modules = tool?.setuptools?.["py-modules"];
    if (!Array.isArray(modules)) return null;
    return modules.filter((name): name is string => typeof name === "string" && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name));
  } catch {
    return null;
  }
}

/** A root module that is a test or the project's tooling, not its source. */
const PYTHON_NOT_SOURCE = /^(?:test_.*|.*_test|conftest|setup|noxfile)\.py$/;

function pythonScope(tree: Tree, pyproject: string | null): Finding[] {
  const packages: Finding[] = [];
  for (const file of tree.tracked) {
    const match = /^((?:src\/)?([^/]+))\/__init__\.py$/.exec(file);
    const [, dir = "", name = ""] = match ?? [];
    if (!match || !sourceDirName(name) || !tree.holdsSource(dir)) continue;
    packages.push({ glob: `${dir}/**`, how: `Python import package ${name} (${file})` });
  }
  if (packages.length > 0) return packages;
  if (!["pyproject.toml", "setup.py", "setup.cfg"].some((file) => tree.files.has(file))) return [];
  const declared = setuptoolsModules(pyproject);
  const modules =
    declared === null
      ? tree.tracked.filter((file) => !file.includes("/") && file.endsWith(".py") && !PYTHON_NOT_SOURCE.test(file))
      : declared.map((name) => `${name}.py`);
  const found = modules.filter((file) => tree.files.has(file) && isSourceFile(file));
  const how = declared === null ? "Python root modules (no import package)" : "pyproject.toml [tool.setuptools] py-modules";
  return found.map((file) => ({ glob: file, how }));
}

function cargoScope(tree: Tree): Finding[] {
  const findings: Finding[] = [];
  for (const manifest of tree.tracked) {
    if (manifest !== "Cargo.toml" && !manifest.endsWith("/Cargo.toml")) continue;
    const crate = path.posix.dirname(manifest) === "." ? "" : path.posix.dirname(manifest);
    if (crate.split("/").some((segment) => NOT_SOURCE_DIRS.has(segment) || segment.startsWith("."))) continue;
    const src = crate === "" ? "src" : `${crate}/src`;
    if (!tree.holdsSource(src)) continue;
    findings.push({ glob: `${src}/**`, how: crate === "" ? "Cargo's src/ of the root crate" : `Cargo's src/ of the crate at ${crate}` });
  }
  return findings;
}

function goScope(tree: Tree): Finding[] {
  if (!tree.tracked.some((file) => file === "go.mod" || file.endsWith("/go.mod"))) return [];
  const excluded = (file: string) => file.split("/").some((segment) => segment === "testdata" || segment === "vendor" || segment.startsWith("."));
  const sources = tree.sources.filter((file) => file.endsWith(".go") && !file.endsWith("_test.go") && !excluded(file));
  const findings: Finding[] = [];
  if (sources.some((file) => !file.includes("/"))) findings.push({ glob: "*.go", how: "the Go package at the root" });
  const tops = [...new Set(sources.filter((file) => file.includes("/")).map((file) => file.split("/")[0] ?? ""))];
  for (const top of tops.filter(sourceDirName)) {
    const glob = `${top}/**/*.go`;
    // `dir/**/*.go` would let the agent rewrite the .go fixtures of a testdata/ (or vendored code) below:
    // then each package is named on its own.
    const admitted = admits(glob);
    if (!tree.tracked.some((file) => excluded(file) && admitted(file))) {
      findings.push({ glob, how: `Go packages under ${top}/` });
      continue;
    }
    const dirs = new Set(sources.filter((file) => file.startsWith(`${top}/`)).map((file) => path.posix.dirname(file)));
    for (const dir of [...dirs].sort())
      findings.push({ glob: `${dir}/*.go`, how: `Go packages under ${top}/, one by one (a testdata/ or vendor/ below holds .go files)` });
  }
  return findings;
}

/**
 * The scope of the repository `facts` describe, by the rules above: the union of what each project
 * shape declares, without duplicates or globs inside another's `dir/**`, sorted; no globs when none is
 * found (or more than a scope holds), with `how` saying so in the latter case.
 */
export function inferScope(facts: ScopeFacts): InferredScope {
  const tree = new Tree(facts.tracked);
  const findings = [...npmScope(tree, facts.packageJson), ...pythonScope(tree, facts.pyproject), ...cargoScope(tree), ...goScope(tree)].filter(({ glob }) => {
    // A name holding a glob character (or anything a scope refuses) cannot be written as itself.
    if (GLOB_CHAR.test(glob.replace(/(?:^\*\.go|\/\*\*\/\*\.go|\/\*\.go|\/\*\*)$/, "")) || !Scope.safeParse([glob]).success) return false;
    // Every glob admits a tracked file the protected set leaves to the agent.
    return tree.sources.some(admits(glob));
  });
  const globs = [...new Set(findings.map(({ glob }) => glob))];
  const under = (glob: string, other: string) => other !== glob && other.endsWith("/**") && glob.startsWith(other.slice(0, -2));
  const kept = globs.filter((glob) => !globs.some((other) => under(glob, other))).sort();
  if (kept.length > MAX_GLOBS) return { globs: [], how: [`${kept.length} globs found, more than a scope holds (${MAX_GLOBS}): write one by hand`] };
  // How each kept glob was found, and each glob inside one, shape by shape (npm, Python, Cargo, Go).
  const how = findings.filter((finding) => kept.some((glob) => finding.glob === glob || under(finding.glob, glob))).map((finding) => finding.how);
  return { globs: kept, how: [...new Set(how)] };
}
