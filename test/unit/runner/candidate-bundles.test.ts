import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { sha256Hex } from "#shared/hash.js";
import { bundleOf, bundleTips, ensureCommits, proposalBundle, withBundleUploaded } from "../../../runner/src/loop/candidate-bundles.js";
import type { ProposeCandidateRequest } from "#shared/wire/api.js";
import type { Client } from "../../../runner/src/coordinator/client.js";

// Candidate commits travel between checkouts as git bundles: made by the proposer from the HEAD of a git
// directory of its own borrowing the repository's objects (else from HEAD, or a ref of the commit's own
// when HEAD has moved), fetched by another runner by the commit's id.

const dir = mkdtempSync(path.join(os.tmpdir(), "lw-bundles-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@localhost", ...args], { cwd, encoding: "utf8" });

/** A repository at t0, and a checkout of it that has t0 only, as a `work` runner's. */
function repositories(name: string): { repo: string; checkout: string; t0: string } {
  const repo = path.join(dir, name);
  execFileSync("git", ["init", "-q", "-b", "main", repo]);
  git(repo, "commit", "-q", "--allow-empty", "-m", "t0");
  const checkout = path.join(dir, `${name}-checkout`);
  git(dir, "clone", "-q", repo, checkout);
  return { repo, checkout, t0: git(repo, "rev-parse", "HEAD").trim() };
}

/** Makes an empty commit in `repo` and answers its id. */
function commitIn(repo: string, message: string): string {
  git(repo, "commit", "-q", "--allow-empty", "-m", message);
  return git(repo, "rev-parse", "HEAD").trim();
}

/** A client whose only artifact is `bytes`. */
function clientServing(bytes: Uint8Array): Client {
  return { downloadArtifact: async () => bytes } as unknown as Client;
}

/** What a `work` runner does with a job's commit: fetches it from `bundle` (served as the loop's artifact) into `checkout`. */
const fetchInto = (checkout: string, commit: string, bundle: Uint8Array) =>
  ensureCommits({ client: clientServing(bundle), repo: checkout }, "lp_1", [{ commit, bundle: { sha256: sha256Hex(bundle), size: bundle.length } }], () => {});

