import { mkdirSync } from "node:fs";
import path from "node:path";
import { makeRepo } from "./cli.js";

/**
 * A repository for crash tests. Its agent writes the iteration number to level.txt and its check
 * passes from level 2 on, so iteration 1 is rejected and iteration 2 converges. The check's second run
 * (the first candidate's evaluation) writes its pid to `<signals>/check.pid` and then waits until
 * `<signals>/release` exists, so a test can crash something while an evaluation is in flight.
 * Run the CLI with `LEVEL_SIGNALS=<signals>` in its environment.
 */
export function makeLevelProject(dir: string): { repo: string; signals: string } {
  const signals = path.join(dir, "signals");
  mkdirSync(signals, { recursive: true });
  const repo = makeRepo(path.join(dir, "repo"), {
    "check.mjs": [
      "import { existsSync, readFileSync, writeFileSync } from 'node:fs';",
      "const dir = process.env.LEVEL_SIGNALS;",
      "const runs = existsSync(`${dir}/runs`) ? Number(readFileSync(`${dir}/runs`, 'utf8')) + 1 : 1;",
      "writeFileSync(`${dir}/runs`, String(runs));",
      "if (runs === 2) {",
      "  writeFileSync(`${dir}/check.pid`, String(process.pid));",
      "  while (!existsSync(`${dir}/release`)) await new Promise((resolve) => setTimeout(resolve, 50));",
      "}",
      "process.exit(Number(readFileSync('level.txt', 'utf8')) >= 2 ? 0 : 1);",
    ].join("\n"),
    "level.txt": "0\n",
    "agent.mjs": "import { writeFileSync } from 'node:fs';\nwriteFileSync('level.txt', `${process.env.LOOPWARDEN_ITERATION}\\n`);\n",
  });
  return { repo, signals };
}
