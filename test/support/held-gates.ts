import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { dirsHolding } from "./zone-markers.js";

// Gates a test holds and lets go by candidate (test/e2e/parallel.test.ts): a held gate leaves a marker
// naming its candidate in its evaluation clone, the one directory the exec zone lets it write (DESIGN
// §6.7), and blocks until a second file exists there; the host watches the runners' clones for markers.

/** What a held gate leaves in its clone (naming its candidate), and what the host writes there to let it go on. */
export interface GateFiles {
  started: string;
  go: string;
}

/**
 * The lines of a gate script (ES module) that, when `holding` (a JS expression) is true, publish the
 * marker naming `candidate` (a JS expression) and block until the go file exists. The marker is written
 * under another name and renamed into place: `writeFileSync` creates the file before it writes the
 * name, so a marker the host lists between the two reads empty.
 */
export function holdingGateLines(files: GateFiles, holding: string, candidate: string): string[] {
  const partial = `${files.started}.partial`;
  return [
    "import { existsSync, renameSync, writeFileSync } from 'node:fs';",
    `if (${holding}) {`,
    `  writeFileSync(${JSON.stringify(partial)}, ${candidate});`,
    `  renameSync(${JSON.stringify(partial)}, ${JSON.stringify(files.started)});`,
    `  while (!existsSync(${JSON.stringify(files.go)})) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);`,
    "}",
  ];
}

/**
 * The held gates under some directories of clones (a runner's `clonesOf(pid)` each), seen from the
 * host: every 50 ms it looks for gates that started, records each clone once with the candidate its
 * marker names, and lets go every gate of a released candidate. A clone is removed once its evaluation
 * ends, so the record outlives it: and since every gate of a candidate blocks until this lets it go,
 * none can start and end between two looks and be missed.
 *
 * A marker read empty (one written in place by a gate that does not rename it, listed between its
 * creation and its write) is not recorded: recorded so, its clone would never be released (the gate
 * runs into its timeout and fails) nor counted for its candidate. It is read again at the next look.
 */
export function holdGates(roots: () => string[], files: GateFiles) {
  const runs = new Map<string, string>();
  const released = new Set<string>();
  const look = () => {
    for (const root of roots()) {
      for (const clone of dirsHolding(root, files.started)) {
        try {
          if (!runs.has(clone)) {
            const name = readFileSync(path.join(clone, files.started), "utf8").trim();
            if (name === "") continue;
            runs.set(clone, name);
          }
          if (released.has(runs.get(clone) ?? "")) writeFileSync(path.join(clone, files.go), "");
        } catch {
          // The clone went meanwhile (its evaluation ended after it was let go).
        }
      }
    }
  };
  const timer = setInterval(look, 50);
  return {
    /** The gate runs that started for `candidate` (one clone per run). */
    runs(candidate: string): number {
      look();
      return [...runs.values()].filter((name) => name === candidate).length;
    },
    /** Lets the candidate's gates go on, those running and any to come. */
    release(candidate: string) {
      released.add(candidate);
      look();
    },
    stop: () => clearInterval(timer),
  };
}