const has = (repo: string, commit: string) => {
  try {
    execFileSync("git", ["cat-file", "-e", `${commit}^{commit}`], { cwd: repo, stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
};

/** `bundleOf(repo, candidate, t0)` names the candidate as its one tip, leaves the repository's refs as they were, and carries the commit into `checkout`. */
async function expectCarried({ repo, checkout, t0 }: { repo: string; checkout: string; t0: string }, candidate: string): Promise<void> {
  const refsBefore = git(repo, "for-each-ref");
  const bundle = await bundleOf(repo, candidate, t0);
  expect(bundleTips(bundle)).toEqual([candidate]);
  expect(git(repo, "for-each-ref")).toBe(refsBefore);
  await fetchInto(checkout, candidate, bundle);
  expect(has(checkout, candidate)).toBe(true);
}

describe("candidate bundles", () => {
  it("carry the candidate HEAD names, and another checkout fetches it by its id", async () => {
    const { repo, checkout, t0 } = repositories("head");
    git(repo, "switch", "-q", "-c", "loopwarden/lp_1");
    const candidate = commitIn(repo, "candidate");
    const refsBefore = git(repo, "for-each-ref");

    const bundle = await bundleOf(repo, candidate, t0);
    expect(bundleTips(bundle)).toEqual([candidate]);
    // Made from HEAD: no ref was left behind (nor made) in the proposer's repository.
    expect(git(repo, "for-each-ref")).toBe(refsBefore);

    expect(has(checkout, candidate)).toBe(false);
    await fetchInto(checkout, candidate, bundle);
    expect(has(checkout, candidate)).toBe(true);
  });

  it("carry a candidate HEAD no longer names (proposed again after a restart), with no ref left behind", async () => {
    const { repo, checkout, t0 } = repositories("moved");
    const candidate = commitIn(repo, "candidate");
    git(repo, "reset", "-q", "--hard", t0);
    await expectCarried({ repo, checkout, t0 }, candidate);
  });

  // Issue 30: a bundle is begun while the loop's branch still moves to its commit.
  it("carry a commit neither HEAD nor any ref names yet, with no ref made, and what else the history holds left out", async () => {
    const { repo, checkout, t0 } = repositories("unnamed");
    const tree = git(repo, "rev-parse", `${t0}^{tree}`).trim();
    const first = git(repo, "commit-tree", tree, "-p", t0, "-m", "first").trim();
    const candidate = git(repo, "commit-tree", tree, "-p", first, "-m", "candidate").trim();
    await expectCarried({ repo, checkout, t0 }, candidate);
    expect(git(checkout, "rev-list", `${t0}..${candidate}`).trim().split("\n")).toEqual([candidate, first]);
  });

  it("are made the way they were where a git directory of the runner's own cannot stand for the repository (SHA-256 objects)", async () => {
    const repo = path.join(dir, "sha256");
    execFileSync("git", ["init", "-q", "-b", "main", "--object-format=sha256", repo]);
    const t0 = commitIn(repo, "t0");
    const candidate = commitIn(repo, "candidate");
    expect(candidate).toHaveLength(64);
    const bundle = await bundleOf(repo, candidate, t0);
    expect(bundleTips(bundle)).toEqual([candidate]);
  });

  it("made by earlier versions (under refs/loopwarden/bundle) are still fetched", async () => {
    const { repo, checkout, t0 } = repositories("earlier");
    const candidate = commitIn(repo, "candidate");
    git(repo, "update-ref", "refs/loopwarden/bundle", candidate);
    const file = path.join(dir, "earlier.bundle");
    git(repo, "bundle", "create", "-q", file, "refs/loopwarden/bundle", `^${t0}`);
    const bundle = execFileSync("cat", [file]);
    await fetchInto(checkout, candidate, bundle);
    expect(has(checkout, candidate)).toBe(true);
  });

  it("are refused, with nothing fetched, when they carry another commit than the one the coordinator names", async () => {
    const { repo, checkout, t0 } = repositories("other");
    const one = commitIn(repo, "one");
    const two = commitIn(repo, "two");
    const bundle = await bundleOf(repo, two, t0);
    await expect(
      ensureCommits(
        { client: clientServing(bundle), repo: checkout },
        "lp_1",
        [{ commit: one, bundle: { sha256: sha256Hex(bundle), size: bundle.length } }],
        () => {},
      ),
    ).rejects.toThrow(/did not contain that commit/);
    expect(has(checkout, one)).toBe(false);
    expect(has(checkout, two)).toBe(false);
  });
});

describe("a proposal's bundle", () => {
  /** A client that records uploads, and takes inline evidence or not. */
  function recording(acceptsEvidence: boolean) {
    const uploads: { name: string; bytes: Buffer; contentType: string }[] = [];
    const client = {
      acceptsEvidence,
      uploadArtifact: async (_loopId: string, name: string, bytes: Uint8Array, contentType: string) => {
        uploads.push({ name, bytes: Buffer.from(bytes), contentType });
        return { sha256: sha256Hex(bytes), size: bytes.byteLength, name, content_type: contentType };
      },
    } as unknown as Client;
    return { client, uploads };
  }

  it("travels inside the proposal when small and the coordinator takes it; else it is uploaded first", async () => {
    const { repo, t0 } = repositories("inline");
    const commit = commitIn(repo, "candidate");
    const bytes = await bundleOf(repo, commit, t0);

    const taking = recording(true);
    const inline = await proposalBundle(taking.client, "lp_1", repo, commit, t0);
    expect(inline).toEqual({
      bundle: { sha256: sha256Hex(bytes), size: bytes.length },
      evidence: [{ sha256: sha256Hex(bytes), base64: bytes.toString("base64") }],
    });
    expect(taking.uploads).toEqual([]);

    const refusing = recording(false);
    expect(await proposalBundle(refusing.client, "lp_1", repo, commit, t0)).toEqual({ bundle: { sha256: sha256Hex(bytes), size: bytes.length } });
    expect(refusing.uploads.map((upload) => [upload.name, upload.contentType])).toEqual([
      [`candidate-${commit.slice(0, 10)}.bundle`, "application/x-git-bundle"],
    ]);

    // Refused inline (an older coordinator, S3 mode): the same bytes uploaded, the proposal otherwise the same.
    const proposal = { idempotency_key: "cand-1", commit, bundle: inline.bundle, evidence: inline.evidence } as unknown as ProposeCandidateRequest;
    const again = recording(true);
    const resent = await withBundleUploaded(again.client, "lp_1", proposal);
    expect(resent).toEqual({ idempotency_key: "cand-1", commit, bundle: inline.bundle });
    expect(again.uploads.map((upload) => upload.bytes)).toEqual([bytes]);
  });
});
