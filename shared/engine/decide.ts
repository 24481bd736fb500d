import { parseDuration } from "../duration.js";
import { percentValue, type Contract } from "../wire/contract.js";
import type { ChangedLines, Observation } from "../wire/observation.js";
import type { EventDraft, Halt, Verdict } from "./events.js";
import { exitCodeFor, type HaltReason } from "../wire/halt-reasons.js";
import { checkGuards, type Approvals } from "./guards.js";
import { compareSamples } from "./statistics.js";
import { BASELINE_ID, loopAfterVerdict, median, reportSample, sameTreeKey } from "./state.js";
import { monitorHalt } from "./flake-monitor.js";
import { type LoopState } from "./state-types.js";
import { changedOutcomes, regressedTests, standingOf, type TestStanding } from "./test-sets.js";
import { formatList } from "../format-list.js";
import { formatInterval, formatPercent } from "../format-percent.js";

function halt(reason: HaltReason, detail: string, extra: { still_improving?: boolean } = {}): Halt {
  return { halt_reason: reason, exit_class: exitCodeFor(reason), detail, ...extra };
}

/** A failing set by kind: reported tests, and gates and tasks (each also one test, DESIGN §5) by name. */
function failingByKind(ids: readonly string[]): { tests: string[]; gates: string[]; tasks: string[] } {
  const kinds = { tests: [] as string[], gates: [] as string[], tasks: [] as string[] };
  for (const id of ids) {
    if (id.startsWith("gate:")) kinds.gates.push(id.slice("gate:".length));
    else if (id.startsWith("task:")) kinds.tasks.push(id.slice("task:".length));
    else kinds.tests.push(id);
  }
  return kinds;
}

/**
 * What fails, by kind, named as the gates' own lines name it, e.g. `3 failing tests (a, b, c), 1 failing
 * gate (unit)`, at most `limit` names a kind; `nothing failing` for an empty set.
 */
export function describeFailing(ids: readonly string[], limit = 5): string {
  const kinds = failingByKind(ids);
  const parts = (["test", "gate", "task"] as const).flatMap((kind) => {
    const names = kinds[`${kind}s`];
    return names.length === 0 ? [] : [`${names.length} failing ${kind}${names.length === 1 ? "" : "s"} (${formatList(names, limit)})`];
  });
  return parts.length > 0 ? parts.join(", ") : "nothing failing";
}

/**
 * How the failing set changed, by kind, so the figures match the gates' own "N passing / M failing
 * tests" lines: reported tests, then gates and tasks (each also counted as one test, DESIGN §5), named as
 * what they are, e.g. `failing tests 2 → 0, gates 1 → 0`. The ratchet compares the sum.
 */
export function describeFailingChange(before: readonly string[], after: readonly string[]): string {
  const count = (ids: readonly string[]) => {
    const kinds = failingByKind(ids);
    return { tests: kinds.tests.length, gates: kinds.gates.length, tasks: kinds.tasks.length };
  };
  const was = count(before);
  const now = count(after);
  const parts = (["tests", "gates", "tasks"] as const).filter((kind) => was[kind] > 0 || now[kind] > 0).map((kind) => `${kind} ${was[kind]} → ${now[kind]}`);
  return `failing ${parts.length > 0 ? parts.join(", ") : "tests 0 → 0"}`;
}

/**
 * The check_fixpoint ratchet (DESIGN §6.1): promote only when every test that passed in the best-so-far
 * still passes and the failing set strictly shrinks. task_list mode is the same ratchet over tasks (each
 * a `task:<id>` test): a candidate completes at least one task and undoes none.
 */
function decideCheckFixpoint(state: LoopState, candidateId: string, now: TestStanding): Verdict {
  const { failing } = now;
  const regressed = regressedTests(state.best, now, state.t0_base);
  const before = state.best.failing.length;
  const base = { candidate_id: candidateId, failing_before: before, failing_after: failing.length, regressed };
  if (regressed.length > 0) {
    return { ...base, decision: "rejected", reason: "regressed", detail: `broke ${regressed.length} passing test(s): ${formatList(regressed)}` };
  }
  if (failing.length < before) {
    return { ...base, decision: "promoted", reason: "fewer_failures", detail: describeFailingChange(state.best.failing, failing) };
  }
  return { ...base, decision: "rejected", reason: "no_improvement", detail: `${describeFailingChange(state.best.failing, failing)}, not fewer` };
}

/**
 * What a person approved that the guards apply to this candidate (docs/design.md §6.8): the protected
 * files promoted candidates changed with an approval, and its own acknowledged files.
 */
