import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { constants, copyFile, lstat, mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import * as z from "zod";
import { CreateLoopRequest } from "#shared/wire/api.js";
import { ArtifactRef } from "#shared/wire/observation.js";
import { UserError } from "../errors.js";
import { MAX_NAME_LENGTH, TooManyArtifactFiles, contentTypeOf, matchArtifacts, uploadArtifactFiles } from "../evaluation/artifact-files.js";
import type { Client } from "../coordinator/client.js";
import type { Evaluation } from "../evaluation/evaluation.js";
import { readJsonFile } from "./json-file.js";

// A loop's creation, kept on disk from before its request is sent until the loop is recorded in the
// workspace (DESIGN §6.6). A runner killed in between sends the very same request again — the same
// idempotency key and bytes — so the coordinator answers the loop it already created instead of a second
// one being made and the first left running with nobody to follow it. What t0's request cites is kept
// with it, to be uploaded once the loop exists (artifacts are scoped to a loop): the gate logs and the
// metric command's output as bytes, and the files the contract's `artifacts` globs matched in t0's clone
// as copies, made before the clone is removed.

/** The baseline's files (the contract's `artifacts` matched in t0's clone), copied out of the clone. */
export interface PendingFiles {
  /** Where the copies are: each at its path in the clone, which is also its name. */
  dir: string;
  /** Each file's reference, as t0's observation cites it: digest and size of the copy. */
  refs: ArtifactRef[];
}

/** A creation in flight: the request as sent, and what t0's observation cites, still to upload. */
export interface PendingCreate {
  request: CreateLoopRequest;
  /** The gate logs and, in optimize mode, the metric command's output (`metric.log`). */
  logs: Evaluation["logs"];
  /** The baseline's files, when the contract's globs matched any. */
  files?: PendingFiles;
}

function dirOf(repo: string, source: string): string {
  return path.join(repo, ".loopwarden", "creating", encodeURIComponent(source));
}

/** Where a baseline's files are copied while it is measured, before its creation is saved (and moved into it). */
function stagingDirOf(repo: string, source: string): string {
  return path.join(repo, ".loopwarden", "t0-files", encodeURIComponent(source));
}

/**
 * Copies the files the contract's `artifacts` globs match in t0's clone (`cloneDir`) out of it, for the
 * creation of `source` to keep until they are uploaded, and answers their references (the copies'
 * digests). Undefined when the globs match nothing.
 */
export async function stageBaselineFiles(repo: string, source: string, cloneDir: string, globs: readonly string[]): Promise<PendingFiles | undefined> {
  const dir = stagingDirOf(repo, source);
  await rm(dir, { recursive: true, force: true });
  // At t0 the globs match the user's own commit: too many files is the contract's to fix, said plainly;
  // a path too long to name is left out, as a candidate's would be.
  const files = (
    await matchArtifacts(cloneDir, globs).catch((error: unknown) => {
      if (error instanceof TooManyArtifactFiles) throw new UserError(`at t0, ${error.message}`);
      throw error;
    })
  ).filter((file) => file.length <= MAX_NAME_LENGTH);
  if (files.length === 0) return undefined;
  const refs: ArtifactRef[] = [];
  for (const file of files) {
    const copy = path.join(dir, file);
    await mkdir(path.dirname(copy), { recursive: true });
    // A copy-on-write clone where the file system has them, a plain copy elsewhere.
    await copyFile(path.join(cloneDir, file), copy, constants.COPYFILE_FICLONE);
    const hash = createHash("sha256");
    let size = 0;
    for await (const chunk of createReadStream(copy)) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    refs.push({ sha256: hash.digest("hex"), size, name: file, content_type: contentTypeOf(file) });
  }
  return { dir, refs };
}

/**
 * Keeps a creation on disk before its request is sent, and answers it as kept: its staged files are moved
 * in with it (and found there from then on).
 */
export async function savePendingCreate(repo: string, source: string, pending: PendingCreate): Promise<PendingCreate> {
  const dir = dirOf(repo, source);
  await rm(dir, { recursive: true, force: true });
  await mkdir(path.join(dir, "logs"), { recursive: true });
  for (const [index, log] of pending.logs.entries()) {
    await writeFile(path.join(dir, "logs", `${index}.json`), JSON.stringify(log.ref));
    await writeFile(path.join(dir, "logs", `${index}.bin`), log.bytes);
  }
  let files: PendingFiles | undefined;
  if (pending.files) {
    files = { dir: path.join(dir, "files"), refs: pending.files.refs };
    await rename(pending.files.dir, files.dir);
    await writeFile(path.join(dir, "files.json"), JSON.stringify(files.refs));
  }
  // The request last, and whole (write, then rename): its presence says the rest is complete.
  await writeFile(path.join(dir, "request.json.tmp"), JSON.stringify(pending.request));
  await rename(path.join(dir, "request.json.tmp"), path.join(dir, "request.json"));
  return { request: pending.request, logs: pending.logs, ...(files ? { files } : {}) };
}

/** The creation of a contract source left in flight by an interrupted runner, or null. */
export async function loadPendingCreate(repo: string, source: string): Promise<PendingCreate | null> {
  const dir = dirOf(repo, source);
  const request = await readJsonFile(path.join(dir, "request.json"), CreateLoopRequest);
  if (!request) return null;
  const names = (await readdir(path.join(dir, "logs")).catch((): string[] => [])).filter((name) => name.endsWith(".json")).sort();
  const logs: Evaluation["logs"] = [];
  for (const name of names) {
    const ref = JSON.parse(await readFile(path.join(dir, "logs", name), "utf8")) as ArtifactRef;
    logs.push({ ref, bytes: await readFile(path.join(dir, "logs", name.replace(/\.json$/, ".bin"))) });
  }
  // Written before the request, so whole when the request is there; none (an older runner's creation) is none to upload.
  const refs = await readFile(path.join(dir, "files.json"), "utf8")
    .then((text) => z.array(ArtifactRef).parse(JSON.parse(text)))
    .catch(() => null);
  return { request, logs, ...(refs ? { files: { dir: path.join(dir, "files"), refs } } : {}) };
}

/**
 * Uploads a creation's files to its loop (once it exists) and answers the names of those that could not
 * be stored as t0 cites them: a copy gone from disk, or whose bytes no longer hash to the digest recorded.
 */
export async function uploadPendingFiles(client: Client, loopId: string, files: PendingFiles | undefined, note: (text: string) => void): Promise<string[]> {
  if (!files) return [];
  const present: ArtifactRef[] = [];
  const lost: string[] = [];
  for (const ref of files.refs) {
    if ((await lstat(path.join(files.dir, ref.name)).catch(() => null))?.isFile()) present.push(ref);
    else lost.push(ref.name);
  }
  const stored = await uploadArtifactFiles(
    client,
    loopId,
    files.dir,
    present.map((ref) => ref.name),
    note,
  );
  // Refused (its size, the quota), unreadable, or no longer the bytes t0 cites: not stored as t0 cites it.
  const storedAs = new Map(stored.refs.map((ref) => [ref.name, ref.sha256]));
  return [...lost, ...present.filter((ref) => storedAs.get(ref.name) !== ref.sha256).map((ref) => ref.name)];
}

/** Forgets a creation once its loop is recorded (or when it no longer applies). */
export async function clearPendingCreate(repo: string, source: string): Promise<void> {
  await rm(dirOf(repo, source), { recursive: true, force: true });
  await rm(stagingDirOf(repo, source), { recursive: true, force: true });
}
