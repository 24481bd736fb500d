import { describe, expect, it } from "vitest";
import { DEFAULT_PROTECTED } from "#shared/engine/index.js";
import { Contract, type ContractInput } from "#shared/wire/contract.js";
import { commandParts, selectProtectedFiles } from "../../../runner/src/evaluation/protected-files.js";

// DESIGN §6.4: without `guards.protected`, the oracle and everything that decides which tests run and
// how is off limits — the tests, the test harness, the manifests and lockfiles, CI, the contract file,
// and every tracked file a judging command names.

const contractOf = (overrides: Partial<ContractInput> = {}) =>
  Contract.parse({
    name: "p",
    mode: "check_fixpoint",
    gates: [{ name: "unit", run: "npm test" }],
    agent: { run: "./agent.sh --fix src/app.js" },
    ...overrides,
  });

const TRACKED = [
  "loop.yaml",
  "package.json",
  "package-lock.json",
  "conftest.py",
  "pkg/conftest.py",
  "pytest.ini",
  "pyproject.toml",
  "vitest.config.mts",
  "tsconfig.build.json",
  "Makefile",
  ".mocharc.yml",
  ".github/workflows/ci.yml",
  "tests/test_parse.py",
  "src/app.js",
  "src/app.test.js",
  "scripts/check.sh",
  "scripts/other.sh",
  "bench/run.mjs",
  "bench/data/a.json",
  "bench/data/b.json",
  "agent.sh",
  "README.md",
];

describe("the default protected set", () => {
  it("covers the tests, the harness, manifests, lockfiles, CI and the contract file; leaves the source alone", () => {
    const files = selectProtectedFiles(contractOf(), "loop.yaml", TRACKED);
    expect(files).toEqual(
      [
        ".github/workflows/ci.yml",
        ".mocharc.yml",
        "Makefile",
        "conftest.py",
        "loop.yaml",
        "package-lock.json",
        "package.json",
        "pkg/conftest.py",
        "pyproject.toml",
        "pytest.ini",
        "src/app.test.js",
        "tests/test_parse.py",
        "tsconfig.build.json",
        "vitest.config.mts",
      ].sort(),
    );
    expect(Object.keys(DEFAULT_PROTECTED)).toEqual(["tests", "harness", "manifests", "lockfiles", "ci"]);
  });

  it("adds every tracked file a gate, metric or task command runs as part of the check — never the code it checks, nor the agent's files", () => {
    const contract = contractOf({
      mode: "task_list",
      gates: [
        { name: "unit", run: "bash -c './scripts/check.sh --fast' && node --test --test-reporter-destination=out/t.tap 2>&1 > out/log.txt" },
        { name: "syntax", run: "node --check src/app.js && npx eslint src/app.js --config ci/eslint.mjs" },
      ],
      tasks: [{ id: "bench", title: "bench", check: "FAST=1 timeout 60 node bench/run.mjs bench/data/a.json" }],
    });
    const tracked = [...TRACKED, "ci/eslint.mjs"];
    const files = selectProtectedFiles(contract, "loop.yaml", tracked);
    expect(files).toEqual(expect.arrayContaining(["scripts/check.sh", "bench/run.mjs", "ci/eslint.mjs"]));
    for (const file of ["scripts/other.sh", "agent.sh", "src/app.js", "bench/data/a.json"]) expect(files).not.toContain(file);
  });

  it("adds the files exec.setup runs: the setup before the gates is part of the check", () => {
    const contract = contractOf({ exec: { network: "none", setup: "bash scripts/other.sh && npm ci" } });
    expect(selectProtectedFiles(contract, "loop.yaml", TRACKED)).toContain("scripts/other.sh");
    expect(selectProtectedFiles(contractOf(), "loop.yaml", TRACKED)).not.toContain("scripts/other.sh");
  });

  it("follows `npm test`, `npm run X` and `yarn X` into package.json's scripts: the files a script the check runs names are the check's", () => {
    const tracked = [...TRACKED, "scripts/run-tests.js", "scripts/lint.sh", "scripts/setup.js", "scripts/unused.js"];
    const scripts = {
      pretest: "node scripts/setup.js",
      test: "node scripts/run-tests.js && npm run lint",
      lint: "sh scripts/lint.sh",
      other: "node scripts/unused.js",
    };
    const files = selectProtectedFiles(contractOf(), "loop.yaml", tracked, scripts);
    expect(files).toEqual(expect.arrayContaining(["scripts/run-tests.js", "scripts/lint.sh", "scripts/setup.js"]));
    expect(files).not.toContain("scripts/unused.js");
    const yarn = selectProtectedFiles(contractOf({ gates: [{ name: "unit", run: "yarn lint" }] }), "loop.yaml", tracked, scripts);
    expect(yarn).toContain("scripts/lint.sh");
    expect(yarn).not.toContain("scripts/run-tests.js");
  });

  it("a contract's own list replaces the defaults, command-named files included; protected: [] opts out", () => {
    const own = contractOf({ gates: [{ name: "unit", run: "sh scripts/check.sh" }], guards: { protected: ["src/**"] } });
    expect(selectProtectedFiles(own, "loop.yaml", TRACKED)).toEqual(["src/app.js", "src/app.test.js"]);
    expect(selectProtectedFiles(contractOf({ guards: { protected: [] } }), "loop.yaml", TRACKED)).toEqual([]);
  });
});

describe("commandParts", () => {
  it.each<[string, string[]]>([
    ["./scripts/check.sh --fast", ["./scripts/check.sh"]],
    ["python3 tools/t.py && python3 -m pytest -c ci/pytest.ini -q", ["python3", "tools/t.py", "python3"]],
    ["pytest -c ci/pytest.ini -q", ["pytest", "ci/pytest.ini"]],
    ["sh -c 'make -f ci.mk check' | tee out.log", ["sh", "make", "ci.mk", "tee"]],
    ["deno run bench/main.ts > out.txt; node -e \"require('./src/a.js')\" $HOME/x", ["deno", "bench/main.ts", "node"]],
    ["npx vitest run --config=vitest.ci.ts", ["vitest", "vitest.ci.ts"]],
  ])("%s runs %j as part of the check", (command, files) => {
    expect(commandParts(command).files).toEqual(files);
  });
});
