import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { holdGates, holdingGateLines } from "../support/held-gates.js";

// The host side of held gates (test/e2e/parallel.test.ts) checked on its own, with the states of a
// clone's marker the e2e test meets only by chance under load.

const FILES = { started: "gate.started", go: "gate.go" } as const;

const made: string[] = [];
function clonesDir(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lw-held-gates-"));
  made.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("holdGates", () => {
  it("a marker listed before its candidate's name is written is recorded once the name is there, and its gate released", () => {
    const root = clonesDir();
    const clone = path.join(root, "ahead-1");
    mkdirSync(clone);
    const gates = holdGates(() => [root], FILES);
    try {
      gates.release("c2");
      // The gate has created its marker and not yet written into it.
      writeFileSync(path.join(clone, FILES.started), "");
      expect(gates.runs("c2")).toBe(0);
      expect(existsSync(path.join(clone, FILES.go))).toBe(false);
      writeFileSync(path.join(clone, FILES.started), "c2\n");
      expect(gates.runs("c2")).toBe(1);
      expect(existsSync(path.join(clone, FILES.go))).toBe(true);
    } finally {
      gates.stop();
    }
  });

  it("counts each clone once per candidate and releases only released candidates, those running and those to come", () => {
    const root = clonesDir();
    const gates = holdGates(() => [root], FILES);
    const start = (name: string, candidate: string) => {
      mkdirSync(path.join(root, name));
      writeFileSync(path.join(root, name, FILES.started), candidate);
      return path.join(root, name);
    };
    try {
      const c1 = start("a", "c1");
      const c2 = start("b", "c2");
      expect([gates.runs("c1"), gates.runs("c2")]).toEqual([1, 1]);
      gates.release("c1");
      expect([existsSync(path.join(c1, FILES.go)), existsSync(path.join(c2, FILES.go))]).toEqual([true, false]);
      // A released clone's evaluation ends and the clone goes: its run stays counted.
      rmSync(c1, { recursive: true });
      gates.release("c2");
      const again = start("c", "c2");
      expect([gates.runs("c1"), gates.runs("c2")]).toEqual([1, 2]);
      expect([existsSync(path.join(c2, FILES.go)), existsSync(path.join(again, FILES.go))]).toEqual([true, true]);
    } finally {
      gates.stop();
    }
  });

  it("the gate's lines publish a complete marker, under its own name only, and go on once the go file exists", () => {
    const clone = clonesDir();
    const script = path.join(clone, "gate.mjs");
    writeFileSync(script, [...holdingGateLines(FILES, "true", "'c1'"), ""].join("\n"));
    writeFileSync(path.join(clone, FILES.go), "");
    execFileSync(process.execPath, [script], { cwd: clone });
    expect(readFileSync(path.join(clone, FILES.started), "utf8")).toBe("c1");
    expect(existsSync(path.join(clone, `${FILES.started}.partial`))).toBe(false);
  });
});
