import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

// The code, the tests and the docs cite the design by number ("DESIGN §6.7", "DESIGN §4.5"), about 450
// times. Those numbers are only worth something if a reader can follow them: every one must name a
// heading of docs/design.md, the design as this repository states it. A renumbered or deleted section,
// or a citation of one that never existed, would leave readers at a dead end without any other test
// noticing. The design once lived in a handbook outside the repository; nothing may point there again.

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const DESIGN = "docs/design.md";
const THIS_TEST = "test/unit/design-citations.test.ts";
// The handbook's path seen from the repository (one directory up, then this) contains it: one search finds both.
const HANDBOOK = "shared/DESIGN.md";
const CITATION = /DESIGN §(\d+(?:\.\d+)?)/g;

/** Every tracked file, as git lists it (a file deleted in the working tree but not yet in git is skipped). */
function trackedFiles(): string[] {
  const listed = execFileSync("git", ["ls-files", "-z"], { cwd: ROOT, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  return listed.split("\0").filter((file) => file !== "" && existsSync(path.join(ROOT, file)));
}

/** Tracked TypeScript and Markdown outside dependencies, build output and generated types: what cites the design. */
function citingSources(files: readonly string[]): string[] {
  return files
    .filter((file) => file.endsWith(".ts") || file.endsWith(".md"))
    .filter((file) => !file.split("/").some((part) => part === "node_modules" || part === "dist"))
    .filter((file) => file !== "worker/worker-configuration.d.ts");
}

function read(file: string): string {
  return readFileSync(path.join(ROOT, file), "utf8");
}

/** The numbers docs/design.md has headings for: `## 6. …` gives "6", `### 6.7 …` gives "6.7". */
function designHeadings(): Set<string> {
  const numbers = new Set<string>();
  for (const line of read(DESIGN).split("\n")) {
    const section = /^## (\d+)\.\s/.exec(line);
    if (section?.[1]) numbers.add(section[1]);
    const subsection = /^### (\d+\.\d+)\s/.exec(line);
    if (subsection?.[1]) numbers.add(subsection[1]);
  }
  return numbers;
}

interface Citation {
  where: string;
  number: string;
}

function citations(files: readonly string[]): Citation[] {
  const found: Citation[] = [];
  for (const file of files) {
    read(file)
      .split("\n")
      .forEach((line, index) => {
        for (const match of line.matchAll(CITATION)) {
          if (match[1]) found.push({ where: `${file}:${index + 1}`, number: match[1] });
        }
      });
  }
  return found;
}

describe("citations of the design (docs/design.md)", () => {
  const tracked = trackedFiles();
  const files = citingSources(tracked);

  it("scans the repository's own sources and docs, the design among them", () => {
    expect(files).toContain(DESIGN);
    expect(files).toContain("shared/engine/decide.ts");
    expect(files.some((file) => file.startsWith("node_modules/") || file.includes("/node_modules/"))).toBe(false);
  });

  it("has a numbered heading for each of the 13 sections, the 3 uses of section 1 and the 9 invariants of section 4", () => {
    const headings = designHeadings();
    const expected = [
      ...Array.from({ length: 13 }, (_, index) => String(index + 1)),
      ...["1.1", "1.2", "1.3"],
      ...Array.from({ length: 9 }, (_, index) => `4.${index + 1}`),
      ...Array.from({ length: 7 }, (_, index) => `6.${index + 1}`),
    ];
    expect(expected.filter((number) => !headings.has(number))).toEqual([]);
  });

  it("resolves every DESIGN § citation to a heading of docs/design.md", () => {
    const headings = designHeadings();
    const found = citations(files);
    // Hundreds of citations exist; finding none would mean the scan, not the docs, is broken.
    expect(found.length).toBeGreaterThan(300);
    const unresolved = found.filter((citation) => !headings.has(citation.number)).map((citation) => `${citation.where}: DESIGN §${citation.number}`);
    expect(unresolved, `citations naming no heading of ${DESIGN}:\n${unresolved.join("\n")}`).toEqual([]);
  });

  it("never points readers at the handbook's copy outside the repository", () => {
    const stale = tracked
      .filter((file) => file !== THIS_TEST)
      .flatMap((file) =>
        read(file)
          .split("\n")
          .flatMap((line, index) => (line.includes(HANDBOOK) ? [`${file}:${index + 1}`] : [])),
      );
    expect(stale, `mentions of ${HANDBOOK} (the design is ${DESIGN} now):\n${stale.join("\n")}`).toEqual([]);
  });
});
