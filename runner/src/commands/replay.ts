import { changedOutcomes, foldEvents, LoopEvent, median, outOfScope, standingOf, testFingerprint, type LoopState } from "#shared/engine/index.js";
import type { Observation } from "#shared/wire/observation.js";
import { verifyReceipt } from "#shared/receipts/index.js";
import { percentValue } from "#shared/wire/contract.js";
import { withClone } from "../evaluation/clone.js";
import { resolveContract, type ContractOptions } from "../contract/contract-resolution.js";
import { UserError } from "../errors.js";
import { evaluateIn, hardGatesPassed } from "../evaluation/evaluate.js";
import { git, repoRoot, shortCommit } from "../process/git.js";
import { changedPaths } from "../process/git-commits.js";
import { emitResult, paint, progress, type OutputMode } from "../output.js";
import { verifyEd25519 } from "../receipts/receipt-crypto.js";
import { keyFingerprint, keyLine, receiptDocumentsFor } from "../receipts/receipt-documents.js";
import { sampleAlone } from "../evaluation/sampling.js";
import { formatList } from "#shared/format-list.js";

/** Exit code of a replay whose fingerprint differs: the `objective_unverified` class (DESIGN §7, §13). */
const MISMATCH = 13;

/** One compared part of the fingerprint. */
interface Comparison {
  part: "gates" | "tests" | "scope" | "metric";
  match: boolean;
  detail: string;
}

/** The observation a receipt's best was judged on: the best candidate's last report, or t0's. */
function recordedObservation(events: readonly LoopEvent[], state: LoopState): Observation {
  let observation: Observation | null = null;
  for (const event of events) {
    if (event.type === "loop_created" && state.best.candidate_id === "t0") observation = event.data.t0.observation;
    if (event.type === "observation_reported" && event.data.candidate_id === state.best.candidate_id) observation = event.data.observation;
  }
  if (!observation) throw new UserError(`the receipt's log holds no observation of its best (${state.best.candidate_id})`);
  return observation;
}

/**
 * `loopwarden replay <url | FILE --events F --key K>` (DESIGN §9): verifies the receipt, then re-runs the
 * loop's gates (and its metric) on the receipt's best commit in a clean clone of this repository, and
 * compares the fingerprint — each gate's exit code, the collected and failing test sets, the metric
 * within the recorded precision. "Replayable verdicts", never "replayable runs": exit 0 when the
 * fingerprint matches, 13 listing the differences. Only a contract of this checkout is run (DESIGN §4
 * invariant 4): the contract file as the best commit has it, or the flags given, must hash to the
 * receipt's pinned contract.
 */
