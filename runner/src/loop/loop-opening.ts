import { randomBytes } from "node:crypto";
import os from "node:os";
import { formatList } from "#shared/format-list.js";
import { refuseCandidateBaseline } from "./candidate-commits.js";
import { CoordinatorError } from "../coordinator/client.js";
import { removeStaleClones } from "../evaluation/clone.js";
import { connect, type Connection, type ServerOptions } from "../coordinator/connect.js";
import { contractHash, validateContract, type LoadedContract } from "../contract/contract-file.js";
import { resolveContract, resumedContract, type ContractOptions } from "../contract/contract-resolution.js";
import { UserError } from "../errors.js";
import { uploadLogs } from "../evaluation/evaluate.js";
import { faultPoint } from "../fault.js";
import { currentBranch, dirtyPaths, excludeStateDir, headCommit, repoRoot, repositoryName, shortCommit } from "../process/git.js";
import { loopBranch, switchToLoopBranch } from "../process/git-commits.js";
import { progress, type OutputMode } from "../output.js";
import { clearPendingCreate, loadPendingCreate, savePendingCreate, uploadPendingFiles, type PendingCreate } from "./pending-create.js";
import { awaitBaseline, measureBaseline } from "./baseline.js";
import { formatLabels, labelsSatisfy } from "#shared/engine/index.js";
import { parseLabels } from "../contract/labels.js";
import { timed } from "../timings.js";
import type { Contract, Labels } from "#shared/wire/contract.js";
import { contractSourceOf, loadWorkspace, saveWorkspaceState, type WorkspaceState } from "./workspace.js";
import { settleStaleWorkspaces } from "../zones/agent-zone.js";
import { hideFromZones } from "../zones/sandbox.js";
import type { FullObservation } from "#shared/wire/observation.js";
import type { LoopSummary } from "#shared/wire/api.js";
import type { Session } from "./session-type.js";
import type { DoctorRecord } from "#shared/wire/doctor.js";
import { measurePrecondition } from "./precondition.js";

// Opening a repository's loop (DESIGN §6.6), for `run` and `step`: the loop recorded for the contract is
// resumed, or a new one created from a baseline measured at HEAD (with the on-demand coordinator started
// meanwhile), and the working tree put on the loop's branch. session.ts drives it from there.

const SKIPPED: DoctorRecord = { status: "skipped" };

function newRunnerId(): string {
  return `${os
    .hostname()
    .replace(/[^A-Za-z0-9_.:-]/g, "-")
    .slice(0, 60)}-${randomBytes(4).toString("hex")}`;
}

/**
 * Everything a new loop's creation needs before the coordinator is asked (DESIGN §6.6): a clean tree for
 * `run`, a t0 that is a commit the user made, and the creation request — the one an interrupted runner
 * left in flight when it still fits, else a new one with the baseline measured — saved before it is sent.
 */
