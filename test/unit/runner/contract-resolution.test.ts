import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { resolveContract, resumedContract } from "../../../runner/src/contract/contract-resolution.js";

// Flag-only mode (DESIGN §5): the flags are the contract. --junit/--tap name the check's test report, so
// a loop started from flags can count each fixed test; a running loop refuses flags that would change it.

const repo = mkdtempSync(path.join(os.tmpdir(), "lw-flags-"));
afterAll(() => rmSync(repo, { recursive: true, force: true }));
const flags = { check: "node check.mjs", exec: "node agent.mjs" };

describe("flag-only contracts", () => {
  it("without a report, the check is the one test", async () => {
    const { contract } = await resolveContract(repo, flags);
    expect(contract.gates).toEqual([{ name: "check", run: "node check.mjs", timeout: "10m" }]);
  });

  it("--junit or --tap names the check's report", async () => {
    expect((await resolveContract(repo, { ...flags, junit: "out/junit.xml" })).contract.gates[0]).toMatchObject({ tests: { junit: "out/junit.xml" } });
    expect((await resolveContract(repo, { ...flags, tap: "out/report.tap" })).contract.gates[0]).toMatchObject({ tests: { tap: "out/report.tap" } });
  });

  it("refuses both reports at once as a usage error", async () => {
    await expect(resolveContract(repo, { ...flags, junit: "a.xml", tap: "b.tap" })).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining("not both"),
    });
  });

  it("a running loop refuses a report flag that would change its pinned contract, naming the difference", async () => {
    const pinned = (await resolveContract(repo, flags)).contract;
    await expect(resumedContract(repo, "flags", { junit: "out/junit.xml" }, "lp_0123456789abcdef01234567", pinned)).rejects.toMatchObject({
      message: expect.stringMatching(/--junit would change the contract it pinned:\n.*gates/),
    });
    // Resuming with no contract flags, or the very same ones, is the pinned contract.
    expect((await resumedContract(repo, "flags", {}, "lp_0123456789abcdef01234567", pinned)).contract).toEqual(pinned);
  });
});
