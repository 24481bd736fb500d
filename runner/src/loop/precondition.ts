import { mkdir, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import * as z from "zod";
import { runsForFlakeRate } from "#shared/determinism/flake-rate.js";
import { changedTests, compareRuns, outcomeReader } from "#shared/determinism/flips.js";
import { formatDuration } from "#shared/duration.js";
import { testSetsOf, type TestSets } from "#shared/engine/test-sets.js";
import { doctorHalt } from "#shared/engine/flake-monitor.js";
import { percentValue } from "#shared/wire/contract.js";
import { DoctorRecord, MAX_DOCTOR_IDS, type DoctorMutation } from "#shared/wire/doctor.js";
import type { FullObservation } from "#shared/wire/observation.js";
import type { LoadedContract } from "../contract/contract-file.js";
import { withClone, type Clone } from "../evaluation/clone.js";
import { evaluateIn, runGates } from "../evaluation/evaluate.js";
import { UserError } from "../errors.js";
import { runCommand } from "../process/exec.js";
import { dirtyPaths, git, shortCommit } from "../process/git.js";
import { liveStatus, progress, type OutputMode } from "../output.js";
import { execZone } from "../zones/isolation.js";
import { readJsonFile } from "./json-file.js";

// The precondition of a new loop (DESIGN §6.5, docs/design.md): before its first agent run, the check
// must give t0's outcome again in fresh clones, give it twice in one clone (no side effects), and — when
// the contract names a mutation (`doctor.mutate`) — turn red on the mutated tree. The runner measures;
// the record goes into the creation request, and the engine decides from it (`doctorHalt`), so the
// receipt shows what was measured and `verify` decides again. A record is kept per contract hash and t0
// tree in `.loopwarden/doctor/`, and reused by the next loop created for the same pair.

/** Runs of the gates in fresh clones, t0's among them, when the contract does not say (`doctor.runs`). */
export const DEFAULT_PRECONDITION_RUNS = 3;
/** Time limit of the `doctor.mutate` command. */
const MUTATE_TIMEOUT_MS = 10 * 60_000;

/** How many runs the contract's `doctor` asks for, t0's included: `runs`, ⌈3/R⌉ for `max_flake_rate` R, or the default. */
export function preconditionRuns(loaded: LoadedContract): number {
  const doctor = loaded.contract.doctor;
  if (doctor?.runs !== undefined) return doctor.runs;
  if (doctor?.max_flake_rate !== undefined) return runsForFlakeRate(percentValue(doctor.max_flake_rate));
  return DEFAULT_PRECONDITION_RUNS;
}

type MeasuredRecord = Extract<DoctorRecord, { status: "measured" }>;

/** A record as kept on disk: the record, and when it was measured. */
const CachedRecord = z.strictObject({ measured_at: z.iso.datetime(), record: DoctorRecord });

function cachePath(repo: string, contractHash: string, tree: string): string {
  return path.join(repo, ".loopwarden", "doctor", `${contractHash}-${tree}.json`);
}

/** The cached record for this contract and tree, marked as reused; null when there is none or it is unreadable (measured again). */
async function cachedRecord(file: string, tree: string): Promise<MeasuredRecord | null> {
  const cached = await readJsonFile(file, CachedRecord);
  if (!cached) return null;
  const { record, measured_at: measuredAt } = cached;
  if (record.status !== "measured" || record.tree !== tree) return null;
  return { ...record, cached_from: measuredAt };
}

async function saveRecord(file: string, record: DoctorRecord): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, `${JSON.stringify({ measured_at: new Date().toISOString(), record })}\n`);
  await rename(temporary, file);
}

function capped(ids: readonly string[]): { ids: string[]; count: number } {
  return { ids: ids.slice(0, MAX_DOCTOR_IDS), count: ids.length };
}

/** What the mutation turned red of what passed at t0 and in every later run. */
async function runMutation(clone: Clone, loaded: LoadedContract, command: string, green: readonly string[], mode: OutputMode): Promise<DoctorMutation> {
  const { contract } = loaded;
  const result = await runCommand(command, {
    cwd: clone.dir,
    timeoutMs: MUTATE_TIMEOUT_MS,
    env: clone.env,
    signal: clone.signal,
    network: contract.exec?.network ?? "host",
    zone: execZone(clone, contract),
  });
  if (result.exit_code !== 0 || result.timed_out) {
    const tail = result.output.toString("utf8").trim().split("\n").slice(-3).join(" | ");
    const ended = result.timed_out ? "timed out" : result.exit_code === null ? `was killed by ${result.signal}` : `exited ${result.exit_code}`;
    throw new UserError(`the contract's doctor.mutate \`${command}\` ${ended}${tail ? `: ${tail}` : ""}; fix it, or remove doctor.mutate`, 2);
  }
  const changed = await dirtyPaths(clone.dir);
  if (changed.length === 0) {
    throw new UserError(`the contract's doctor.mutate \`${command}\` changed nothing in a clone of t0, so there is nothing for the gates to catch; fix it`, 2);
  }
  const sets = testSetsOf(
    contract,
    (await runGates(clone, contract, { onGateStart: (gate) => liveStatus(mode, `precondition: mutated tree, gate ${gate.name}`) })).observation,
  );
  const outcomeOf = outcomeReader(sets);
  const red = capped(green.filter((id) => outcomeOf(id) !== "passed"));
  return { command, changed_paths: changed.length, passing_at_t0: green.length, turned_red: red.ids, red_count: red.count };
}

