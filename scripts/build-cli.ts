// `npm run build:cli` (also run by `npm ci` and `npm pack` as part of `prepare`): bundles the runner CLI
// to JavaScript in dist/cli/ with esbuild, so an installed package runs without a TypeScript loader.
// Dependencies stay external (they are the package's runtime dependencies); the commands, loaded lazily,
// become chunks of their own. A source checkout runs runner/src through tsx instead (runner/bin).
import { rm } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const outdir = path.join(root, "dist", "cli");
await rm(outdir, { recursive: true, force: true });
await build({
  entryPoints: [path.join(root, "runner", "src", "main.ts")],
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  packages: "external",
  outdir,
  legalComments: "none",
  logLevel: "warning",
});
process.stderr.write(`built ${path.join(outdir, "main.js")}\n`);
