import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { clonesRoot, withClone } from "../../../runner/src/evaluation/clone.js";
import { cloneEnv } from "../../../runner/src/evaluation/environment.js";
import { runCommand } from "../../../runner/src/process/exec.js";

// DESIGN §6.4: a candidate is evaluated in a clone outside the repository, with an environment that
// names no path inside the working tree, so nothing untracked the agent controls can stand in for the
// check (a planted node_modules/.bin binary, an activated .venv, a NODE_PATH).

const tmp = mkdtempSync(path.join(os.tmpdir(), "lw-clone-env-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("cloneEnv", () => {
  const repo = "/home/dev/project";
  const base: NodeJS.ProcessEnv = {
    PATH: `/home/dev/project/node_modules/.bin:/home/dev/project/.venv/bin:node_modules/.bin:/usr/local/bin:/usr/bin`,
    NODE_PATH: "/home/dev/project/node_modules",
    PYTHONPATH: "/home/dev/project/src:/opt/lib/python",
    VIRTUAL_ENV: "/home/dev/project/.venv",
    INIT_CWD: "/home/dev/project",
    npm_config_local_prefix: "/home/dev/project",
    GIT_DIR: "/home/dev/project/.git",
    HOME: "/home/dev",
    OTHER_PROJECT: "/home/dev/project-two",
    LOOPWARDEN_TOKEN: "secret",
    LANG: "C.UTF-8",
  };

  it("drops every path inside the working tree: list entries one by one, other variables whole", () => {
    expect(cloneEnv([repo], base)).toEqual({
      PATH: "node_modules/.bin:/usr/local/bin:/usr/bin",
      PYTHONPATH: "/opt/lib/python",
      HOME: "/home/dev",
      OTHER_PROJECT: "/home/dev/project-two",
      LANG: "C.UTF-8",
    });
  });

  it("knows the working tree by each of its names (a symlinked checkout)", () => {
    expect(cloneEnv(["/link/project", repo], { NODE_PATH: "/link/project/node_modules:/srv/shared" }).NODE_PATH).toBe("/srv/shared");
  });
});

describe("withClone", () => {
  it("clones outside the repository, and a planted binary in the working tree's ignored node_modules is out of reach", async () => {
    const repo = path.join(tmp, "repo");
    mkdirSync(path.join(repo, "node_modules", ".bin"), { recursive: true });
    writeFileSync(path.join(repo, ".gitignore"), "node_modules/\n");
    writeFileSync(path.join(repo, "package.json"), JSON.stringify({ name: "p", version: "1.0.0", scripts: { test: "checker" } }));
    // What an agent would plant: a test runner that always says the tests pass.
    writeFileSync(path.join(repo, "node_modules", ".bin", "checker"), "#!/bin/sh\necho 'all tests passed'\n", { mode: 0o755 });
    const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@localhost", ...args], { cwd: repo });
    git("init", "-q", "-b", "main");
    git("add", "-A");
    git("commit", "-q", "-m", "initial");
    const head = execFileSync("git", ["rev-parse", "HEAD"], { cwd: repo, encoding: "utf8" }).trim();

    const saved = process.env.PATH;
    // As `npx loopwarden run` or an npm script would start the runner: the repository's bin first on PATH.
    process.env.PATH = `${path.join(repo, "node_modules", ".bin")}:${saved ?? ""}`;
    try {
      const result = await withClone(repo, head, "planted", async (clone) => {
        expect(path.relative(realpathSync(repo), realpathSync(clone.dir)).startsWith("..")).toBe(true);
        expect(clone.dir.startsWith(clonesRoot())).toBe(true);
        return runCommand("checker; npm test", { cwd: clone.dir, timeoutMs: 60_000, env: clone.env });
      });
      expect(result.output.toString()).not.toContain("all tests passed");
      expect(result.exit_code).not.toBe(0);
    } finally {
      process.env.PATH = saved;
    }
  });
});