export async function replayCommand(
  receipt: string,
  options: OutputMode & ContractOptions & { cwd: string; events?: string | undefined; key?: string | undefined; keyFingerprint?: string | undefined },
): Promise<number> {
  const pin = keyFingerprint(options.keyFingerprint);
  const documents = await receiptDocumentsFor(receipt, options, "replay");
  const repo = await repoRoot(options.cwd);
  const verified = await verifyReceipt({ envelope: documents.envelope, events: documents.events, keys: documents.keys, verify: verifyEd25519, pin });
  if (!verified.ok || !verified.statement) {
    emitResult(options, { status: "error", match: false, errors: [`the receipt does not verify: ${verified.first_failure}`] }, [
      `INVALID receipt, nothing replayed: ${verified.first_failure}`,
    ]);
    return MISMATCH;
  }
  progress(options, keyLine(documents.keySource, verified.key, pin));
  const { predicate } = verified.statement;
  const events = documents.events.map((event) => LoopEvent.parse(event));
  const state = foldEvents(events);
  if (!state) throw new UserError("the receipt's log is empty");
  const recorded = recordedObservation(events, state);
  const commit = state.best.commit;
  await git(repo, ["cat-file", "-e", `${commit}^{commit}`]).catch(() => {
    throw new UserError(
      `the receipt's best commit ${commit} is not in this repository: fetch it (e.g. the loop's branch loopwarden/${predicate.loop_id}) and replay again`,
    );
  });

  progress(options, `replaying ${state.best.candidate_id} at ${shortCommit(commit)} (loop ${predicate.loop_id}) in a clean clone…`);
  const replayed = await withClone(repo, commit, "replay", async (clone) => {
    // A flag-only loop is named after its repository's directory, which the clone's is not: the name
    // defaults to the loop's (the other flags must be the run's).
    const loaded = await resolveContract(clone.dir, { ...options, name: options.name ?? predicate.name });
    if (loaded.hash !== predicate.contract_hash) {
      const what = loaded.source === "flags" ? "the flags given" : `${loaded.source} at ${shortCommit(commit)}`;
      throw new UserError(
        `${what} hash to contract ${loaded.hash.slice(0, 12)}, but the loop ran ${predicate.contract_hash.slice(0, 12)}: replay runs only a contract of this checkout, and it must be the loop's (for a flag-only loop, give its --check/--exec/--junit flags)`,
        2,
      );
    }
    const evaluation = await evaluateIn(clone, {
      contract: loaded.contract,
      onGate: ({ gate, result }) => progress(options, `  gate ${gate.name}: ${result.timed_out ? "timed out" : `exit ${result.exit_code ?? result.signal}`}`),
    });
    const metric = loaded.contract.metric;
    const samples = metric && hardGatesPassed(loaded.contract, evaluation) ? await sampleAlone(clone, loaded.contract, metric.samples.min) : null;
    return { observation: evaluation.observation, samples };
  });

  const comparisons: Comparison[] = [];
  const exitCodes = (observation: Observation) =>
    state.contract.gates.map((gate) => observation.gates.find((result) => result.name === gate.name)?.exit_code ?? null);
  const before = exitCodes(recorded);
  const now = exitCodes(replayed.observation);
  const gateDiffs = state.contract.gates.flatMap((gate, index) =>
    before[index] === now[index] ? [] : [`${gate.name} exit ${before[index] ?? "none"} → ${now[index] ?? "none"}`],
  );
  comparisons.push({
    part: "gates",
    match: gateDiffs.length === 0,
    detail: gateDiffs.length === 0 ? `exit codes ${now.join(", ")} as recorded` : gateDiffs.join("; "),
  });

  const base = state.t0_base;
  const was = testFingerprint(recorded, base);
  const is = testFingerprint(replayed.observation, base);
  const changed = changedOutcomes(standingOf(state.contract, recorded, base), standingOf(state.contract, replayed.observation, base), base).filter(
    (id) => !id.startsWith("gate:"),
  );
  const testsMatch = was.collected === is.collected && was.failing === is.failing;
  comparisons.push({
    part: "tests",
    match: testsMatch,
    detail: testsMatch
      ? `${is.collected_count} collected, ${is.failing_count} failing: the same sets (digests ${is.collected.slice(0, 12)}, ${is.failing.slice(0, 12)})`
      : `collected ${was.collected_count} → ${is.collected_count}, failing ${was.failing_count} → ${is.failing_count}; outcome changed for ${formatList(changed)}`,
  });

  // The scope, checked against git itself: what the best commit changed since t0, as this checkout has
  // them, not as a runner reported it (DESIGN §6.4).
  const scope = state.contract.scope;
  if (scope) {
    const paths = await changedPaths(repo, state.t0.commit, commit).catch(() => null);
    const outside = paths === null ? null : outOfScope(scope, paths);
    comparisons.push({
      part: "scope",
      match: outside !== null && outside.length === 0,
      detail:
        outside === null
          ? `t0's commit ${shortCommit(state.t0.commit)} is not in this repository: fetch it to check the scope`
          : outside.length === 0
            ? `the ${paths?.length ?? 0} path(s) changed since t0 are all inside ${formatList(scope)}`
            : `${outside.length} path(s) changed since t0 lie outside ${formatList(scope)}: ${formatList(outside)}`,
    });
  }

  const metric = state.contract.metric;
  if (metric) {
    const recordedMedian = state.best.metric;
    const replayedMedian = replayed.samples ? median(replayed.samples.candidate) : null;
    const interval = state.candidates[state.best.candidate_id]?.verdict?.metric?.interval ?? null;
    // The recorded precision: the smallest effect the loop acts on, or the half-width of the best's interval when wider.
    const tolerance = Math.max(percentValue(metric.min_effect), interval ? ((interval[1] ?? 0) - (interval[0] ?? 0)) / 2 : 0);
    if (recordedMedian === null || replayedMedian === null) {
      comparisons.push({
        part: "metric",
        match: false,
        detail: `${metric.name}: ${replayed.samples?.error ?? (recordedMedian === null ? "no recorded reading" : "no reading (a hard gate failed)")}`,
      });
    } else {
      const drift = replayedMedian / recordedMedian - 1;
      comparisons.push({
        part: "metric",
        match: Math.abs(drift) <= tolerance,
        detail: `${metric.name} median ${replayedMedian} over ${replayed.samples?.candidate.length} run(s), recorded ${recordedMedian}: ${(drift * 100).toFixed(1)}% (within ±${(tolerance * 100).toFixed(1)}% matches)`,
      });
    }
  }

  const match = comparisons.every((comparison) => comparison.match);
  const mark = (ok: boolean) => (ok ? paint("match", "green") : paint("DIFFERS", "red"));
  emitResult(
    options,
    {
      status: match ? "ok" : "error",
      match,
      loop_id: predicate.loop_id,
      commit,
      fingerprint: { gates: now, collected_tests: is.collected, failing_tests: is.failing },
      comparisons,
      errors: comparisons.filter((comparison) => !comparison.match).map((comparison) => `${comparison.part}: ${comparison.detail}`),
    },
    [
      ...comparisons.map((comparison) => `  ${comparison.part.padEnd(6)} ${mark(comparison.match)}  ${comparison.detail}`),
      match
        ? `replayed: ${state.best.candidate_id} at ${shortCommit(commit)} gives the fingerprint the receipt records`
        : `DIFFERS: re-running ${state.best.candidate_id} at ${shortCommit(commit)} does not give what the receipt records`,
    ],
  );
  return match ? 0 : MISMATCH;
}
