import { createHash } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

// The local coordinator keeps R2 objects as Miniflare does: each object's bytes in a file of its own under
// `<state>/data/v3/r2/<bucket>/blobs/`, named by an id, not by the key. Tests that damage storage find an
// artifact's file by hashing every blob (artifacts are content-addressed by sha256).

/** Where the artifacts bucket's object bytes are kept under a coordinator's state directory. */
export function blobsDir(stateDir: string): string {
  return path.join(stateDir, "data", "v3", "r2", "loopwarden-artifacts", "blobs");
}

/**
 * Changes one byte of the stored artifact whose bytes hash to `sha256` (same length, so only a digest check
 * can tell); `at` in [0, 1) picks the byte. Answers the blob's file.
 */
export function corruptStoredArtifact(stateDir: string, sha256: string, at = 0): string {
  const dir = blobsDir(stateDir);
  for (const name of readdirSync(dir)) {
    const file = path.join(dir, name);
    const bytes = readFileSync(file);
    if (createHash("sha256").update(bytes).digest("hex") !== sha256) continue;
    const index = Math.floor(at * bytes.length);
    bytes[index] = (bytes[index] ?? 0) ^ 0x20;
    writeFileSync(file, bytes);
    return file;
  }
  throw new Error(`no stored blob hashes to ${sha256} under ${dir}`);
}
