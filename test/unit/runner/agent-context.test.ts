import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { agentEnv, writeAgentContext } from "../../../runner/src/loop/agent-context.js";
import { LoopHarness, TEST_IDS, commitOf, observationOf } from "../engine-harness.js";

// What the agent reads before a run (docs/agent.md): the tree it starts from, the
// last verdict and the history, each a file its environment names.

const [A, B, C] = [TEST_IDS[0], TEST_IDS[1], TEST_IDS[2]];
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function context(harness: LoopHarness) {
  const repo = mkdtempSync(path.join(os.tmpdir(), "lw-agent-context-"));
  dirs.push(repo);
  return writeAgentContext(repo, harness.state).then((files) => ({
    files,
    best: JSON.parse(readFileSync(files.best, "utf8")) as unknown,
    last: JSON.parse(readFileSync(files.lastVerdict, "utf8")) as { candidate_id: string; failing_tests: string[] } | null,
  }));
}

describe("the agent's context", () => {
  it("before the first run: t0 and what fails there, and no verdict yet", async () => {
    const { files, best, last } = await context(new LoopHarness([A, B]));
    // A failing gate is named too (`gate:<name>`): with no test report it is the only thing that fails.
    expect(best).toEqual({ candidate_id: "t0", commit: commitOf("t0"), failing_tests: ["gate:unit", A, B], metric: null });
    expect(last).toBeNull();
    expect(agentEnv(files, "lp_1", 1)).toMatchObject({ LOOPWARDEN_BEST: files.best, LOOPWARDEN_LAST_VERDICT: files.lastVerdict });
  });

  it("after a rejection: the best it was given back, not the rejected candidate's failing tests", async () => {
    const harness = new LoopHarness([A, B]);
    expect(harness.evaluate("fixes-b", [A])).toMatchObject({ decision: "promoted" });
    expect(harness.evaluate("breaks-c", [A, C])).toMatchObject({ decision: "rejected", reason: "regressed" });
    const { best, last } = await context(harness);
    expect(best).toEqual({ candidate_id: "c1", commit: commitOf("fixes-b"), failing_tests: ["gate:unit", A], metric: null });
    expect(last).toMatchObject({ candidate_id: "c2", failing_tests: ["gate:unit", A, C] });
  });

  it("the history names every candidate as the loop stands at each run, a line each, in order", async () => {
    const harness = new LoopHarness([A, B]);
    const history = async () => {
      const { files } = await context(harness);
      return readFileSync(files.history, "utf8")
        .split("\n")
        .filter(Boolean)
        .map((line) => JSON.parse(line) as { candidate_id: string; status: string; reason: string | null });
    };
    expect(await history()).toEqual([]);
    expect(harness.evaluate("fixes-b", [A])).toMatchObject({ decision: "promoted" });
    expect(await history()).toMatchObject([{ candidate_id: "c1", status: "promoted" }]);
    // Proposed, not yet decided: its line says so; decided, the next run's line says how. The first
    // line stays as it was.
    expect(harness.propose("breaks-c")).toMatchObject({ ok: true });
    const proposed = await history();
    expect(proposed).toHaveLength(2);
    expect(proposed[1]).toMatchObject({ candidate_id: "c2", reason: null });
    expect(proposed[1]?.status).not.toBe("rejected");
    const leased = harness.lease();
    if (!leased.ok || !leased.value) throw new Error("no lease granted");
    expect(harness.report(leased.value, observationOf([A, C]))).toMatchObject({ ok: true, value: { decision: "rejected" } });
    expect(await history()).toMatchObject([
      { candidate_id: "c1", status: "promoted" },
      { candidate_id: "c2", status: "rejected", reason: "regressed" },
    ]);
  });
});
