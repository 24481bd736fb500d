import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { contentTypeOf, matchArtifacts, MAX_ARTIFACT_FILES } from "../../../runner/src/artifact-files.js";
import { MetricLog } from "../../../runner/src/sampling.js";
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
