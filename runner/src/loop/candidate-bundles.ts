import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { BundleRef } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { bundleArtifact, INLINE_EVIDENCE_MAX_BYTES, type InlineEvidence, type Lease, type ProposeCandidateRequest } from "#shared/wire/api.js";
import type { Client } from "../coordinator/client.js";
import { JobRefused } from "../errors.js";
import { git, GitError, objectsDirOf, shortCommit } from "../process/git.js";

// Candidate commits travel as git bundles (DESIGN §10, issue "team-shared loops"): the proposer uploads
// each candidate's commits since the loop's t0 to the loop's artifacts, and a runner in another
// checkout of the repository fetches the bundle and checks the commit id before evaluating. No shared
// git remote is needed; the checkout needs only t0, the commit the loop started from.

/** Bundles `commit` (its commits not reachable from `base`) and uploads it to the loop's artifacts. */
export async function uploadCandidateBundle(client: Client, loopId: string, repo: string, commit: string, base: string): Promise<BundleRef> {
  return uploadBundleBytes(client, loopId, commit, await bundleOf(repo, commit, base));
}

async function uploadBundleBytes(client: Client, loopId: string, commit: string, bytes: Uint8Array): Promise<BundleRef> {
  const { name, content_type } = bundleArtifact(commit);
  const ref = await client.uploadArtifact(loopId, name, bytes, content_type);
  return { sha256: ref.sha256, size: ref.size };
}

/**
 * Bundles `commit` for its proposal: a small bundle travels inside the proposal (`evidence`, when the
 * coordinator takes it: `Client.acceptsEvidence`), one request less; a larger one is uploaded first.
 */
export async function proposalBundle(
  client: Client,
  loopId: string,
  repo: string,
  commit: string,
  base: string,
  /** The bundle when it was made already (`bundleOf`). */
  made?: Promise<Buffer>,
): Promise<{ bundle: BundleRef; evidence?: InlineEvidence[] }> {
  const bytes = await (made ?? bundleOf(repo, commit, base));
  if (!client.acceptsEvidence || bytes.byteLength > INLINE_EVIDENCE_MAX_BYTES) return { bundle: await uploadBundleBytes(client, loopId, commit, bytes) };
  const sha256 = sha256Hex(bytes);
  return { bundle: { sha256, size: bytes.byteLength }, evidence: [{ sha256, base64: bytes.toString("base64") }] };
}

/**
 * A proposal without its inline bundle, the bundle uploaded instead: what is sent again when the
 * coordinator refused the evidence (S3 mode, an older coordinator, the loop's quota).
 */
export async function withBundleUploaded(client: Client, loopId: string, proposal: ProposeCandidateRequest): Promise<ProposeCandidateRequest> {
  const { evidence, ...rest } = proposal;
  for (const item of evidence ?? []) await uploadBundleBytes(client, loopId, proposal.commit, Buffer.from(item.base64, "base64"));
  return rest;
}

/**
 * A bundle of `commit`'s commits since `base`, written by git to its stdout. A bundle names the commits
 * it carries by ref: the HEAD of a git directory of the runner's own borrowing the repository's objects
 * names it (`bundleApart`); where that cannot be made, the repository's HEAD when it names the commit,
 * else a ref for this commit alone while the bundle is made. Runners fetch the commit by its id,
 * whatever ref names it.
 */
export async function bundleOf(repo: string, commit: string, base: string): Promise<Buffer> {
  const apart = await bundleApart(repo, commit, base).catch(() => null);
  if (apart && bundleTips(apart).includes(commit)) return apart;
  const create = async (ref: string) => Buffer.from(await git(repo, ["bundle", "create", "-q", "-", ref, `^${base}`], { encoding: "buffer" }), "latin1");
  const atHead = await create("HEAD").catch(() => null);
  if (atHead && bundleTips(atHead).includes(commit)) return atHead;
  const ref = `refs/loopwarden/bundles/${commit}`;
  await git(repo, ["update-ref", ref, commit]);
  try {
    return await create(ref);
  } finally {
    await git(repo, ["update-ref", "-d", ref]).catch(() => undefined);
  }
}

