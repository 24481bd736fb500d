#!/usr/bin/env node
// The `loopwarden` binary. `--version` is answered from package.json before anything else loads, so
// scripts that probe for the tool pay no start-up cost. An installed package runs the CLI bundled to
// JavaScript at build time (dist/cli, `npm run build:cli`); a source checkout runs its TypeScript
// through tsx's loader (a dev dependency), so what runs is always what the sources say.
import { existsSync } from "node:fs";

const args = process.argv.slice(2);
if (args.length === 1 && (args[0] === "--version" || args[0] === "-V")) {
  const { readFileSync } = await import("node:fs");
  const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  process.stdout.write(`${manifest.version}\n`);
} else if (existsSync(new URL("../src/main.ts", import.meta.url))) {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/main.ts");
} else {
  await import("../../dist/cli/main.js");
}
