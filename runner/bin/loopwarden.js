#!/usr/bin/env node
// The `loopwarden` binary. `--version` is answered from package.json before anything else loads, so
// scripts that probe for the tool pay no start-up cost; everything else runs the TypeScript CLI
// through tsx's loader, without a build step.
const args = process.argv.slice(2);
if (args.length === 1 && (args[0] === "--version" || args[0] === "-V")) {
  const { readFileSync } = await import("node:fs");
  const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  process.stdout.write(`${manifest.version}\n`);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/main.ts");
}
