import { mkdirSync } from "node:fs";
import path from "node:path";
import { makeRepo } from "./cli.js";

/** The check's marker, left in its clone when it holds, and the file the test writes there to release it. */
export const LEVEL_HOLD = { started: "check.started", release: "check.release" } as const;

/**
 * A repository for crash tests. Its agent writes the iteration number to level.txt and its check
 * passes from level 2 on, so iteration 1 is rejected and iteration 2 converges.
 *
 * In a run whose environment has `LEVEL_HOLD=1`, the check of level 1 (the first candidate's
 * evaluation) holds, so a test can crash something while an evaluation is in flight: it writes
 * `check.started` in its own directory (the evaluation clone, the one place the exec zone lets it
 * write; the test finds it under `clonesOf(runner pid)`), then waits until the test writes
 * `check.release` there. Which run holds is the test's to say: a check keeps no state between runs.
 * `check` is the command to run it with: it carries a marker unique to this project, so a test can
 * find the check's processes (`pgrep -f marker`) though their pids in the zone are not the host's.
 */
export function makeLevelProject(dir: string): { repo: string; check: string; marker: string } {
  const marker = `lw-level-${path.basename(dir)}`;
  mkdirSync(dir, { recursive: true });
  const repo = makeRepo(path.join(dir, "repo"), {
    "check.mjs": [
      "import { existsSync, readFileSync, writeFileSync } from 'node:fs';",
      "const level = Number(readFileSync('level.txt', 'utf8'));",
      "if (level === 1 && process.env.LEVEL_HOLD === '1') {",
      `  writeFileSync(${JSON.stringify(LEVEL_HOLD.started)}, String(process.pid));`,
      // Never forever: a hold nobody releases (its runner killed) ends on its own within the test's time.
      "  const until = Date.now() + 170_000;",
      `  while (!existsSync(${JSON.stringify(LEVEL_HOLD.release)}) && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 50));`,
      "}",
      "process.exit(level >= 2 ? 0 : 1);",
    ].join("\n"),
    "level.txt": "0\n",
    "agent.mjs": "import { writeFileSync } from 'node:fs';\nwriteFileSync('level.txt', `${process.env.LOOPWARDEN_ITERATION}\\n`);\n",
  });
  return { repo, check: `node check.mjs ${marker}`, marker };
}