async function prepareCreation(
  repo: string,
  source: string,
  loaded: LoadedContract,
  options: {
    purpose: "run" | "step";
    labels: Labels;
    /** The recorded loop awaiting its baseline whose creation this must finish (never a new one). */
    resuming?: string | undefined;
    /** `--skip-doctor`: no precondition; the loop's first event (and so its receipt) says it was skipped. */
    skipDoctor?: boolean | undefined;
  },
  mode: OutputMode,
): Promise<{ pending: PendingCreate; startedFrom: string | null }> {
  if (options.purpose === "run") {
    const dirty = await dirtyPaths(repo);
    if (dirty.length > 0) {
      throw new UserError(`the working tree has uncommitted changes (${formatList(dirty)}); commit or stash them first, so a revert never loses your work`);
    }
  }
  const startedFrom = await currentBranch(repo);
  const t0Commit = await headCommit(repo);
  await refuseCandidateBaseline(repo, t0Commit, startedFrom);
  // A creation an interrupted runner left in flight is finished with its very request (DESIGN §6.6):
  // the coordinator answers the loop it may already have created, rather than a second one.
  let pending = await loadPendingCreate(repo, source);
  if (pending && (contractHash(pending.request.contract) !== loaded.hash || (pending.request.t0?.commit ?? pending.request.t0_commit) !== t0Commit)) {
    // Finishing a recorded loop's creation, a request that no longer fits is refused below instead.
    if (options.resuming === undefined) progress(mode, "an interrupted loop creation no longer matches the contract or HEAD: measuring a new baseline");
    pending = null;
  }
  if (!pending && options.resuming !== undefined) {
    throw new UserError(
      `loop ${options.resuming} awaits its baseline at a commit this checkout is no longer at, or under another contract, and its creation request is gone; check out that commit again to wait for it, or start a new loop with --new`,
    );
  }
  if (pending) {
    const measured = pending.request.t0 ? "already measured" : "measured by a runner";
    progress(mode, `finishing the interrupted creation of a loop (baseline at ${shortCommit(t0Commit)}, ${measured})`);
    return { pending, startedFrom };
  }
  // Where the contract says candidates are evaluated (evaluate.labels) and this runner is not such a
  // runner, t0 is measured there too (DESIGN §11), on a baseline lease: the creation names its commit only.
  const required = loaded.contract.evaluate?.labels ?? {};
  if (!labelsSatisfy(required, options.labels)) {
    progress(
      mode,
      `the contract evaluates on a runner with ${formatLabels(required)}: the baseline at ${shortCommit(t0Commit)} is measured by one (loopwarden work --labels ${formatLabels(required)})`,
    );
    const request = {
      idempotency_key: `run-${randomBytes(16).toString("hex")}`,
      contract: loaded.contract,
      t0_commit: t0Commit,
      repository: await repositoryName(repo),
      // The runner that measures t0 runs the precondition too, unless it is skipped here.
      ...(options.skipDoctor ? { doctor: SKIPPED } : {}),
    };
    return { pending: await savePendingCreate(repo, source, { request, logs: [] }), startedFrom };
  }
  const baseline = await timed("t0", () => measureBaseline(repo, source, t0Commit, loaded, mode));
  // The precondition (DESIGN §6.5): t0's run is its first; the coordinator decides from the record.
  const doctor = options.skipDoctor
    ? SKIPPED
    : await timed("precondition", () => measurePrecondition({ repo, commit: t0Commit, loaded, t0: baseline.observation, mode }));
  if (options.skipDoctor) progress(mode, "precondition skipped (--skip-doctor): the loop's receipt records that its check was not checked");
  pending = await savePendingCreate(repo, source, {
    request: {
      idempotency_key: `run-${randomBytes(16).toString("hex")}`,
      contract: loaded.contract,
      t0: { commit: t0Commit, observation: baseline.observation },
      repository: await repositoryName(repo),
      doctor,
    },
    logs: baseline.logs,
    ...(baseline.files ? { files: baseline.files } : {}),
  });
  return { pending, startedFrom };
}

/**
 * Opens the repository's loop for its contract (DESIGN §6.6). The loop recorded for the contract in
 * `.loopwarden/state.json` is resumed whatever the flags when it is running (flags that would change
 * its pinned contract are refused), and reported as it is when it has halted; a new loop is created only
 * when none is recorded, the coordinator no longer knows it, or `--new` asks for one — with t0 measured
 * at HEAD, which must be a commit the user made. `run` refuses a dirty tree for a new loop (a revert
 * must never touch the user's work); `step` evaluates exactly that.
 */
