import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { buildContext, estimateTokens, type ContextInput } from "../../../runner/src/loop/context-builder.js";

// The context the runner builds for the agent (docs/agent.md, "What the agent is told"; docs/design.md
// §6.9): what the stack traces name, then the failing tests' import closure, then one-hop dependents,
// each tier whole or left out and named, within the budget; a budget too small for the first tier is
// unsatisfiable.

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function temp(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), `lw-context-${prefix}-`));
  dirs.push(dir);
  return dir;
}

/** A git repository of these files, committed. */
function repoOf(files: Record<string, string>): string {
  const dir = temp("repo");
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    writeFileSync(path.join(dir, file), text);
  }
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@localhost", ...args], { cwd: dir, stdio: "pipe" });
  git("init", "-q");
  git("add", "-A");
  git("commit", "-qm", "files");
  return dir;
}

const JS_PROJECT = {
  "src/a/b/c/deep.js": "export function deep(x) {\n  return x.trim();\n}\n",
  "src/util.js": "export const pad = (s) => ` ${s} `;\n",
  "src/index.js": "import { deep } from './a/b/c/deep.js';\nexport const run = (x) => deep(x);\n",
  "src/unrelated.js": "export const nothing = 1;\n",
  "test/deep.test.js":
    "import { deep } from '../src/a/b/c/deep.js';\nimport { pad } from '../src/util.js';\nimport test from 'node:test';\ntest('deep', () => deep(pad(null)));\n",
};

/** A Node test runner's failure, as a clone elsewhere printed it: the stack names the deep file under that clone's path. */
const NODE_TRACE = [
  "not ok 1 - deep",
  "  error: Cannot read properties of null (reading 'trim')",
  "  stack: |-",
  "    deep (file:///tmp/loopwarden-clones/4242/c3/src/a/b/c/deep.js:2:12)",
  "    TestContext.<anonymous> (/tmp/loopwarden-clones/4242/c3/test/deep.test.js:4:25)",
  "    node:internal/test_runner/test:583:25",
  "    at Object.<anonymous> (/tmp/x/node_modules/lib/index.js:1:1)",
].join("\n");

function input(tree: string, overrides: Partial<ContextInput> = {}): ContextInput {
  return {
    tree,
    failing: [{ id: "test/deep.test.js > deep", regressed: false }],
    logs: [{ gate: "unit", text: NODE_TRACE }],
    last: null,
    budget: 32_000,
    ...overrides,
  };
}

