import { lstatSync, readdirSync } from "node:fs";
import path from "node:path";

// Disk figures for the install test and bench:install (no test-runner imports, so a bench can use it).

/** Bytes under a directory; symbolic links (node_modules/.bin) count as what they are, not what they point at. */
export function directorySize(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    total += entry.isDirectory() ? directorySize(file) : lstatSync(file).size;
  }
  return total;
}