function approvalsFor(state: LoopState, candidateId: string): Approvals {
  const review = state.candidates[candidateId]?.review;
  return { changes: state.approved_changes, files: review?.decision === "ack" ? review.files : [] };
}

/**
 * `decide(state, contract, observation) → { verdict, events }` (DESIGN §6): the verdict on one evaluated
 * candidate, and the events that record it (the verdict, then a halt when one follows).
 */
export function decide(
  state: LoopState,
  contract: Contract,
  candidateId: string,
  observation: Observation,
  at: string,
): { verdict: Verdict; events: EventDraft[] } {
  const now = standingOf(contract, observation, state.t0_base);
  // Guards first (invariant 2): a violation is never promoted, whatever the gates say.
  const violation = checkGuards(contract, state.t0_guards, state.t0_base, observation, approvalsFor(state, candidateId));
  if (violation) {
    const verdict: Verdict = {
      candidate_id: candidateId,
      decision: "rejected",
      reason: "guard_violated",
      detail: `${violation.halt_reason}: ${violation.detail}`,
      failing_before: state.best.failing.length,
      failing_after: now.failing.length,
      regressed: [],
    };
    const verdictEvent: EventDraft = { type: "verdict", at, data: verdict };
    if ((contract.guards?.on_violation ?? "halt") === "halt") {
      return { verdict, events: [verdictEvent, { type: "halted", at, data: halt(violation.halt_reason, violation.detail) }] };
    }
    return { verdict, events: withHalt(state, verdictEvent, now) };
  }
  // The same tree measured twice must give the same outcomes (DESIGN §6.5): no verdict rests on a run
  // that flipped, and the flake monitor decides whether the check can still be trusted. Judged on the
  // loop before the report is recorded, as the coordinator decides it: the report's own sample is added
  // here as the fold will add it (under the candidate's current lease, the only one a report is taken on).
  const sample = state.monitor ? reportSample(state, candidateId, state.candidates[candidateId]?.lease?.lease_id, now) : null;
  const known = sample?.known;
  if (known && known.changed.length > 0) {
    const verdict: Verdict = {
      candidate_id: candidateId,
      decision: "rejected",
      reason: "flaky",
      detail: `the same tree as ${known.against === candidateId ? "its own earlier evaluation" : known.against} gave different outcomes for ${known.changed.length} test(s): ${formatList(known.changed)}`,
      failing_before: state.best.failing.length,
      failing_after: now.failing.length,
      regressed: [],
    };
    const verdictEvent: EventDraft = { type: "verdict", at, data: verdict };
    const untrusted = monitorHalt(contract, sample?.monitor ?? null);
    return { verdict, events: untrusted ? [verdictEvent, { type: "halted", at, data: untrusted }] : withHalt(state, verdictEvent, now) };
  }
  // A log from before the flake monitor: any flip halts, as it did then.
  const flipped = state.monitor ? null : flippedTests(state, candidateId, now);
  if (flipped) {
    const verdict: Verdict = {
      candidate_id: candidateId,
      decision: "rejected",
      reason: "flaky",
      detail: `the same change as ${flipped.twin} gave different outcomes for ${flipped.tests.length} test(s): ${flipped.tests.slice(0, 5).join(", ")}`,
      failing_before: state.best.failing.length,
      failing_after: now.failing.length,
      regressed: [],
    };
    return {
      verdict,
      events: [
        { type: "verdict", at, data: verdict },
        { type: "halted", at, data: halt("check_flaky", verdict.detail) },
      ],
    };
  }
  // Changed lines no gate executed cannot be judged by the gates (DESIGN §6.4): that candidate is
  // rejected, and the loop goes on.
  const unjudged = contract.guards?.coverage?.changed_lines ? uncoveredChangedLines(state, candidateId, observation) : null;
  if (unjudged) {
    const verdict: Verdict = {
      candidate_id: candidateId,
      decision: "rejected",
      reason: "check_inadequate",
      detail: unjudged,
      failing_before: state.best.failing.length,
      failing_after: now.failing.length,
      regressed: [],
    };
    return { verdict, events: withHalt(state, { type: "verdict", at, data: verdict }, now) };
  }
  const verdict = contract.mode === "optimize" ? decideOptimize(state, candidateId, observation, now) : decideCheckFixpoint(state, candidateId, now);
  const verdictEvent: EventDraft = { type: "verdict", at, data: verdict };
  // need_samples is not a decision yet: no iteration is counted, no halt considered.
  return { verdict, events: verdict.decision === "need_samples" ? [verdictEvent] : withHalt(state, verdictEvent, now) };
}

