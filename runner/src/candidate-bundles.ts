import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { BundleRef } from "../../shared/engine/index.js";
import { sha256Hex } from "../../shared/hash.js";
import type { Lease } from "../../shared/wire/api.js";
import type { Client } from "./client.js";
import { UserError } from "./errors.js";
import { git, GitError, shortCommit } from "./git.js";

// Candidate commits travel as git bundles (DESIGN §10, issue "team-shared loops"): the proposer uploads
// each candidate's commits since the loop's t0 to the loop's artifacts, and a runner in another
// checkout of the repository fetches the bundle and checks the commit id before evaluating. No shared
// git remote is needed; the checkout needs only t0, the commit the loop started from.

/** The ref a bundle carries its commit under (git bundles name refs, not bare commit ids). */
const BUNDLE_REF = "refs/loopwarden/bundle";

/** Media type of a git bundle artifact. */
const BUNDLE_TYPE = "application/x-git-bundle";

/** Bundles `commit` (its commits not reachable from `base`) and uploads it to the loop's artifacts. */
export async function uploadCandidateBundle(client: Client, loopId: string, repo: string, commit: string, base: string): Promise<BundleRef> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "loopwarden-bundle-"));
  try {
    const file = path.join(dir, "candidate.bundle");
    await git(repo, ["update-ref", BUNDLE_REF, commit]);
    await git(repo, ["bundle", "create", "-q", file, BUNDLE_REF, `^${base}`]);
    const bytes = await readFile(file);
    const ref = await client.uploadArtifact(loopId, `candidate-${shortCommit(commit)}.bundle`, bytes, BUNDLE_TYPE);
    return { sha256: ref.sha256, size: ref.size };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function hasCommit(repo: string, commit: string): Promise<boolean> {
  return git(repo, ["cat-file", "-e", `${commit}^{commit}`]).then(
    () => true,
    () => false,
  );
}

/**
 * Makes sure this checkout has the job's commits (the candidate's and the one it is compared with):
 * each one missing is fetched from its bundle in the loop's artifacts, and its id checked after.
 */
export async function ensureCandidateCommit(ctx: { client: Client; repo: string }, lease: Lease, note: (text: string) => void): Promise<void> {
  const needed = [lease.job.commit, ...(lease.job.compare_to ? [lease.job.compare_to.commit] : [])];
  await ensureCommits(
    ctx,
    lease.loop_id,
    needed.map((commit) => ({ commit, bundle: lease.job.bundles.find((candidate) => candidate.commit === commit) ?? null })),
    note,
  );
}

/** Makes sure this checkout has each commit, fetching a missing one from its bundle (and checking its id). */
export async function ensureCommits(
  ctx: { client: Client; repo: string },
  loopId: string,
  commits: readonly { commit: string; bundle: BundleRef | null }[],
  note: (text: string) => void,
): Promise<void> {
  for (const { commit, bundle } of commits) {
    if (await hasCommit(ctx.repo, commit)) continue;
    if (!bundle) {
      throw new UserError(
        `this checkout lacks commit ${shortCommit(commit)} of loop ${loopId}, and its proposer uploaded no bundle of it; fetch it into this repository (git fetch <remote>) and start work again`,
      );
    }
    note(`fetching ${shortCommit(commit)} from its bundle (${bundle.size} bytes)…`);
    const bytes = await ctx.client.downloadArtifact(loopId, bundle.sha256);
    if (bytes.byteLength !== bundle.size || sha256Hex(bytes) !== bundle.sha256) {
      throw new Error(`the bundle of ${shortCommit(commit)} does not match its digest; nothing was fetched`);
    }
    const file = path.join(os.tmpdir(), `loopwarden-${randomBytes(6).toString("hex")}.bundle`);
    try {
      await writeFile(file, bytes);
      await git(ctx.repo, ["fetch", "-q", "--no-tags", file, `${BUNDLE_REF}:refs/loopwarden/fetched/${commit}`]);
    } catch (error) {
      if (error instanceof GitError && /prerequisite|lacks these prerequisite|missing/i.test(error.message)) {
        throw new UserError(
          `this checkout lacks the loop's t0 commit, which the bundle of ${shortCommit(commit)} builds on: fetch it into this repository and start work again (${error.message.trim()})`,
        );
      }
      throw error;
    } finally {
      await rm(file, { force: true });
    }
    // The bundle's ref must have brought exactly the commit the coordinator named, not merely some commit.
    if (!(await hasCommit(ctx.repo, commit))) throw new Error(`the bundle for ${shortCommit(commit)} did not contain that commit`);
  }
}
