import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT, tempDir } from "../support/cli.js";

// The other e2e tests start the compiled CLI (dist/cli). In a source checkout the `loopwarden` binary
// (runner/bin/loopwarden.js) runs the TypeScript sources through tsx instead: what `npm start` and a
// developer's `npx loopwarden` run.
const BIN = path.join(ROOT, "runner", "bin", "loopwarden.js");

describe("runner/bin in a source checkout", () => {
  it("answers --version from package.json, and runs a command from the sources", () => {
    const version = spawnSync(process.execPath, [BIN, "--version"], { encoding: "utf8" });
    expect(version.stdout.trim()).toBe((JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { version: string }).version);

    const tmp = tempDir("source-checkout");
    try {
      // `run` loads its module (and the client, the schemas) through tsx, then refuses: no repository.
      const run = spawnSync(process.execPath, [BIN, "--json", "--server", "http://127.0.0.1:9", "run", "--check", "true", "--exec", "true"], {
        cwd: tmp.dir,
        encoding: "utf8",
      });
      expect(run.status).toBe(1);
      expect(JSON.parse(run.stdout)).toMatchObject({ status: "error", errors: [expect.stringContaining("is not inside a git repository")] });
    } finally {
      tmp.cleanup();
    }
  });
});