/**
 * The optimize ratchet (DESIGN §6.1, §6.3): every test that passed at t0 or in the best-so-far still
 * passes, and the metric beats the best-so-far by more than min_effect at the contract's confidence,
 * judged on readings interleaved with the best on one runner by the sequential test of statistics.ts.
 */
function decideOptimize(state: LoopState, candidateId: string, observation: Observation, now: TestStanding): Verdict {
  const { contract } = state;
  const metric = contract.metric;
  if (!metric) throw new Error("optimize contract without a metric");
  const regressed = [...new Set([...regressedTests(state.t0, now, state.t0_base), ...regressedTests(state.best, now, state.t0_base)])].sort();
  const base = { candidate_id: candidateId, failing_before: state.best.failing.length, failing_after: now.failing.length, regressed };
  if (regressed.length > 0) {
    return { ...base, decision: "rejected", reason: "regressed", detail: `broke ${regressed.length} passing test(s): ${formatList(regressed)}` };
  }
  const samples = observation.samples;
  const pairs = samples?.best.length ?? 0;
  if (!samples || samples.error !== undefined || pairs === 0 || pairs !== samples.candidate.length || pairs > metric.samples.max) {
    const why = samples?.error ?? (pairs > metric.samples.max ? `more than samples.max (${metric.samples.max}) pairs` : "no paired readings of the metric");
    return { ...base, decision: "rejected", reason: "no_samples", detail: `${metric.name}: ${why}` };
  }
  const result = compareSamples({
    best: samples.best,
    candidate: samples.candidate,
    direction: metric.direction,
    minEffect: percentValue(metric.min_effect),
    confidence: metric.confidence,
    samples: metric.samples,
  });
  const view = {
    name: metric.name,
    estimate: result.estimate,
    interval: result.interval,
    level: result.level,
    pairs: result.pairs,
    more: result.more,
    candidate_median: median(samples.candidate) ?? 0,
  };
  const range = formatInterval(result.interval);
  const summary = `${metric.name} ${formatPercent(result.estimate)} better${range} over ${result.pairs} pair(s)`;
  if (result.decision === "promote") {
    // Secondary metrics are guardrails, never optimised: a gain bought with one of them is no gain.
    const guardrail = secondaryRegression(contract, samples);
    if (guardrail) return { ...base, decision: "rejected", reason: guardrail.reason, detail: `${summary}, but ${guardrail.detail}`, metric: view };
    return { ...base, decision: "promoted", reason: "improved", detail: summary, metric: view };
  }
  if (result.decision === "reject") return { ...base, decision: "rejected", reason: "not_improved", detail: `${summary}: ${result.reason}`, metric: view };
  return { ...base, decision: "need_samples", reason: "undecided", detail: `${summary}: ${result.more} more pair(s) needed`, metric: view };
}

/** The first secondary metric that regressed past its `max_regression` (medians of the paired readings). */
function secondaryRegression(
  contract: Contract,
  samples: NonNullable<Observation["samples"]>,
): { reason: "secondary_regressed" | "no_samples"; detail: string } | null {
  for (const secondary of contract.secondary ?? []) {
    const readings = samples.secondary?.[secondary.name];
    const best = median(readings?.best ?? []);
    const candidate = median(readings?.candidate ?? []);
    if (best === null || candidate === null || best <= 0 || candidate <= 0) {
      return { reason: "no_samples", detail: `no paired readings of the secondary metric ${secondary.name}` };
    }
    const regression = secondary.direction === "lower" ? candidate / best - 1 : best / candidate - 1;
    const allowed = percentValue(secondary.max_regression);
    if (regression > allowed) {
      return {
        reason: "secondary_regressed",
        detail: `${secondary.name} regressed ${formatPercent(regression)} (${best} → ${candidate}), more than its max_regression ${secondary.max_regression}`,
      };
    }
  }
  return null;
}

/** A changed-lines reading's uncovered lines, e.g. `src/a.js:3-5,9; src/b.js:12`, ranges joined. */
function describeUncovered(uncovered: ChangedLines["uncovered"]): string {
  const ranges = (lines: readonly number[]) => {
    const parts: string[] = [];
    let start = lines[0];
    let end = start;
    for (const line of [...lines.slice(1), Number.NaN]) {
      if (start === undefined || end === undefined) break;
      if (line === end + 1) end = line;
      else {
        parts.push(start === end ? `${start}` : `${start}-${end}`);
        start = line;
        end = line;
      }
    }
    return parts.join(",");
  };
  return uncovered.map((file) => `${file.path}:${ranges(file.lines)}`).join("; ");
}

