import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadPendingCreate, savePendingCreate } from "../../../runner/src/pending-create.js";
import { sha256Hex } from "../../../shared/hash.js";

// A loop's creation is kept on disk across a crash (DESIGN §6.6): what was saved comes back whole, and
// a file a crash left unreadable is no creation rather than an error on every later run.

const tmp = mkdtempSync(path.join(os.tmpdir(), "lw-pending-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const request = {
  idempotency_key: "run-0123456789abcdef",
  contract: {
    name: "x",
    mode: "check_fixpoint" as const,
    gates: [{ name: "check", run: "true", timeout: "10m" }],
    stop: { max_iterations: 50, no_progress: 10 },
    agent: { run: "true", timeout: "20m" },
  },
  t0: {
    commit: "0".repeat(40),
    observation: { gates: [{ name: "check", exit_code: 0, signal: null, timed_out: false, duration_ms: 3, log: null }], tests: { passing: [], failing: [] } },
  },
};

describe("pending loop creations", () => {
  it("come back exactly as saved, gate logs included", async () => {
    const bytes = Buffer.from("$ true\n[loopwarden] exit code 0\n");
    const log = { ref: { sha256: sha256Hex(bytes), size: bytes.length, name: "gate-check.log", content_type: "text/plain" }, bytes };
    await savePendingCreate(tmp, "flags", { request, logs: [log] });
    expect(await loadPendingCreate(tmp, "flags")).toEqual({ request, logs: [log] });
    expect(readdirSync(path.join(tmp, ".loopwarden", "creating", "flags"))).toEqual(["logs", "request.json"]);
  });

  it("a request file a crash left torn is no creation, not an error", async () => {
    const dir = path.join(tmp, ".loopwarden", "creating", "loop.yaml");
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, "request.json"), JSON.stringify(request).slice(0, 40));
    expect(await loadPendingCreate(tmp, "loop.yaml")).toBeNull();
  });
});