export async function openSession(
  options: ContractOptions &
    ServerOptions &
    OutputMode & {
      cwd: string;
      purpose: "run" | "step";
      labels?: string | undefined;
      /** `--skip-doctor`: a new loop starts without the precondition (its receipt says so). */
      skipDoctor?: boolean | undefined;
      /** Checks a new loop's contract before anything runs (its zones, DESIGN §6.7): a refusal creates no loop. */
      preflight?: ((contract: Contract) => Promise<void>) | undefined;
    },
): Promise<Session> {
  const labels = parseLabels(options.labels);
  const mode: OutputMode = options;
  const repo = await repoRoot(options.cwd);
  await headCommit(repo);
  await excludeStateDir(repo);
  const [, setAside] = await Promise.all([removeStaleClones(), settleStaleWorkspaces(repo)]);
  // An agent's edits that a killed runner left in its workspace are kept, never lost (DESIGN §6.6).
  for (const ref of setAside) progress(options, `set aside the edits an interrupted agent run left in its workspace at ${ref}`);
  // Neither zone ever sees the user's repository (DESIGN §6.7).
  hideFromZones(repo);

  const loops = await loadWorkspace(repo);
  const source = contractSourceOf(repo, options, loops);
  const previous = loops[source] ?? null;
  const server: ServerOptions = {
    server: options.server ?? (previous && !options.new ? (previous.server ?? undefined) : undefined),
    state: options.state ?? (previous && !options.new ? (previous.state_dir ?? undefined) : undefined),
    token: options.token,
  };

  // A new loop's contract is checked before any coordinator is reached (a bad contract starts nothing);
  // a recorded loop's is compared with what it pinned once the coordinator answers. A loop that is new
  // for certain has its baseline measured while the coordinator starts (DESIGN §12: the on-demand start
  // overlapped with t0, not added to it).
  const fresh = previous === null || options.new === true ? await resolveContract(repo, options) : null;
  if (fresh) await options.preflight?.(fresh.contract);
  const preparing = fresh ? prepareCreation(repo, source, fresh, { ...options, labels }, mode) : null;
  // Awaited below; until then a refusal (a dirty tree) must not count as unhandled.
  preparing?.catch(() => undefined);
  let connection: Connection;
  try {
    connection = await timed("coordinator", () => connect(server, mode));
  } catch (error) {
    await preparing?.catch(() => undefined);
    throw error;
  }
  try {
    /** The recorded loop awaits its baseline: its creation, kept on disk, is sent again and waited for. */
    let awaiting = false;
    if (previous && !options.new) {
      const loop = await connection.client.getLoop(previous.loop_id).catch((error: unknown) => {
        if (error instanceof CoordinatorError && error.status === 404) return null;
        if (error instanceof CoordinatorError && error.code === "awaiting_baseline") return "awaiting_baseline";
        throw error;
      });
      if (loop === "awaiting_baseline") awaiting = true;
      else if (loop) {
        if (loop.status === "running") {
          const loaded = await resumedContract(repo, source, options, loop.loop_id, await connection.client.pinnedContract(loop.loop_id));
          progress(mode, `resuming loop ${loop.loop_id} (${loop.iteration} of ${loop.max_iterations} iterations done)`);
          return { repo, source, loaded, connection, client: connection.client, mode, workspace: previous, loop, resumed: true, labels };
        }
        // A halted loop stays halted: reported with its reason and class, never silently replaced.
        const loaded = validateContract(await connection.client.pinnedContract(loop.loop_id), source);
        return { repo, source, loaded, connection, client: connection.client, mode, workspace: previous, loop, resumed: true, labels };
      } else progress(mode, `loop ${previous.loop_id} is unknown to the coordinator at ${connection.url}: starting a new loop`);
    }
    const loaded = fresh ?? (await resolveContract(repo, options));
    const resuming = awaiting ? previous?.loop_id : undefined;
    const { pending, startedFrom } = await timed("baseline", () => preparing ?? prepareCreation(repo, source, loaded, { ...options, labels, resuming }, mode));
    faultPoint("create-saved");
    const created = await timed("create", () => connection.client.createLoop(pending.request));
    const workspaceOf = (loopId: string, seenSeq: number): WorkspaceState => ({
      loop_id: loopId,
      server: connection.local ? null : connection.url,
      state_dir: connection.local ? (server.state ?? null) : null,
      started_from: startedFrom,
      // The runner id this checkout recorded while the loop awaited its baseline, else a new one.
      runner_id: previous?.loop_id === loopId ? previous.runner_id : newRunnerId(),
      seen_seq: seenSeq,
    });
    let loop: LoopSummary;
    if ("loop" in created) loop = created.loop;
    else {
      // Recorded while it waits, so `status`, `work --loop` and a run started again find the loop by its id.
      await saveWorkspaceState(repo, source, workspaceOf(created.awaiting_baseline.loop_id, 0));
      loop = await awaitBaseline(connection.client, pending.request, created.awaiting_baseline, mode);
    }
    faultPoint("create-answered");
    // What t0's observation cites, stored now that the loop exists (artifacts are scoped to a loop): from
    // the creation kept on disk, so a runner killed before this point stores them on its next run.
    await uploadLogs(connection.client, loop.loop_id, pending.logs);
    const lost = await uploadPendingFiles(connection.client, loop.loop_id, pending.files, (text) => progress(mode, `baseline: ${text}`));
    if (lost.length > 0) progress(mode, `baseline: not stored, changed or removed on disk since t0 was measured: ${formatList(lost)}`);
    faultPoint("loop-created");
    // Nothing decided yet to show: a run that resumes this loop shows every verdict after its creation.
    const workspace = workspaceOf(loop.loop_id, loop.head.seq);
    await saveWorkspaceState(repo, source, workspace);
    await clearPendingCreate(repo, source);
    // Said once it is so: a --new refused before the loop exists (HEAD a candidate commit) changed nothing.
    if (previous && options.new) {
      progress(mode, `--new: loop ${previous.loop_id} is left as it is on its coordinator; this repository now follows loop ${loop.loop_id}`);
    }
    // A baseline a runner measured is read from the loop's first event, which names the runner.
    const { t0, t0_measured_by: measuredBy } = pending.request.t0
      ? { t0: pending.request.t0, t0_measured_by: undefined }
      : (await connection.client.creation(loop.loop_id)).data;
    const by = measuredBy ? `, measured by runner ${measuredBy.runner_id},` : "";
    progress(mode, `loop ${loop.loop_id} (contract ${loaded.source}): the baseline${by} has ${baselineFailures(t0.observation)}`);
    return { repo, source, loaded, connection, client: connection.client, mode, workspace, loop, resumed: false, labels };
  } catch (error) {
    await connection.close();
    throw error;
  }
}

