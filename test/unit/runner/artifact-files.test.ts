import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  boundedErrors,
  contentTypeOf,
  evidenceOf,
  evidenceRefusal,
  fileRefusal,
  inlineLogs,
  matchArtifacts,
  MAX_ARTIFACT_FILES,
  storeLog,
  storeReportFiles,
  uploadArtifactFiles,
} from "../../../runner/src/evaluation/artifact-files.js";
import { CoordinatorError, type Client } from "../../../runner/src/coordinator/client.js";
import { sha256Hex } from "#shared/hash.js";
import { INLINE_EVIDENCE_MAX_BYTES, INLINE_EVIDENCE_MAX_FILES, INLINE_EVIDENCE_TOTAL_BYTES } from "#shared/wire/api.js";
import { ArtifactError, MAX_ARTIFACT_ERRORS, type ArtifactRef } from "#shared/wire/observation.js";
import { MetricLog } from "../../../runner/src/evaluation/sampling.js";
import { tempDir } from "../../support/cli.js";

// Which files an evaluation stores (DESIGN §10): what the contract's globs match in the clone — never a
// symbolic link an agent planted to reach elsewhere on the machine, never git's own files.

const tmp = tempDir("artifact-files");
afterAll(() => tmp.cleanup());

function tree(name: string, files: Record<string, string>): string {
  const dir = path.join(tmp.dir, name);
  for (const [file, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    writeFileSync(path.join(dir, file), content);
  }
  return dir;
}

describe("matchArtifacts", () => {
  it("matches the globs against paths relative to the clone, sorted, dot files included", async () => {
    const dir = tree("globs", {
      "profile/b.cpuprofile": "{}",
      "profile/a.cpuprofile": "{}",
      "profile/notes.txt": "x",
      "bench/out/.hidden.csv": "1",
      "src/app.js": "",
    });
    expect(await matchArtifacts(dir, ["profile/*.cpuprofile", "bench/**/*.csv"])).toEqual([
      "bench/out/.hidden.csv",
      "profile/a.cpuprofile",
      "profile/b.cpuprofile",
    ]);
    expect(await matchArtifacts(dir, [])).toEqual([]);
  });

  it("never takes a symbolic link (it could point anywhere on the machine) nor anything under .git", async () => {
    const dir = tree("links", { "out/real.json": "{}", ".git/config": "[core]", "secret.txt": "not for the coordinator" });
    symlinkSync(path.join(dir, "secret.txt"), path.join(dir, "out", "planted.json"));
    symlinkSync("/etc", path.join(dir, "out", "etc"));
    expect(await matchArtifacts(dir, ["out/**", ".git/**", "**/config"])).toEqual(["out/real.json"]);
  });

  it("refuses globs that match more files than one evaluation stores, saying so", async () => {
    const files = Object.fromEntries(Array.from({ length: MAX_ARTIFACT_FILES + 1 }, (_, index) => [`many/f${index}.log`, ""]));
    const dir = tree("many", files);
    await expect(matchArtifacts(dir, ["many/*.log"])).rejects.toThrow(/match 1001 files; at most 1000/);
  });

  it("labels files by extension, never by content", () => {
    expect(contentTypeOf("profile/x.cpuprofile")).toBe("application/json");
    expect(contentTypeOf("flame.SVG")).toBe("image/svg+xml");
    expect(contentTypeOf("a.out")).toBe("application/octet-stream");
  });
});

/**
 * A client that stores what is at most `limit` bytes (refusing the rest as the coordinator does, 413) and
 * hears each upload's progress as `progressSteps` pieces.
 */
function stubClient(
  limit: number,
  options: { progressSteps?: number; refuse?: (name: string) => CoordinatorError | null; failVerification?: (name: string) => boolean } = {},
) {
  const stored: string[] = [];
  const refusal = (name: string, size: number) =>
    options.refuse?.(name) ??
    (size > limit ? new CoordinatorError(413, "artifact_too_large", `artifacts are limited to ${limit} bytes; this one is ${size}`) : null);
  const client = {
    async uploadArtifact(_loop: string, name: string, bytes: Uint8Array, contentType: string): Promise<ArtifactRef> {
      const refused = refusal(name, bytes.byteLength);
      if (refused) throw refused;
      stored.push(name);
      return { sha256: sha256Hex(bytes), size: bytes.byteLength, name, content_type: contentType };
    },
    async uploadArtifactFile(_loop: string, file: string, name: string, contentType: string, onProgress?: (sent: number, total: number) => void) {
      const bytes = readFileSync(file);
      const refused = refusal(name, bytes.byteLength);
      if (refused) throw refused;
      const steps = options.progressSteps ?? 1;
      for (let step = 1; step <= steps; step++) onProgress?.(Math.round((bytes.byteLength * step) / steps), bytes.byteLength);
      stored.push(name);
      return { sha256: sha256Hex(bytes), size: bytes.byteLength, name, content_type: contentType };
    },
    /** The coordinator's check after the answer: failed, it deleted the object (issue 30). */
    async awaitVerified(_loop: string, ref: ArtifactRef): Promise<void> {
      if (options.failVerification?.(ref.name)) {
        stored.splice(stored.indexOf(ref.name), 1);
        throw new CoordinatorError(400, "digest_mismatch", `the coordinator found that the stored ${ref.name} does not hash to ${ref.sha256}, and deleted it`);
      }
    },
  };
  return { client: client as unknown as Client, stored };
}

// What an agent makes the globs match is evidence, never the end of the job: a refusal is noted, warned
// about, and the rest is stored.
describe("storing an evaluation's files", () => {
  it("a file refused for its size or the loop's quota is noted with the coordinator's reason; the others are stored", async () => {
    const dir = tree("refused", { "out/small.txt": "ok", "out/big.bin": "x".repeat(2_000), "out/over-quota.csv": "1,2" });
    const { client, stored } = stubClient(1_000, {
      refuse: (name) => (name === "out/over-quota.csv" ? new CoordinatorError(507, "quota_exceeded", "this loop's artifacts may take 10 bytes") : null),
    });
    const warnings: string[] = [];
    const result = await storeReportFiles(client, "lp_x", { dir, globs: ["out/**"], metricLog: null, note: () => {}, warn: (text) => warnings.push(text) });
    expect(result.refs.map((ref) => ref.name)).toEqual(["out/small.txt"]);
    expect(stored).toEqual(["out/small.txt"]);
    expect(result.errors).toEqual([
      {
        name: "out/big.bin",
        size: 2_000,
        code: "artifact_too_large",
        detail: "the coordinator refused it: artifacts are limited to 1000 bytes; this one is 2000",
      },
      { name: "out/over-quota.csv", size: 3, code: "quota_exceeded", detail: "the coordinator refused it: this loop's artifacts may take 10 bytes" },
    ]);
    for (const error of result.errors) expect(ArtifactError.parse(error)).toEqual(error);
    expect(warnings).toEqual([
      "out/big.bin (2.0 KiB): the coordinator refused it: artifacts are limited to 1000 bytes; this one is 2000",
      "out/over-quota.csv (3 B): the coordinator refused it: this loop's artifacts may take 10 bytes",
    ]);
  });

  it("a file whose stored bytes the coordinator's check after the upload found wrong is noted, not cited; the others are", async () => {
    const dir = tree("unverified", { "out/kept.txt": "ok", "out/swapped.bin": "bytes" });
    const { client, stored } = stubClient(1_000, { failVerification: (name) => name === "out/swapped.bin" });
    const result = await storeReportFiles(client, "lp_x", { dir, globs: ["out/**"], metricLog: null, note: () => {}, warn: () => {} });
    expect(result.refs.map((ref) => ref.name)).toEqual(["out/kept.txt"]);
    expect(stored).toEqual(["out/kept.txt"]);
    expect(result.errors).toEqual([{ name: "out/swapped.bin", size: 5, code: "digest_mismatch", detail: expect.stringContaining("does not hash to") }]);
  });

  it("a file whose bytes or size changed while it was sent is the file's refusal, named by the coordinator's code", () => {
    for (const code of ["digest_mismatch", "size_mismatch", "length_mismatch"]) {
      expect(fileRefusal(new CoordinatorError(400, code, "not what was declared")), code).toEqual({
        code,
        detail: "it changed while it was uploaded: not what was declared",
      });
    }
    expect(fileRefusal(new CoordinatorError(400, "invalid_request", "no"))).toBeNull();
  });

  it("globs that match more files than one evaluation stores are noted, none stored, and the report goes on", async () => {
    const dir = tree("too-many", Object.fromEntries(Array.from({ length: MAX_ARTIFACT_FILES + 1 }, (_, index) => [`many/f${index}.log`, ""])));
    const { client, stored } = stubClient(1_000);
    const warnings: string[] = [];
    const metricLog = new TextEncoder().encode("METRIC ms=1\n");
    const result = await storeReportFiles(client, "lp_x", { dir, globs: ["many/*.log"], metricLog, note: () => {}, warn: (text) => warnings.push(text) });
    expect(stored).toEqual(["metric.log"]);
    expect(result.refs.map((ref) => ref.name)).toEqual(["metric.log"]);
    expect(result.errors).toEqual([
      { name: "*", code: "too_many_files", detail: expect.stringMatching(/match 1001 files; at most 1000 .*; none was stored$/) },
    ]);
    expect(warnings).toEqual([expect.stringMatching(/^the artifacts globs: the contract's artifacts globs match 1001 files/)]);
  });

  it("a path too long to name a file by is noted, never sent", async () => {
    const long = `${"d".repeat(120)}/${"f".repeat(120)}.txt`;
    const dir = tree("long", { [long]: "x" });
    const { client, stored } = stubClient(1_000);
    const result = await uploadArtifactFiles(client, "lp_x", dir, [long], () => {});
    expect(stored).toEqual([]);
    expect(result.errors).toEqual([{ name: expect.stringMatching(/^….{199}$/u), code: "name_too_long", detail: expect.stringContaining("200 characters") }]);
    expect(ArtifactError.safeParse(result.errors[0]).success).toBe(true);
  });

  it("an error that is not the file's (the coordinator unreachable, a 500) is the job's: it is thrown", async () => {
    const dir = tree("unreachable", { "out/a.txt": "a" });
    const { client } = stubClient(1_000, { refuse: () => new CoordinatorError(500, "internal_error", "boom") });
    await expect(storeReportFiles(client, "lp_x", { dir, globs: ["out/**"], metricLog: null, note: () => {}, warn: () => {} })).rejects.toMatchObject({
      status: 500,
    });
  });

  it("a log refused whole is stored as its tail, headed by a line that says so; refused even then, not at all", async () => {
    const log = new TextEncoder().encode(`${"early line\n".repeat(20_000)}the last line\n`);
    const { client } = stubClient(70 * 1024);
    const kept = await storeLog(client, "lp_x", "gate-unit.log", log, "text/plain; charset=utf-8");
    expect(kept.ref?.size).toBeLessThanOrEqual(70 * 1024);
    expect(kept.error).toMatchObject({
      name: "gate-unit.log",
      size: log.byteLength,
      code: "artifact_too_large",
      detail: expect.stringMatching(/its last 65536 bytes were stored instead$/),
    });
    const { client: tiny } = stubClient(100);
    const lost = await storeLog(tiny, "lp_x", "gate-unit.log", log, "text/plain; charset=utf-8");
    expect(lost.ref).toBeNull();
    expect(lost.error?.detail).toMatch(/not even its last 4096 bytes could be stored$/);
  });

  it("a large file's upload prints a progress line every tenth, not only at its end", async () => {
    const dir = tree("large", { "profile/big.bin": "x" });
    // The client is a stub that reports a 20 MiB upload piece by piece (the file on disk is a byte).
    const notes: string[] = [];
    const client = {
      async uploadArtifactFile(_loop: string, _file: string, name: string, contentType: string, onProgress?: (sent: number, total: number) => void) {
        const total = 20 * 1024 * 1024;
        for (let sent = 64 * 1024; sent < total; sent += 64 * 1024) onProgress?.(sent, total);
        onProgress?.(total, total);
        onProgress?.(total, total);
        return { sha256: "0".repeat(64), size: total, name, content_type: contentType };
      },
      async awaitVerified() {},
    } as unknown as Client;
    await uploadArtifactFiles(client, "lp_x", dir, ["profile/big.bin"], (text) => notes.push(text));
    expect(notes.length).toBeGreaterThanOrEqual(9);
    expect(notes.length).toBeLessThanOrEqual(11);
    expect(notes.at(-1)).toBe("uploading profile/big.bin: 100% of 20.0 MiB");
    expect(new Set(notes).size).toBe(notes.length);
  });

  it("keeps at most MAX_ARTIFACT_ERRORS entries, the last counting the rest", () => {
    const errors = Array.from({ length: MAX_ARTIFACT_ERRORS + 10 }, (_, index) => ({ name: `f${index}`, code: "artifact_too_large", detail: "refused" }));
    const bounded = boundedErrors(errors);
    expect(bounded).toHaveLength(MAX_ARTIFACT_ERRORS);
    expect(bounded.at(-1)).toEqual({ name: "*", code: "more", detail: "and 11 more files were not stored as they were" });
  });
});

describe("MetricLog", () => {
  it("keeps each reading's output under its label, and only the last MiB of a long comparison", () => {
    const log = new MetricLog();
    expect(log.isEmpty).toBe(true);
    log.add("pair 1, best-so-far: exit 0", Buffer.from("METRIC ms=12"));
    expect(new TextDecoder().decode(log.bytes())).toBe("--- pair 1, best-so-far: exit 0\nMETRIC ms=12\n");
    for (let pair = 2; pair < 400; pair++) log.add(`pair ${pair}, candidate: exit 0`, Buffer.from("x".repeat(4_000)));
    const text = new TextDecoder().decode(log.bytes());
    expect(text.length).toBeLessThanOrEqual(MetricLog.MAX_BYTES + 100);
    expect(text.startsWith("[earlier output cut]\n")).toBe(true);
    expect(text).toContain("pair 399, candidate");
  });
});

describe("a report's inline evidence", () => {
  const log = (name: string, bytes: Uint8Array) => ({
    ref: { sha256: sha256Hex(bytes), size: bytes.byteLength, name, content_type: "text/plain; charset=utf-8" },
    bytes: Buffer.from(bytes),
  });
  const filled = (size: number, byte: number) => new Uint8Array(size).fill(byte);
  const taking = { acceptsEvidence: true } as unknown as Client;

  it("carries small logs inline, each digest once, within the wire's limits; uploads the rest first", () => {
    const small = log("gate-unit.log", filled(100, 1));
    const same = log("gate-again.log", filled(100, 1));
    const large = log("gate-big.log", filled(INLINE_EVIDENCE_MAX_BYTES + 1, 2));
    const { inline, uploaded } = inlineLogs(taking, [small, same, large]);
    expect(inline.map((entry) => entry.ref.name)).toEqual(["gate-unit.log"]);
    expect(uploaded.map((entry) => entry.ref.name)).toEqual(["gate-big.log"]);
    expect(evidenceOf(inline)).toEqual([{ sha256: small.ref.sha256, base64: Buffer.from(small.bytes).toString("base64") }]);
    expect(evidenceOf([])).toBeUndefined();

    // Past the total, or the count, the rest are uploaded.
    const many = Array.from({ length: INLINE_EVIDENCE_MAX_FILES + 2 }, (_, index) => log(`gate-${index}.log`, filled(10, index + 10)));
    expect(inlineLogs(taking, many).inline).toHaveLength(INLINE_EVIDENCE_MAX_FILES);
    const big = Array.from({ length: 5 }, (_, index) => log(`gate-${index}.log`, filled(INLINE_EVIDENCE_MAX_BYTES, index + 20)));
    const split = inlineLogs(taking, big);
    expect(split.inline.reduce((sum, entry) => sum + entry.bytes.byteLength, 0)).toBeLessThanOrEqual(INLINE_EVIDENCE_TOTAL_BYTES);
    expect(split.inline.length + split.uploaded.length).toBe(5);
  });

  it("uploads everything first to a coordinator that takes no inline evidence (S3 mode, or one that refused it)", () => {
    const small = log("gate-unit.log", filled(100, 1));
    expect(inlineLogs({ acceptsEvidence: false } as unknown as Client, [small])).toEqual({ inline: [], uploaded: [small] });
  });

  it("tells a refusal of the evidence (sent again, uploaded first) from a refusal of the report", () => {
    expect(evidenceRefusal(new CoordinatorError(409, "upload_to_storage", "S3 mode"))).toBe("not_taken");
    // An older coordinator's schema has no `evidence`.
    expect(evidenceRefusal(new CoordinatorError(400, "invalid_request", "the request body does not match the schema"))).toBe("not_taken");
    for (const [status, code] of [
      [507, "quota_exceeded"],
      [413, "artifact_too_large"],
      [413, "evidence_too_large"],
      [409, "size_conflict"],
    ] as const) {
      expect(evidenceRefusal(new CoordinatorError(status, code, "refused")), code).toBe("not_stored");
    }
    // A lease lost, a halted loop, a server error: the report's own fate, not the evidence's.
    for (const [status, code] of [
      [409, "stale_fencing_token"],
      [409, "loop_halted"],
      [500, "internal_error"],
    ] as const) {
      expect(evidenceRefusal(new CoordinatorError(status, code, "refused")), code).toBeNull();
    }
    expect(evidenceRefusal(new Error("cannot reach the coordinator"))).toBeNull();
  });
});
