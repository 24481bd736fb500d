// A scripted stand-in for a coding agent: one change per iteration, chosen by LOOPWARDEN_ITERATION.
// Like a real agent it edits the working tree and stops; it never talks to the coordinator and never
// decides whether its change is kept.
import { readFileSync, writeFileSync } from "node:fs";

const FIXES = {
  slugify: [
    `return text.toLowerCase().replace(/[^a-z0-9]/g, "-");`,
    `return text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");`,
  ],
  titleCase: [`return text.replace(/\\b\\w/, (letter) => letter.toUpperCase());`, `return text.replace(/\\b\\w/g, (letter) => letter.toUpperCase());`],
  wordCount: [`return text.split(" ").length;`, `return text.split(/\\s+/).filter(Boolean).length;`],
};

// Iteration 1 fixes one bug: the check still fails, so the coordinator rejects it and the runner reverts.
// Iteration 2 changes nothing. Iteration 3 fixes all three: the check passes and the loop converges.
const PLAN = { 1: ["slugify"], 2: [], 3: ["slugify", "titleCase", "wordCount"] };

const iteration = Number(process.env.LOOPWARDEN_ITERATION ?? "1");
const fixes = PLAN[iteration] ?? PLAN[3];
const file = new URL("./src/text.js", import.meta.url);
let source = readFileSync(file, "utf8");
for (const name of fixes) {
  const [before, after] = FIXES[name];
  source = source.replace(before, after);
}
writeFileSync(file, source);
console.log(`agent (iteration ${iteration}): ${fixes.length ? `fixed ${fixes.join(", ")}` : "made no change"}`);
