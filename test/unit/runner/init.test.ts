import { describe, expect, it } from "vitest";
import { DEFAULT_PROTECTED_GLOBS } from "../../../shared/engine/index.js";
import { AgentReportFile } from "../../../shared/wire/agent-report.js";
import { starterProgram } from "../../../runner/src/commands/init.js";

describe("starterProgram", () => {
  const program = starterProgram({
    name: "textkit",
    objective: "make every test pass without weakening any test",
    gatesSummary: "1. `test`: `npm test` (timeout 10m)",
    contract: "ci/loop.yaml",
  });

  it("gives the agent the objective, the gates, and the files it must not touch", () => {
    expect(program).toMatch(/^# textkit: instructions for the agent\n/);
    expect(program).toContain("## Objective\n\nmake every test pass without weakening any test\n");
    expect(program).toContain("1. `test`: `npm test` (timeout 10m)");
    const offLimits = program.slice(program.indexOf("Off limits"), program.indexOf("## First"));
    expect(offLimits).toContain("`ci/loop.yaml`");
    // The default protected globs of DESIGN §6.4, exactly as the guards define them.
    for (const glob of DEFAULT_PROTECTED_GLOBS) expect(offLimits).toContain(`\`${glob}\``);
  });

  it("names the environment variables the runner sets, and the fields of the files they point at", () => {
    for (const name of ["LOOPWARDEN_LAST_VERDICT", "LOOPWARDEN_HISTORY", "LOOPWARDEN_AGENT_REPORT"]) expect(program).toContain(`$${name}`);
    for (const field of ["candidate_id", "decision", "reason", "detail", "failing_before", "failing_after", "regressed", "failing_tests"]) {
      expect(program).toContain(`"${field}"`);
    }
    for (const field of ["parent", "status", "diff_summary", "description"]) expect(program).toContain(field);
    expect(program).toContain("make **one focused change**");
    expect(program).toContain("**Do not retry a direction that was rejected**");
  });

  it("shows a report example that the runner accepts", () => {
    const example = /```json\n([\s\S]*?)```/.exec(program)?.[1];
    expect(example).toBeDefined();
    const parsed = AgentReportFile.safeParse(JSON.parse(example ?? ""));
    expect(parsed.success, parsed.error?.message).toBe(true);
    expect(Object.keys(parsed.data ?? {})).toEqual(["agent", "sampling", "cost", "context_files", "description"]);
  });
});