describe("the agent's context", () => {
  it("names the file a stack trace names three directories down, and the failing test's imports, within the budget", async () => {
    const tree = repoOf(JS_PROJECT);
    const out = path.join(temp("out"), "context");
    const built = await buildContext(input(tree), out);
    if (built.status !== "built") throw new Error("not built");
    const byTier = (tier: string) => built.files.filter((file) => file.tier === tier).map((file) => file.path);
    expect(byTier("stack_trace")).toEqual(["src/a/b/c/deep.js", "test/deep.test.js"]);
    expect(byTier("import_closure")).toEqual(["src/util.js"]);
    // One hop back: src/index.js imports the deep file; a file nobody's imports reach is not there.
    expect(byTier("dependents")).toEqual(["src/index.js"]);
    expect(built.files.map((file) => file.path)).not.toContain("src/unrelated.js");
    expect(built.tokens).toBeLessThanOrEqual(32_000);
    const markdown = readFileSync(path.join(out, "context.md"), "utf8");
    expect(markdown).toContain("- test/deep.test.js > deep");
    expect(markdown).toContain("files/src/a/b/c/deep.js — named by a stack trace in the unit gate's output");
    expect(markdown).toContain("files/src/util.js — imported by test/deep.test.js");
    expect(markdown).toContain("reading 'trim'");
    // The copies are the tree's files, and the manifest's hashes are theirs.
    expect(readFileSync(path.join(out, "files", "src", "a", "b", "c", "deep.js"), "utf8")).toBe(JS_PROJECT["src/a/b/c/deep.js"]);
    expect(built.files.every((file) => file.sha256.length === 64)).toBe(true);
  });

  it("a budget of 10 tokens is unsatisfiable and writes nothing", async () => {
    const tree = repoOf(JS_PROJECT);
    const out = path.join(temp("out"), "context");
    const built = await buildContext(input(tree, { budget: 10 }), out);
    expect(built).toMatchObject({ status: "unsatisfiable", tier: "stack_trace", budget: 10 });
    if (built.status === "unsatisfiable") expect(built.needed).toBeGreaterThan(10);
    expect(existsSync(out)).toBe(false);
  });

  it("a budget the first tier fits and the import closure does not: the closure is left out whole and named with its size", async () => {
    const big = `export const table = [\n${Array.from({ length: 2_000 }, (_, index) => `  ${index},`).join("\n")}\n];\n`;
    const tree = repoOf({ ...JS_PROJECT, "src/util.js": big });
    const first = await buildContext(input(tree, { budget: 1_000_000 }), path.join(temp("out"), "context"));
    if (first.status !== "built") throw new Error("not built");
    const tier1 = first.tiers.find((tier) => tier.tier === "stack_trace");
    const budget = (tier1?.tokens ?? 0) + 600;
    const out = path.join(temp("out"), "context");
    const built = await buildContext(input(tree, { budget }), out);
    if (built.status !== "built") throw new Error("not built");
    expect(built.files.map((file) => file.tier)).toEqual(["stack_trace", "stack_trace"]);
    expect(built.tiers.find((tier) => tier.tier === "import_closure")).toMatchObject({ files: 1, included: false });
    expect(built.tokens).toBeLessThanOrEqual(budget);
    expect(readFileSync(path.join(out, "context.md"), "utf8")).toMatch(
      /## What the failing tests import\n\nLeft out for the budget: 1 file\(s\), about \d+ tokens\./,
    );
    expect(existsSync(path.join(out, "files", "src", "util.js"))).toBe(false);
  });

  it("follows Python: a traceback's files, and the test's `from` and `import` statements", async () => {
    const tree = repoOf({
      "pkg/__init__.py": "",
      "pkg/core.py": "from .helpers import clean\n\ndef run(x):\n    return clean(x)\n",
      "pkg/helpers.py": "def clean(x):\n    return x.strip()\n",
      "tests/test_core.py": "import pkg.helpers\nfrom pkg.core import run\n\ndef test_run():\n    assert run(None) == ''\n",
    });
    const traceback = [
      "Traceback (most recent call last):",
      '  File "/tmp/elsewhere/tests/test_core.py", line 5, in test_run',
      '  File "/tmp/elsewhere/pkg/core.py", line 4, in run',
      "AttributeError: 'NoneType' object has no attribute 'strip'",
    ].join("\n");
    const built = await buildContext(input(tree, { logs: [{ gate: "pytest", text: traceback }] }), path.join(temp("out"), "context"));
    if (built.status !== "built") throw new Error("not built");
    expect(built.files.filter((file) => file.tier === "stack_trace").map((file) => file.path)).toEqual(["pkg/core.py", "tests/test_core.py"]);
    expect(built.files.filter((file) => file.tier === "import_closure").map((file) => file.path)).toEqual(["pkg/helpers.py"]);
  });

  it("never copies what a symlink points at outside the tree, though a trace names it", async () => {
    const outside = temp("secret");
    writeFileSync(path.join(outside, "secret.js"), "export const key = 'hunter2';\n");
    const tree = repoOf(JS_PROJECT);
    symlinkSync(path.join(outside, "secret.js"), path.join(tree, "src", "leak.js"));
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@localhost", "add", "src/leak.js"], { cwd: tree });
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "link"], { cwd: tree });
    const out = path.join(temp("out"), "context");
    const built = await buildContext(input(tree, { logs: [{ gate: "unit", text: `${NODE_TRACE}\n    at x (/tmp/c/src/leak.js:1:1)` }] }), out);
    if (built.status !== "built") throw new Error("not built");
    expect(built.files.map((file) => file.path)).not.toContain("src/leak.js");
    expect(existsSync(path.join(out, "files", "src", "leak.js"))).toBe(false);
  });

  it("estimates code denser than prose's four characters a token, so a budget is a ceiling", () => {
    const code = "if (result.failing.length > 0) { return items.map((item) => item.id).join(', '); }\n";
    expect(estimateTokens(code)).toBeGreaterThan(Math.ceil(code.length / 4));
    expect(estimateTokens("")).toBe(0);
    expect(estimateTokens("internationalization")).toBe(5);
    expect(estimateTokens("1234567")).toBe(3);
  });
});
