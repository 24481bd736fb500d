import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { cruise, type ICruiseResult, type IConfiguration } from "dependency-cruiser";
import { describe, expect, it } from "vitest";

// The layering check of `npm run lint` (.dependency-cruiser.mjs) fails a wrong import. Each case builds a
// small tree in a temporary directory laid out as the repository is (shared/, runner/src/, …), cruises it
// with the repository's own rules, and removes it whatever happens.

// Imported by URL: the config is plain JavaScript, which the type checker is not given.
const config = ((await import(new URL("../../.dependency-cruiser.mjs", import.meta.url).href)) as { default: IConfiguration }).default;

const PACKAGE_IMPORTS = (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { imports: Record<string, string> }).imports;

/** The violations, as "rule: from → to", of the repository's rules over `files` (path → source). */
async function violationsOf(files: Record<string, string>): Promise<string[]> {
  const root = mkdtempSync(path.join(os.tmpdir(), "lw-layering-"));
  try {
    // The repository's subpath imports, so `#shared/…` resolves as it does there.
    writeFileSync(path.join(root, "package.json"), JSON.stringify({ type: "module", imports: PACKAGE_IMPORTS }));
    for (const [file, source] of Object.entries(files)) {
      mkdirSync(path.join(root, path.dirname(file)), { recursive: true });
      writeFileSync(path.join(root, file), source);
    }
    const dirs = [...new Set(Object.keys(files).map((file) => file.split("/")[0] as string))];
    const { output } = await cruise(dirs, { ...config.options, ruleSet: { forbidden: config.forbidden ?? [] }, validate: true, baseDir: root });
    return (output as ICruiseResult).summary.violations.map((violation) => `${violation.rule.name}: ${violation.from} → ${violation.to}`).sort();
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

describe("the layering check", () => {
  it("fails shared/ importing the runner", async () => {
    const violations = await violationsOf({
      "shared/bad.ts": 'import { helper } from "../runner/src/helper.js";\nexport const value = helper;\n',
      "runner/src/helper.ts": "export const helper = 1;\n",
    });
    expect(violations).toEqual(["shared-not-to-its-users: shared/bad.ts → runner/src/helper.ts"]);
  });

  it("fails shared/ importing a Node built-in", async () => {
    expect(await violationsOf({ "shared/bad.ts": 'import { readFileSync } from "node:fs";\nexport const read = readFileSync;\n' })).toEqual([
      "shared-not-to-node-builtins: shared/bad.ts → fs",
    ]);
  });

  it("fails a relative import of shared/ from outside it: its modules are imported as #shared/…", async () => {
    const violations = await violationsOf({
      // The specifier spelled in parts, so that a search for relative imports of shared/ finds none in this repository.
      "runner/src/uses.ts": `import { value } from "${["..", "..", "shared", "value.js"].join("/")}";\nexport const used = value;\n`,
      "shared/value.ts": "export const value = 1;\n",
    });
    expect(violations).toEqual(["shared-through-its-alias: runner/src/uses.ts → shared/value.ts"]);
  });

  it("fails the wire importing the engine, even for a type", async () => {
    const violations = await violationsOf({
      "shared/wire/bad.ts": 'import type { Decision } from "../engine/decision.js";\nexport type Wired = Decision;\n',
      "shared/engine/decision.ts": "export type Decision = number;\n",
    });
    expect(violations).toEqual(["wire-not-to-engine: shared/wire/bad.ts → shared/engine/decision.ts"]);
  });

  it("fails the runner importing the worker, and the build importing the runner", async () => {
    const violations = await violationsOf({
      "runner/src/bad.ts": 'import { route } from "../../worker/src/route.js";\nexport const used = route;\n',
      "worker/src/route.ts": "export const route = 1;\n",
      "scripts/build-thing.ts": 'import { used } from "../runner/src/bad.js";\nexport const again = used;\n',
    });
    expect(violations).toEqual([
      "build-not-to-runner: scripts/build-thing.ts → runner/src/bad.ts",
      "runner-not-to-worker-src: runner/src/bad.ts → worker/src/route.ts",
    ]);
  });

  it("fails a cycle held only by type imports", async () => {
    const violations = await violationsOf({
      "runner/src/a.ts": 'import type { B } from "./b.js";\nexport interface A { b: B }\n',
      "runner/src/b.ts": 'import type { A } from "./a.js";\nexport interface B { a: A }\n',
    });
    // Reported once, at the edge that closes it.
    expect(violations).toEqual(["no-circular: runner/src/a.ts → runner/src/b.ts"]);
  });

  it("passes imports that go the right way", async () => {
    const violations = await violationsOf({
      "runner/src/ok.ts":
        'import { wired } from "#shared/wire/ok.js";\nimport { BUILT } from "../../scripts/lib/built.js";\nexport const both = [wired, BUILT];\n',
      "shared/wire/ok.ts": "export const wired = 1;\n",
      "scripts/lib/built.ts": "export const BUILT = 2;\n",
    });
    expect(violations).toEqual([]);
  });
});
