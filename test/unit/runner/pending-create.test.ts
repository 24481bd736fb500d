import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadPendingCreate, savePendingCreate, stageBaselineFiles, uploadPendingFiles } from "../../../runner/src/loop/pending-create.js";
import type { Client } from "../../../runner/src/coordinator/client.js";
import { sha256Hex } from "#shared/hash.js";

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

  it("keep t0's files with the creation, copied out of its clone, and upload them once the loop exists", async () => {
    const repo = path.join(tmp, "files");
    const clone = path.join(tmp, "t0-clone");
    mkdirSync(path.join(clone, "profile"), { recursive: true });
    writeFileSync(path.join(clone, "profile", "unit.cpuprofile"), '{"nodes":[]}');
    writeFileSync(path.join(clone, "profile", "other.txt"), "not matched");
    const staged = await stageBaselineFiles(repo, "loop.yaml", clone, ["profile/*.cpuprofile"]);
    const profile = { sha256: sha256Hex('{"nodes":[]}'), size: 12, name: "profile/unit.cpuprofile", content_type: "application/json" };
    expect(staged?.refs).toEqual([profile]);
    // The clone goes; the creation keeps its copy, moved in with it, and finds it again after a restart.
    rmSync(clone, { recursive: true });
    const saved = await savePendingCreate(repo, "loop.yaml", { request, logs: [], ...(staged ? { files: staged } : {}) });
    const dir = path.join(repo, ".loopwarden", "creating", "loop.yaml");
    expect(saved.files).toEqual({ dir: path.join(dir, "files"), refs: [profile] });
    expect(readdirSync(path.join(repo, ".loopwarden", "t0-files"))).toEqual([]);
    expect(readFileSync(path.join(dir, "files", "profile", "unit.cpuprofile"), "utf8")).toBe('{"nodes":[]}');
    const loaded = await loadPendingCreate(repo, "loop.yaml");
    expect(loaded?.files).toEqual(saved.files);

    // Uploaded from the copies: each as t0 cites it; one gone from disk or changed since is named, not stored as cited.
    const uploaded: string[] = [];
    const client = {
      uploadArtifactFile: async (_loop: string, file: string, name: string, contentType: string) => {
        const bytes = readFileSync(file);
        uploaded.push(name);
        return { sha256: sha256Hex(bytes), size: bytes.length, name, content_type: contentType };
      },
      // Each upload above is recorded when it returns (never answered `verifying`): nothing to wait for.
      awaitVerified: async () => undefined,
    } as unknown as Client;
    expect(await uploadPendingFiles(client, "lp_x", loaded?.files, () => undefined)).toEqual([]);
    expect(uploaded).toEqual(["profile/unit.cpuprofile"]);
    const changed = { dir: path.join(dir, "files"), refs: [profile, { ...profile, name: "profile/gone.cpuprofile" }] };
    writeFileSync(path.join(dir, "files", "profile", "unit.cpuprofile"), '{"nodes":[1]}');
    expect(await uploadPendingFiles(client, "lp_x", changed, () => undefined)).toEqual(["profile/gone.cpuprofile", "profile/unit.cpuprofile"]);
    // Nothing matched, nothing kept.
    expect(await stageBaselineFiles(repo, "flags", tmp, ["nothing/*.bin"])).toBeUndefined();
  });

  it("leave out a t0 file whose path is too long to name, and refuse globs matching more files than are stored", async () => {
    const repo = path.join(tmp, "limits");
    const clone = path.join(tmp, "limits-clone");
    const deep = path.join("out", "d".repeat(120), "e".repeat(90));
    mkdirSync(path.join(clone, deep), { recursive: true });
    writeFileSync(path.join(clone, "out", "short.csv"), "a,b\n");
    writeFileSync(path.join(clone, deep, "long.csv"), "a,b\n");
    const staged = await stageBaselineFiles(repo, "loop.yaml", clone, ["out/**/*.csv"]);
    expect(staged?.refs.map((ref) => ref.name)).toEqual(["out/short.csv"]);

    mkdirSync(path.join(clone, "many"), { recursive: true });
    for (let index = 0; index < 1001; index++) writeFileSync(path.join(clone, "many", `${index}.txt`), "");
    await expect(stageBaselineFiles(repo, "loop.yaml", clone, ["many/*.txt"])).rejects.toThrow(/at t0, the contract's artifacts globs match 1001 files/);
  });

  it("a request file a crash left torn is no creation, not an error", async () => {
    const dir = path.join(tmp, ".loopwarden", "creating", "loop.yaml");
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, "request.json"), JSON.stringify(request).slice(0, 40));
    expect(await loadPendingCreate(tmp, "loop.yaml")).toBeNull();
  });
});