/**
 * The precondition's record for a new loop whose t0 (`t0`, measured as run 1) is at `commit`: reused
 * from `.loopwarden/doctor/` for the same contract hash and tree, else measured — `preconditionRuns - 1`
 * more runs in fresh clones, the last run's gates once more in its clone, and the contract's mutation —
 * and kept there when the loop may start on it (the engine decides, at creation; a record that halts it
 * is measured again by the next creation).
 */
export async function measurePrecondition(params: {
  repo: string;
  commit: string;
  loaded: LoadedContract;
  t0: FullObservation;
  mode: OutputMode;
  /** Prefix of progress lines. */
  label?: string;
  signal?: AbortSignal | undefined;
}): Promise<DoctorRecord> {
  const { repo, commit, loaded, mode } = params;
  const label = params.label ?? "precondition";
  const { contract } = loaded;
  const tree = (await git(repo, ["rev-parse", `${commit}^{tree}`])).trim();
  const file = cachePath(repo, loaded.hash, tree);
  const cached = await cachedRecord(file, tree);
  if (cached) {
    progress(mode, `${label}: reusing the record of ${cached.cached_from ?? "an earlier loop"} for this contract and tree (${cached.runs} run(s))`);
    return cached;
  }
  const runs = preconditionRuns(loaded);
  const mutate = contract.doctor?.mutate;
  progress(
    mode,
    `${label}: the check at ${shortCommit(commit)} must give t0's outcome in ${runs - 1} more fresh clone(s) and twice in one clone${mutate ? `, and fail after \`${mutate}\`` : ""} (--skip-doctor skips this)…`,
  );
  const started = performance.now();
  const t0Sets = testSetsOf(contract, params.t0);
  const sets: TestSets[] = [t0Sets];
  const deviations: { run: number; tests: string[]; count: number }[] = [];
  const rerun = { changed: [] as string[], count: 0 };
  const options = { contract, onGateStart: (gate: { name: string }) => liveStatus(mode, `${label}: gate ${gate.name}`) };
  for (let run = 2; run <= Math.max(runs, 2); run++) {
    const counted = run <= runs;
    const runStarted = performance.now();
    await withClone(repo, commit, `${label}-${run}`, async (made) => {
      const clone: Clone = { ...made, signal: params.signal };
      const runSets = testSetsOf(contract, (await evaluateIn(clone, options)).observation);
      if (counted) {
        sets.push(runSets);
        const flipped = compareRuns([t0Sets, runSets]).flipping.map((flip) => flip.id);
        if (flipped.length > 0) deviations.push({ run, tests: capped(flipped).ids, count: flipped.length });
        progress(
          mode,
          `${label}: run ${run}/${runs}${flipped.length > 0 ? ` differs from t0 in ${flipped.slice(0, 5).join(", ")}` : " agrees with t0"} (${formatDuration(Math.round(performance.now() - runStarted))})`,
        );
      }
      // The last run's gates once more in its own clone: a gate that leaves state behind changes its next run.
      if (run === Math.max(runs, 2)) {
        const again = testSetsOf(contract, (await runGates(clone, contract, options)).observation);
        const changed = changedTests(runSets, again).map((change) => change.id);
        rerun.changed = capped(changed).ids;
        rerun.count = changed.length;
        progress(
          mode,
          `${label}: the gates again in the same clone ${changed.length > 0 ? `changed ${changed.slice(0, 5).join(", ")}` : "gave the same outcome"}`,
        );
      }
    });
  }
  let mutation: DoctorMutation | undefined;
  if (mutate) {
    const [first, ...rest] = sets;
    const others = rest.map(outcomeReader);
    const green = (first?.passing ?? []).filter((id) => others.every((outcomeOf) => outcomeOf(id) === "passed"));
    mutation = await withClone(repo, commit, `${label}-mutant`, (made) => runMutation({ ...made, signal: params.signal }, loaded, mutate, green, mode));
    progress(
      mode,
      `${label}: after \`${mutate}\`, ${mutation.red_count} of ${mutation.passing_at_t0} id(s) passing at t0 no longer pass${mutation.red_count > 0 ? "" : " — the check cannot tell a broken change"}`,
    );
  }
  const record: DoctorRecord = {
    status: "measured",
    tree,
    runs,
    deviations,
    rerun,
    ...(mutation ? { mutation } : {}),
    duration_ms: Math.round(performance.now() - started),
  };
  // Only a record the loop may start on is reused: a check found wanting is measured afresh next time
  // (its environment may have been fixed), never halted again from a cache.
  if (doctorHalt(contract, record) === null) await saveRecord(file, record);
  return record;
}
