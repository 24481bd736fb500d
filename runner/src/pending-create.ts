import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { CreateLoopRequest } from "../../shared/wire/api.js";
import type { ArtifactRef } from "../../shared/wire/observation.js";
import type { Evaluation } from "./evaluate.js";

// A loop's creation, kept on disk from before its request is sent until the loop is recorded in the
// workspace (DESIGN §6.6). A runner killed in between sends the very same request again — the same
// idempotency key and bytes — so the coordinator answers the loop it already created instead of a second
// one being made and the first left running with nobody to follow it.

/** A creation in flight: the request as sent, and the baseline's gate logs still to upload. */
export interface PendingCreate {
  request: CreateLoopRequest;
  logs: Evaluation["logs"];
}

function dirOf(repo: string, source: string): string {
  return path.join(repo, ".loopwarden", "creating", encodeURIComponent(source));
}

/** Keeps a creation on disk before its request is sent. */
export async function savePendingCreate(repo: string, source: string, pending: PendingCreate): Promise<void> {
  const dir = dirOf(repo, source);
  await rm(dir, { recursive: true, force: true });
  await mkdir(path.join(dir, "logs"), { recursive: true });
  for (const [index, log] of pending.logs.entries()) {
    await writeFile(path.join(dir, "logs", `${index}.json`), JSON.stringify(log.ref));
    await writeFile(path.join(dir, "logs", `${index}.bin`), log.bytes);
  }
  // The request last, and whole (write, then rename): its presence says the rest is complete.
  await writeFile(path.join(dir, "request.json.tmp"), JSON.stringify(pending.request));
  await rename(path.join(dir, "request.json.tmp"), path.join(dir, "request.json"));
}

/** The creation of a contract source left in flight by an interrupted runner, or null. */
export async function loadPendingCreate(repo: string, source: string): Promise<PendingCreate | null> {
  const dir = dirOf(repo, source);
  const text = await readFile(path.join(dir, "request.json"), "utf8").catch(() => null);
  if (text === null) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return null;
  }
  const parsed = CreateLoopRequest.safeParse(json);
  if (!parsed.success) return null;
  const names = (await readdir(path.join(dir, "logs")).catch((): string[] => [])).filter((name) => name.endsWith(".json")).sort();
  const logs: Evaluation["logs"] = [];
  for (const name of names) {
    const ref = JSON.parse(await readFile(path.join(dir, "logs", name), "utf8")) as ArtifactRef;
    logs.push({ ref, bytes: await readFile(path.join(dir, "logs", name.replace(/\.json$/, ".bin"))) });
  }
  return { request: parsed.data, logs };
}

/** Forgets a creation once its loop is recorded (or when it no longer applies). */
export async function clearPendingCreate(repo: string, source: string): Promise<void> {
  await rm(dirOf(repo, source), { recursive: true, force: true });
}
