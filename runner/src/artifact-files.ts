import { lstat, readdir } from "node:fs/promises";
import path from "node:path";
import picomatch from "picomatch";
import type { ArtifactRef } from "../../shared/wire/observation.js";
import type { Client } from "./client.js";

// The contract's `artifacts` globs (DESIGN §5, §10): after each evaluation, the files they match in the
// candidate's clone — profiles, flame graphs, benchmark CSVs — are stored with the loop's artifacts by
// digest and named in the observation, so `loopwarden artifacts` and the receipt can point at them.

/** The most files one evaluation stores; a glob that matches more is a mistake worth a clear limit. */
export const MAX_ARTIFACT_FILES = 1_000;
/** Files larger than this get a progress line while they upload. */
const PROGRESS_ABOVE_BYTES = 8 * 1024 * 1024;
/** Uploads at a time. */
const CONCURRENCY = 4;

const CONTENT_TYPES: Record<string, string> = {
  ".json": "application/json",
  ".cpuprofile": "application/json",
  ".heapprofile": "application/json",
  ".svg": "image/svg+xml",
  ".html": "text/html",
  ".csv": "text/csv",
  ".tsv": "text/tab-separated-values",
  ".txt": "text/plain; charset=utf-8",
  ".log": "text/plain; charset=utf-8",
  ".md": "text/markdown",
  ".png": "image/png",
};

/** A file's media type by its extension: a label for listings (the coordinator never renders by it). */
export function contentTypeOf(file: string): string {
  return CONTENT_TYPES[path.extname(file).toLowerCase()] ?? "application/octet-stream";
}

/**
 * The files under `dir` that the globs match, as sorted paths relative to it: regular files only — a
 * symbolic link is never followed (it could point anywhere on the machine) — and nothing under `.git`.
 */
export async function matchArtifacts(dir: string, globs: readonly string[]): Promise<string[]> {
  if (globs.length === 0) return [];
  const matches = picomatch([...globs], { dot: true });
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  const files: string[] = [];
  for (const entry of entries) {
    if (!entry.isFile()) continue;
    const relative = path.relative(dir, path.join(entry.parentPath, entry.name)).split(path.sep).join("/");
    if (relative === ".git" || relative.startsWith(".git/") || !matches(relative)) continue;
    if ((await lstat(path.join(dir, relative))).isSymbolicLink()) continue;
    files.push(relative);
  }
  files.sort();
  if (files.length > MAX_ARTIFACT_FILES) {
    throw new Error(`the contract's artifacts globs match ${files.length} files; at most ${MAX_ARTIFACT_FILES} are stored per evaluation — narrow them`);
  }
  return files;
}

/** Uploads the matched files (a few at a time; a progress line for large ones) and answers their references. */
export async function uploadArtifactFiles(
  client: Client,
  loopId: string,
  dir: string,
  files: readonly string[],
  note: (text: string) => void,
): Promise<ArtifactRef[]> {
  const refs: ArtifactRef[] = new Array<ArtifactRef>(files.length);
  let next = 0;
  const worker = async () => {
    for (let index = next++; index < files.length; index = next++) {
      const file = files[index] ?? "";
      let shown = 0;
      refs[index] = await client.uploadArtifactFile(loopId, path.join(dir, file), file, contentTypeOf(file), (sent, total) => {
        if (total <= PROGRESS_ABOVE_BYTES || (sent < total && sent - shown < total / 10)) return;
        shown = sent;
        note(`uploading ${file}: ${Math.round((sent / total) * 100)}% of ${(total / 1024 / 1024).toFixed(1)} MiB`);
      });
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, files.length) }, worker));
  return refs;
}