/**
 * Why a candidate's changed lines cannot be judged by the gates (`guards.coverage.changed_lines`), or
 * null: the reading is missing, was taken against another commit than the candidate's parent, could not
 * be read, or lists changed lines no gate executed.
 */
function uncoveredChangedLines(state: LoopState, candidateId: string, observation: Observation): string | null {
  const reading = observation.guards?.changed_lines;
  const candidate = state.candidates[candidateId];
  const parentCommit = candidate?.parent === BASELINE_ID ? state.t0.commit : candidate ? state.candidates[candidate.parent]?.commit : undefined;
  if (!reading) return "no changed-lines coverage was read (guards.coverage.changed_lines), so nothing shows the gates ran what the candidate changed";
  if (reading.error !== undefined) return `changed-lines coverage could not be read: ${reading.error}`;
  if (parentCommit === undefined || reading.against !== parentCommit) {
    return `the changed-lines reading is against ${reading.against.slice(0, 12)}, not the candidate's parent ${parentCommit?.slice(0, 12) ?? "(unknown)"}`;
  }
  if (reading.uncovered_count === 0) return null;
  const shown = reading.uncovered.reduce((sum, file) => sum + file.lines.length, 0);
  return `${reading.uncovered_count} of ${reading.measured} changed line(s) are executed by no gate, so the check cannot judge them: ${describeUncovered(reading.uncovered)}${shown < reading.uncovered_count ? ` (and ${reading.uncovered_count - shown} more)` : ""}`;
}

/** Test ids whose outcome differs from an earlier evaluation of the same tree (same parent, same change). */
function flippedTests(state: LoopState, candidateId: string, now: TestStanding): { twin: string; tests: string[] } | null {
  const candidate = state.candidates[candidateId];
  if (!candidate) return null;
  const twin = (state.same_tree[sameTreeKey(candidate.parent, candidate.diff_sha256)] ?? [])
    .map((id) => state.candidates[id])
    .find((other) => other !== undefined && other.candidate_id !== candidateId && other.report !== null);
  if (!twin?.report) return null;
  // Through the standings: linear in what either differs from t0, not in the suite.
  const tests = changedOutcomes(now, twin.report.tests, state.t0_base);
  return tests.length > 0 ? { twin: twin.candidate_id, tests } : null;
}

/**
 * No-convergence since the last promotion (DESIGN §6.2). Unsatisfiable: in ≥ 2 candidates, fixing a
 * test A broke a passing test B, and no candidate fixed A without breaking B. Oscillation: a test that
 * passes in the promoted state failed again in ≥ 2 candidates. (Under the check_fixpoint ratchet the
 * failing set never returns to an earlier promoted value, so that form of oscillation cannot occur.)
 */
export function convergenceHalt(state: LoopState): Halt | null {
  const recent = state.regressions_since_promotion;
  const unsatisfiable = mutuallyExclusivePair(recent);
  if (unsatisfiable) {
    return halt(
      "unsatisfiable_constraints",
      `fixing ${unsatisfiable.fixed} broke ${unsatisfiable.broken} in all ${unsatisfiable.count} attempts since the last promotion: the two look mutually exclusive`,
    );
  }
  const brokenCount = new Map<string, number>();
  for (const entry of recent) for (const id of entry.broken) brokenCount.set(id, (brokenCount.get(id) ?? 0) + 1);
  for (const [id, count] of brokenCount) {
    if (count >= 2) return halt("oscillation_detected", `${id} passes in the promoted state but failed again in ${count} candidates since`);
  }
  return null;
}

/**
 * The first (fixed A, broken B) pair, in the order the attempts first show it, such that A was fixed
 * in at least two attempts and every attempt that fixed A broke B. Never pairs every fixed id with
 * every broken one (a candidate that fixes thousands and breaks thousands would make millions): the
 * B of an A depends only on which attempts fixed it, so it is found once per distinct set of attempts,
 * as the first id its first attempt broke that every other one broke too.
 */
