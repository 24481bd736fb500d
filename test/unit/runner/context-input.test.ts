import { describe, expect, it } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import type { GateSummary } from "#shared/engine/index.js";
import { failingLogs, rememberLogTails } from "../../../runner/src/loop/context-input.js";

// The failing gates' log tails the agent's context quotes (docs/agent.md): those of this process's last
// evaluation are read from memory, not downloaded back from the coordinator (issue 30); any other is
// downloaded and checked against its digest.

const logOf = (text: string) => {
  const bytes = Buffer.from(text);
  return { ref: { sha256: sha256Hex(bytes), size: bytes.length, name: "gate-unit.log", content_type: "text/plain; charset=utf-8" }, bytes };
};
const failed = (name: string, log: ReturnType<typeof logOf>): GateSummary => ({
  name,
  exit_code: 1,
  signal: null,
  timed_out: false,
  log: log.ref,
  soft: false,
  passed: false,
});

describe("the failing gates' logs of the agent's context", () => {
  it("quotes the last evaluation's logs without asking the coordinator, and downloads another's", async () => {
    const own = logOf("FAIL test/a.test.ts\n  at test/a.test.ts:3:1\n");
    const other = logOf("another runner's log\n");
    const downloaded: string[] = [];
    const client = {
      downloadArtifact: (_loopId: string, sha256: string) => {
        downloaded.push(sha256);
        return Promise.resolve(new Uint8Array(other.bytes));
      },
    };
    rememberLogTails([own]);
    const logs = await failingLogs(client, "lp_1", [failed("unit", own), failed("lint", other)]);
    expect(logs).toEqual([
      { gate: "unit", text: "FAIL test/a.test.ts\n  at test/a.test.ts:3:1\n" },
      { gate: "lint", text: "another runner's log\n" },
    ]);
    expect(downloaded).toEqual([other.ref.sha256]);
  });

  it("keeps only the last evaluation's logs", async () => {
    const first = logOf("first\n");
    rememberLogTails([first]);
    rememberLogTails([logOf("second\n")]);
    const logs = await failingLogs({ downloadArtifact: () => Promise.reject(new Error("offline")) }, "lp_1", [failed("unit", first)]);
    expect(logs).toEqual([{ gate: "unit", text: "(the log could not be read: offline)" }]);
  });
});
