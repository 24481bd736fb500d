import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { contractDifferences } from "../../../runner/src/contract/contract-file.js";
import { contractSourceOf, loadWorkspace, saveWorkspaceState, type WorkspaceState } from "../../../runner/src/loop/workspace.js";

// DESIGN §6.6: a repository has at most one active loop per contract file; the runner remembers them by
// contract source, and a resumed loop's pinned contract is compared with what the flags or file say.

const tmp = mkdtempSync(path.join(os.tmpdir(), "lw-workspace-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const loop = (id: string): WorkspaceState => ({
  loop_id: id,
  server: null,
  state_dir: null,
  started_from: "main",
  runner_id: "host-1",
});

describe("the repository's loops", () => {
  it("keeps one loop per contract source, and reads a first-version state file as loop.yaml's", async () => {
    const repo = path.join(tmp, "repo");
    mkdirSync(path.join(repo, ".loopwarden"), { recursive: true });
    // A first-version file, with the fields that version also kept (the loop's branch, the contract hash).
    writeFileSync(
      path.join(repo, ".loopwarden", "state.json"),
      JSON.stringify({ ...loop("lp_old"), branch: "loopwarden/lp_old", contract_hash: "0".repeat(64) }),
    );
    expect(await loadWorkspace(repo)).toEqual({ "loop.yaml": loop("lp_old") });
    await saveWorkspaceState(repo, "flags", loop("lp_flags"));
    await saveWorkspaceState(repo, "ci/loop.yaml", loop("lp_ci"));
    expect(await loadWorkspace(repo)).toEqual({ "loop.yaml": loop("lp_old"), flags: loop("lp_flags"), "ci/loop.yaml": loop("lp_ci") });
  });

  it("a command without contract flags means loop.yaml when it exists or has a loop, else the flag-only loop", () => {
    const repo = path.join(tmp, "sources");
    mkdirSync(repo, { recursive: true });
    expect(contractSourceOf(repo, { check: "npm test" }, {})).toBe("flags");
    expect(contractSourceOf(repo, { contract: "./ci/../ci/loop.yaml" }, {})).toBe("ci/loop.yaml");
    expect(contractSourceOf(repo, {}, { flags: loop("lp_flags") })).toBe("flags");
    expect(contractSourceOf(repo, {}, {})).toBe("loop.yaml");
    writeFileSync(path.join(repo, "loop.yaml"), "name: x\n");
    expect(contractSourceOf(repo, {}, { flags: loop("lp_flags") })).toBe("loop.yaml");
  });
});

describe("contractDifferences", () => {
  it("names each differing value by its key path, pinned value first", () => {
    const pinned = { name: "x", gates: [{ name: "unit", run: "npm test" }], stop: { max_iterations: 3, no_progress: 10 } };
    const now = { name: "x", gates: [{ name: "unit", run: "npm run test:all" }], stop: { max_iterations: 50, no_progress: 10 }, guards: { protected: [] } };
    expect(contractDifferences(pinned, now)).toEqual([
      'gates[0].run: "npm test" → "npm run test:all"',
      'guards: (none) → {"protected":[]}',
      "stop.max_iterations: 3 → 50",
    ]);
    expect(contractDifferences(pinned, structuredClone(pinned))).toEqual([]);
  });
});