function mutuallyExclusivePair(recent: LoopState["regressions_since_promotion"]): { fixed: string; broken: string; count: number } | null {
  const attemptsFixing = new Map<string, number[]>();
  recent.forEach((entry, index) => {
    for (const id of new Set(entry.fixed)) {
      const attempts = attemptsFixing.get(id);
      if (attempts) attempts.push(index);
      else attemptsFixing.set(id, [index]);
    }
  });
  const brokenSets = recent.map((entry) => new Set(entry.broken));
  const brokenInAll = new Map<string, string | undefined>();
  for (const [index, entry] of recent.entries()) {
    for (const fixed of entry.fixed) {
      const attempts = attemptsFixing.get(fixed) ?? [];
      // Each A is judged once, at the attempt that first fixed it: where its pairs first appear.
      if (attempts[0] !== index || attempts.length < 2) continue;
      const key = attempts.join(",");
      if (!brokenInAll.has(key)) {
        const others = attempts.slice(1).map((other) => brokenSets[other] ?? new Set<string>());
        brokenInAll.set(
          key,
          entry.broken.find((id) => others.every((set) => set.has(id))),
        );
      }
      const broken = brokenInAll.get(key);
      if (broken !== undefined) return { fixed, broken, count: attempts.length };
    }
  }
  return null;
}

/** The verdict on a candidate that was decided without an evaluation (agent failure, empty change). */
export function decideUnevaluated(
  state: LoopState,
  candidateId: string,
  reason: "agent_failed" | "no_change" | "review_rejected",
  detail: string,
  at: string,
): { verdict: Verdict; events: EventDraft[] } {
  const verdict: Verdict = {
    candidate_id: candidateId,
    decision: "rejected",
    reason,
    detail,
    failing_before: state.best.failing.length,
    failing_after: null,
    regressed: [],
  };
  return { verdict, events: withHalt(state, { type: "verdict", at, data: verdict }, null) };
}

/** Consecutive agent failures that halt the loop with `execution_failure`. */
export const MAX_CONSECUTIVE_AGENT_FAILURES = 3;

/**
 * The halt, if any, that follows a state at time `at` (DESIGN §6.2, §7). Success is checked first:
 * a change that made every gate pass is kept even when it spent the last of the budget.
 */
export function haltAfter(state: LoopState, at: string): Halt | null {
  const { contract } = state;
  if (contract.mode === "optimize") {
    const target = contract.metric?.target;
    const best = state.best.metric;
    const reached = target !== undefined && best !== null && (contract.metric?.direction === "higher" ? best >= target : best <= target);
    if (reached) return halt("success_condition_met", `${contract.metric?.name} reached ${best} (target ${target}) at ${state.best.candidate_id}`);
  } else if (state.best.failing.length === 0) {
    return halt("success_condition_met", state.iterations === 0 ? "the baseline already passes every gate" : "every gate passes");
  }
  const budget = contract.stop.budget;
  if (budget?.cost_usd !== undefined && state.cost_usd >= budget.cost_usd) {
    return halt("budget_exceeded", `the agents reported $${state.cost_usd.toFixed(2)}, the budget is $${budget.cost_usd.toFixed(2)}`);
  }
  const wallMs = budget?.wall === undefined ? null : parseDuration(budget.wall);
  if (wallMs !== null && Date.parse(at) - Date.parse(state.created_at) >= wallMs) {
    return halt("budget_exceeded", `the loop has run for ${budget?.wall ?? ""} or more, its wall-time budget`);
  }
  if (state.consecutive_agent_failures >= MAX_CONSECUTIVE_AGENT_FAILURES) {
    return halt("execution_failure", `the agent command failed ${state.consecutive_agent_failures} times in a row`);
  }
  const noConvergence = convergenceHalt(state);
  if (noConvergence) return noConvergence;
  const sincePromotion = state.iterations - state.last_promotion_iteration;
  if (sincePromotion >= contract.stop.no_progress) {
    return halt("no_progress_detected", `${sincePromotion} iterations without a promotion`);
  }
  if (state.iterations >= contract.stop.max_iterations) {
    const stillImproving = state.last_promotion_iteration > 0 && sincePromotion < contract.stop.no_progress;
    return halt(
      "max_iterations_reached",
      stillImproving
        ? `reached ${contract.stop.max_iterations} iterations while still improving: raise the limit`
        : `reached ${contract.stop.max_iterations} iterations without improving: do not retry as is`,
      { still_improving: stillImproving },
    );
  }
  return null;
}

/** The verdict's event, and the halt that follows it, if any: judged on the loop as the verdict leaves it. */
function withHalt(state: LoopState, verdictEvent: Extract<EventDraft, { type: "verdict" }>, tests: TestStanding | null): EventDraft[] {
  const after = loopAfterVerdict(state, verdictEvent.data, tests);
  const computed = haltAfter(after, verdictEvent.at);
  return computed ? [verdictEvent, { type: "halted", at: verdictEvent.at, data: computed }] : [verdictEvent];
}
