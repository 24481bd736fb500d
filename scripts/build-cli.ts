// `npm run build:cli` (also run by `npm ci` and `npm pack` as part of `prepare`): bundles the runner CLI
// to JavaScript in dist/cli/ with esbuild, so an installed package runs without a TypeScript loader.
// Its dependencies are bundled in too: resolving and loading a few hundred small files from
// node_modules cost about 130 ms at every start of a command (measured on `run`'s chunk: 220–250 ms
// loaded from node_modules, 100 ms bundled), and an installed package then needs none of them. What
// stays external: `miniflare` (the optional local coordinator runtime, with its native workerd) and
// `esbuild` (only a source checkout rebuilds the receipt page). The commands, loaded lazily, become
// chunks of their own. The bundled packages' licenses are written next to the code, in
// THIRD-PARTY-NOTICES.md. A source checkout runs runner/src through tsx instead (runner/bin).
import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build, type Metafile } from "esbuild";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const outdir = path.join(root, "dist", "cli");
const EXTERNAL = ["miniflare", "esbuild"];

/** The license texts of every package bundled from node_modules; a bundled package whose license cannot be named fails the build. */
async function thirdPartyNotices(metafile: Metafile): Promise<string> {
  const packages = new Set<string>();
  for (const input of Object.keys(metafile.inputs)) {
    const match = /(?:^|\/)node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
    if (match?.[1]) packages.add(match[1]);
  }
  const sections: string[] = [];
  for (const name of [...packages].sort()) {
    const dir = path.join(root, "node_modules", name);
    const manifest = JSON.parse(await readFile(path.join(dir, "package.json"), "utf8")) as { version?: string; license?: string };
    const file = (await readdir(dir)).find((entry) => /^licen[cs]e(\.(md|txt))?$/i.test(entry));
    if (!file && !manifest.license) throw new Error(`build:cli: ${name} is bundled into the CLI but names no license`);
    const text = file
      ? (await readFile(path.join(dir, file), "utf8")).trim()
      : `The package ships no license file; its package.json declares: ${manifest.license}.`;
    sections.push(`## ${name} ${manifest.version ?? ""}\n\nLicense: ${manifest.license ?? "see below"}\n\n\`\`\`\n${text}\n\`\`\``);
  }
  return `# Third-party notices\n\nThe loopwarden CLI in this directory bundles the following packages.\n\n${sections.join("\n\n")}\n`;
}

/** Builds dist/cli/ afresh (the e2e tests' global setup calls it too, so they never run a stale CLI). */
export async function buildCli(): Promise<string> {
  await rm(outdir, { recursive: true, force: true });
  const result = await build({
    entryPoints: [path.join(root, "runner", "src", "main.ts")],
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    external: EXTERNAL,
    // Bundled CommonJS packages require Node's built-ins: an ES module has no `require` of its own.
    banner: { js: 'import { createRequire as loopwardenCreateRequire } from "node:module"; const require = loopwardenCreateRequire(import.meta.url);' },
    outdir,
    metafile: true,
    legalComments: "none",
    logLevel: "warning",
  });
  await writeFile(path.join(outdir, "THIRD-PARTY-NOTICES.md"), await thirdPartyNotices(result.metafile));
  return path.join(outdir, "main.js");
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.stderr.write(`built ${await buildCli()}\n`);
}