/**
 * A bundle of `commit` since `base` made in a git directory of the runner's own, whose HEAD is `commit`
 * and whose objects are the repository's (borrowed, `objects/info/alternates`): neither HEAD nor a ref
 * of the repository has to name the commit, so the bundle is made while the loop's branch still moves
 * to it, in one git process (issue 30). Throws where that directory cannot stand for the repository
 * (another object format: its HEAD is then not an id git reads), for `bundleOf` to make it there.
 */
async function bundleApart(repo: string, commit: string, base: string): Promise<Buffer> {
  const objects = await objectsDirOf(repo);
  const dir = await mkdtemp(path.join(os.tmpdir(), "loopwarden-bundle-"));
  try {
    await Promise.all([
      mkdir(path.join(dir, "objects", "info"), { recursive: true }).then(() => writeFile(path.join(dir, "objects", "info", "alternates"), `${objects}\n`)),
      mkdir(path.join(dir, "refs")),
      writeFile(path.join(dir, "HEAD"), `${commit}\n`),
    ]);
    return Buffer.from(await git(dir, ["--git-dir", dir, "bundle", "create", "-q", "-", "HEAD", `^${base}`], { encoding: "buffer" }), "latin1");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The commits a bundle's header names as its tips (not its prerequisites, which start with `-`). */
export function bundleTips(bundle: Uint8Array): string[] {
  const bytes = Buffer.from(bundle.buffer, bundle.byteOffset, bundle.byteLength);
  const end = bytes.indexOf("\n\n");
  const lines = bytes
    .subarray(0, end === -1 ? Math.min(bytes.length, 64 * 1024) : end)
    .toString("latin1")
    .split("\n");
  if (!/^# v[23] git bundle$/.test(lines[0] ?? "")) return [];
  return lines.flatMap((line) => /^([0-9a-f]{40}(?:[0-9a-f]{24})?) \S/.exec(line)?.[1] ?? []);
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
      throw new JobRefused(
        `this checkout lacks commit ${shortCommit(commit)} of loop ${loopId}, and its proposer uploaded no bundle of it; fetch it into this repository (git fetch <remote>) and start work again`,
      );
    }
    note(`fetching ${shortCommit(commit)} from its bundle (${bundle.size} bytes)…`);
    const bytes = await ctx.client.downloadArtifact(loopId, bundle.sha256);
    if (bytes.byteLength !== bundle.size || sha256Hex(bytes) !== bundle.sha256) {
      throw new Error(`the bundle of ${shortCommit(commit)} does not match its digest; nothing was fetched`);
    }
    if (!bundleTips(bytes).includes(commit)) throw new Error(`the bundle for ${shortCommit(commit)} did not contain that commit`);
    const file = path.join(os.tmpdir(), `loopwarden-${randomBytes(6).toString("hex")}.bundle`);
    try {
      await writeFile(file, bytes);
      // By the commit's id: the coordinator named it, and a bundle of another commit yields nothing.
      await git(ctx.repo, ["fetch", "-q", "--no-tags", file, `${commit}:refs/loopwarden/fetched/${commit}`]);
    } catch (error) {
      if (error instanceof GitError && /prerequisite|lacks these prerequisite|missing/i.test(error.message)) {
        throw new JobRefused(
          `this checkout lacks the loop's t0 commit, which the bundle of ${shortCommit(commit)} builds on: fetch it into this repository and start work again (${error.message.trim()})`,
        );
      }
      throw error;
    } finally {
      await rm(file, { force: true });
    }
    // The fetch must have brought exactly the commit the coordinator named, not merely some commit.
    if (!(await hasCommit(ctx.repo, commit))) throw new Error(`the bundle for ${shortCommit(commit)} did not contain that commit`);
  }
}
