import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { PACKAGE_ROOT } from "./paths.js";

// The local coordinator runs the worker as `wrangler deploy` ships it: the bundle `wrangler deploy
// --dry-run --outdir` writes (DESIGN §12), built once (`npm ci` runs `prepare`) and kept in
// dist/worker/ with a stamp of the sources it was built from. In a source checkout, a coordinator that
// finds the stamp stale (worker or shared code edited since) rebuilds it before starting, so what runs
// is always what the sources say. A coordinator that is running keeps the bundle it loaded (workerd
// read it at start), so a rebuild under it is harmless.

/** Where the bundle lives. */
export const BUNDLE_DIR = path.join(PACKAGE_ROOT, "dist", "worker");
/** The bundle's entry module. */
export const BUNDLE_FILE = path.join(BUNDLE_DIR, "index.js");
const STAMP_FILE = path.join(BUNDLE_DIR, "sources.sha256");

/** The files the bundle is built from, relative to the package root (none in an install without sources). */
async function sourceFiles(): Promise<string[]> {
  const files: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(path.join(PACKAGE_ROOT, dir), { withFileTypes: true }).catch(() => [])) {
      const relative = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(relative);
      else if (/\.(ts|js|mjs|json)$/.test(entry.name)) files.push(relative);
    }
  };
  await walk(path.join("worker", "src"));
  await walk("shared");
  if (files.length > 0) files.push("wrangler.toml", "package.json");
  return files.sort();
}

/** sha256 over the sources' paths and contents: what the stamp records. */
async function sourcesDigest(files: readonly string[]): Promise<string> {
  const hash = createHash("sha256");
  for (const file of files) {
    hash.update(`${file}\0`);
    hash.update(await readFile(path.join(PACKAGE_ROOT, file)));
    hash.update("\0");
  }
  return hash.digest("hex");
}

/** wrangler's own entry script (run with this Node, so it is stopped by its own pid, never through npx). */
export function wranglerBin(): string {
  const require = createRequire(import.meta.url);
  return path.join(path.dirname(require.resolve("wrangler/package.json")), "bin", "wrangler.js");
}

/** Runs `wrangler deploy --dry-run --outdir` into a fresh directory; answers wrangler's output on failure. */
function dryRun(outdir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [wranglerBin(), "deploy", "--dry-run", "--outdir", outdir, "--config", path.join(PACKAGE_ROOT, "wrangler.toml")], {
      cwd: PACKAGE_ROOT,
      // Keep wrangler's config and logs out of the user's home, and its telemetry off.
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", XDG_CONFIG_HOME: path.join(outdir, ".config"), WRANGLER_LOG_PATH: path.join(outdir, ".logs"), CI: "true" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve() : reject(new Error(`wrangler deploy --dry-run exited with ${code}:\n${output.trim().split("\n").slice(-15).join("\n")}`))));
  });
}

/** A build older than this holds no lock (its process died mid-build). */
const LOCK_STALE_MS = 120_000;

/** Runs `build` holding dist/worker.lock (a directory: mkdir is atomic), so one process builds at a time. */
async function withBuildLock<T>(build: () => Promise<T>): Promise<T> {
  const lock = `${BUNDLE_DIR}.lock`;
  await mkdir(path.dirname(lock), { recursive: true });
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch {
      const since = await stat(lock).then((info) => Date.now() - info.mtimeMs, () => 0);
      if (since > LOCK_STALE_MS) await rm(lock, { recursive: true, force: true });
      else await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  try {
    return await build();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

/**
 * Makes sure dist/worker/index.js is the bundle of the current sources, building it when it is missing
 * or stale; answers whether it built. One process builds at a time, into a directory of its own that is
 * then renamed into place.
 */
export async function ensureWorkerBundle(onBuild?: () => void): Promise<boolean> {
  const files = await sourceFiles();
  if (files.length === 0) {
    if (existsSync(BUNDLE_FILE)) return false;
    throw new Error(`the worker bundle ${BUNDLE_FILE} is missing and there are no sources to build it from; reinstall loopwarden`);
  }
  const digest = await sourcesDigest(files);
  const isCurrent = async () => (await readFile(STAMP_FILE, "utf8").catch(() => ""))?.trim() === digest && existsSync(BUNDLE_FILE);
  if (await isCurrent()) return false;
  return withBuildLock(async () => {
    // Another process may have built it while this one waited for the lock.
    if (await isCurrent()) return false;
    onBuild?.();
    const staging = `${BUNDLE_DIR}.build-${process.pid}`;
    await rm(staging, { recursive: true, force: true });
    try {
      await dryRun(staging);
      await rm(path.join(staging, ".config"), { recursive: true, force: true });
      await rm(path.join(staging, ".logs"), { recursive: true, force: true });
      await writeFile(path.join(staging, "sources.sha256"), `${digest}\n`);
      await rm(BUNDLE_DIR, { recursive: true, force: true });
      await rename(staging, BUNDLE_DIR);
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
    return true;
  });
}