/** Puts the working tree on the loop's branch (carrying uncommitted changes along, for `step`). */
export async function enterLoopBranch(session: Session): Promise<void> {
  const branch = loopBranch(session.loop.loop_id);
  if ((await currentBranch(session.repo)) === branch) return;
  try {
    await switchToLoopBranch(session.repo, session.loop.loop_id, session.loop.best.commit);
  } catch (error) {
    throw new UserError(`cannot switch to ${branch}: ${(error as Error).message.split("\n")[0]}; commit or stash your changes and retry`);
  }
  progress(session.mode, `working on branch ${branch}${session.workspace.started_from ? ` (from ${session.workspace.started_from})` : ""}`);
}

/**
 * What fails at t0, as the gates' own lines count it: the failing tests their reports name, and the
 * gates that failed (each also one test to the ratchet, DESIGN §5), e.g. `3 failing test(s), 1 failing
 * gate(s)` for a 3-test suite whose gate exits 1 — not "4 failing tests".
 */
function baselineFailures(observation: FullObservation): string {
  const tests = observation.tests.failing.length;
  const gates = observation.gates.filter((gate) => gate.exit_code !== 0 || gate.timed_out || gate.report_error !== undefined).length;
  const parts = [...(tests > 0 || gates === 0 ? [`${tests} failing test(s)`] : []), ...(gates > 0 ? [`${gates} failing gate(s)`] : [])];
  return parts.join(", ");
}
