import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, makeRepo, startCoordinator, tempDir, type TestCoordinator, TEST_OWNER_TOKEN } from "../support/cli.js";
import { directorySize } from "../support/disk.js";

// A runner-only install (DESIGN §12, §13): the package as `npm pack` makes it, installed into an empty
// directory without dev or optional dependencies — no TypeScript loader, no Workers runtime — runs the
// compiled CLI: its version, its help, and a flag-only loop against a deployed (here: a test's)
// coordinator. A local command says exactly what to install. Its npm cache is a temporary directory.

describe("the package, installed runner-only", () => {
  const tmp = tempDir("install");
  const app = path.join(tmp.dir, "app");
  const bin = path.join(app, "node_modules", ".bin", "loopwarden");
  let coordinator: TestCoordinator;
  const cli = (args: string[], cwd = app) => {
    try {
      return {
        code: 0,
        stdout: execFileSync(bin, args, {
          cwd,
          encoding: "utf8",
          env: { ...process.env, NO_COLOR: "1", LOOPWARDEN_IDLE: "0", LOOPWARDEN_TOKEN: TEST_OWNER_TOKEN },
          stdio: "pipe",
        }),
        stderr: "",
      };
    } catch (error) {
      const failed = error as { status: number; stdout: string; stderr: string };
      return { code: failed.status, stdout: failed.stdout, stderr: failed.stderr };
    }
  };

  beforeAll(async () => {
    // npm test builds dist/ first; packing must not rebuild it under the running tests.
    const packed = execFileSync("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", tmp.dir], { cwd: ROOT, encoding: "utf8" });
    const [{ filename }] = JSON.parse(packed) as [{ filename: string }];
    mkdirSync(app);
    writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", private: true }));
    const started = performance.now();
    execFileSync(
      "npm",
      ["install", path.join(tmp.dir, filename), "--omit=dev", "--omit=optional", "--no-audit", "--no-fund", "--cache", path.join(tmp.dir, "npm-cache")],
      {
        cwd: app,
        stdio: "ignore",
      },
    );
    const seconds = (performance.now() - started) / 1_000;
    console.log(
      `runner-only install: tarball ${(statSync(path.join(tmp.dir, filename)).size / 1024).toFixed(0)} KiB, installed ${(directorySize(path.join(app, "node_modules")) / 1024 / 1024).toFixed(1)} MiB in ${seconds.toFixed(1)} s`,
    );
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
  }, 180_000);
  afterAll(async () => {
    await coordinator?.stop();
    tmp.cleanup();
  });

  it("is small: no Workers runtime, no TypeScript loader, no package but itself (its dependencies are bundled, their licenses beside them)", () => {
    expect(directorySize(path.join(app, "node_modules"))).toBeLessThan(15 * 1024 * 1024);
    expect(readdirSync(path.join(app, "node_modules")).filter((entry) => !entry.startsWith("."))).toEqual(["loopwarden"]);
    const notices = readFileSync(path.join(app, "node_modules", "loopwarden", "dist", "cli", "THIRD-PARTY-NOTICES.md"), "utf8");
    for (const bundled of ["commander", "zod", "yaml"]) expect(notices).toContain(`## ${bundled} `);
  });

  it("answers --version and --help from the compiled CLI", () => {
    expect(cli(["--version"]).stdout.trim()).toBe(
      JSON.parse(execFileSync("node", ["-p", "JSON.stringify(require('./package.json').version)"], { cwd: ROOT, encoding: "utf8" })),
    );
    const help = cli(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("verify [options] <receipt>");
  });

  it("runs a flag-only loop against a coordinator given with --server", () => {
    const repo = path.join(tmp.dir, "repo");
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    makeRepo(repo, {});
    const run = cli(["--json", "--server", coordinator.url, "run", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"], repo);
    expect(run.code, run.stderr).toBe(10);
    expect(JSON.parse(run.stdout)).toMatchObject({ halt_reason: "success_condition_met", receipt_url: expect.stringContaining("/r/rc_") });
  });

  it("says exactly what to install for a local coordinator", () => {
    const local = cli(["--state", path.join(tmp.dir, "local-state"), "status", `lp_${"0".repeat(24)}`]);
    expect(local.code).toBe(1);
    expect(local.stderr).toMatch(/needs the Workers runtime, which this install left out \(--omit=optional\): add it with `npm install miniflare@4\.\d+\.\d+`/);
  });
});
