import { html } from "hono/html";
import { addMs, BASELINE_ID, isDerivedTestId, reviewTimeoutMs, type CandidateState, type LoopEvent, type LoopState } from "#shared/engine/index.js";
import { gateOutcome, storedFilesOf } from "#shared/explain/gate-failure.js";
import { formatInterval, formatPercent } from "#shared/format-percent.js";
import type { ArtifactRef, Observation } from "#shared/wire/observation.js";
import { page, type Viewer } from "./layout.js";
import { candidateHref, candidateLink, labelsText, statusWord } from "./page-parts.js";

// The dashboard's candidate page (docs/dashboard.md): what changed, how each gate ended and which tests
// failed or regressed, the samples and interval an optimize verdict rests on, the guard readings, the
// stored files (downloads; an SVG shown inline as an image, where it cannot run script), the agent's run,
// report and context, its request to change protected files and the answer, and how its zones were confined. Read from the folded state and the candidate's own
// events (its proposal and last observation), never from the whole log.

/** How many test ids a list names before it counts the rest. */
export const TESTS_NAMED = 200;
/** How many sample pairs the table shows before it counts the rest. */
const PAIRS_SHOWN = 100;
/** How many changed paths the page names before it counts the rest. */
const PATHS_NAMED = 200;

/** Where the dashboard serves one of the loop's stored files. */
export function fileHref(loopId: string, file: ArtifactRef, view?: "svg"): string {
  return `/loops/${loopId}/files/${file.sha256}${view ? `?view=${view}` : ""}`;
}

/** Whether a stored file is an SVG drawing (a flame graph, a chart), shown inline as an image. */
function isSvg(file: ArtifactRef): boolean {
  return file.content_type.toLowerCase().startsWith("image/svg+xml") || file.name.toLowerCase().endsWith(".svg");
}

/** A list of test ids, the first TESTS_NAMED of them, the rest counted. */
function testList(ids: readonly string[], what: string) {
  const named = ids.filter((id) => !isDerivedTestId(id));
  if (named.length === 0) return html`<p class="muted">No ${what}.</p>`;
  return html`<ul data-tests="${what}">${named.slice(0, TESTS_NAMED).map((id) => html`<li><code>${id}</code></li>`)}</ul>${
    named.length > TESTS_NAMED ? html`<p class="muted">… and ${named.length - TESTS_NAMED} more.</p>` : ""
  }`;
}

/** The last observation reported for the candidate: its samples and guard readings. */
function lastObservation(events: readonly LoopEvent[]): Observation | null {
  for (let index = events.length - 1; index >= 0; index--) {
    const event = events[index];
    if (event?.type === "observation_reported") return event.data.observation;
  }
  return null;
}

/** The proposal's record: who proposed it and how. */
function proposalOf(events: readonly LoopEvent[]) {
  const event = events.find((candidate) => candidate.type === "candidate_proposed");
  return event?.type === "candidate_proposed" ? event.data : null;
}

/** The optimize verdict's figures and the pairs measured. */
function samplesSection(candidate: CandidateState, observation: Observation | null) {
  const metric = candidate.verdict?.metric ?? candidate.pending?.metric;
  const samples = observation?.samples;
  if (!metric && !samples) return "";
  const pairs = samples ? samples.candidate.map((value, index) => ({ best: samples.best[index], candidate: value })) : [];
  return html`<h2>Samples</h2>
${
  metric
    ? html`<p><strong>${formatPercent(metric.estimate)}</strong> better than the best-so-far on <code>${metric.name}</code>${formatInterval(metric.interval)}${
        metric.level === null ? "" : ` (${Math.round(metric.level * 100)}% interval)`
      }, over ${metric.pairs} interleaved pair(s); median ${metric.candidate_median}.</p>`
    : ""
}
${samples?.error ? html`<p class="notice">A reading is missing: ${samples.error}</p>` : ""}
${
  pairs.length > 0
    ? html`<table data-samples><tr><th>pair</th><th>best-so-far</th><th>this candidate</th></tr>${pairs
        .slice(0, PAIRS_SHOWN)
        .map((pair, index) => html`<tr><td>${index + 1}</td><td>${pair.best ?? "–"}</td><td>${pair.candidate}</td></tr>`)}</table>${
        pairs.length > PAIRS_SHOWN ? html`<p class="muted">… and ${pairs.length - PAIRS_SHOWN} more pairs.</p>` : ""
      }`
    : ""
}`;
}

/** What the guards read on its tree: the changed paths, protected files, coverage and the contract's hash. */
function guardsSection(observation: Observation | null) {
  const guards = observation?.guards;
  if (!guards) return html`<h2>Guard readings</h2><p class="muted">None were reported.</p>`;
  const changed = guards.changed_paths;
  return html`<h2>What changed</h2>
${
  changed
    ? html`<p>${changed.total} file(s) changed against <code>${changed.against.slice(0, 12)}</code>:</p>
<ul data-changed>${changed.paths.slice(0, PATHS_NAMED).map((path) => html`<li><code>${path}</code></li>`)}</ul>${
        changed.total > Math.min(changed.paths.length, PATHS_NAMED)
          ? html`<p class="muted">… and ${changed.total - Math.min(changed.paths.length, PATHS_NAMED)} more.</p>`
          : ""
      }`
    : html`<p class="muted">The runner did not report the changed paths.</p>`
}
<h2>Guard readings</h2>
<ul>
<li>Protected files hashed: ${Object.keys(guards.protected_files).length}</li>
<li>Coverage: ${guards.coverage_percent === null ? "not measured" : `${guards.coverage_percent}%`}</li>
<li>Contract file: ${guards.contract === null ? "not read" : "hash" in guards.contract ? html`<code>${guards.contract.hash.slice(0, 16)}…</code>` : `${guards.contract.error}`}</li>
</ul>`;
}

/** Its stored files: gate logs and the contract's artifacts, each a download; SVG drawings shown as images. */
function filesSection(loopId: string, candidate: CandidateState) {
  const report = candidate.report;
  if (!report) return "";
  const files = storedFilesOf(report);
  return html`<h2>Files</h2>
${
  files.length === 0
    ? html`<p class="muted">It stored no files.</p>`
    : html`<table data-files><tr><th>file</th><th>bytes</th><th>sha256</th></tr>${files.map(
        (file) =>
          html`<tr><td><a href="${fileHref(loopId, file)}" download="${file.name}">${file.name}</a></td><td>${file.size}</td><td><code>${file.sha256.slice(0, 16)}…</code></td></tr>`,
      )}</table>`
}
${files.filter(isSvg).map((file) => html`<figure><img src="${fileHref(loopId, file, "svg")}" alt="${file.name} (drawing)" style="max-width:100%"><figcaption>${file.name}</figcaption></figure>`)}
${report.artifact_errors ? html`<p class="notice">Not stored as sent: ${report.artifact_errors.map((error, index) => html`${index > 0 ? "; " : ""}${error.name}: ${error.detail}`)}</p>` : ""}`;
}

/** Who evaluated it: the runner of its last lease, with the labels it claimed. */
function evaluatedBy(events: readonly LoopEvent[]) {
  const granted = events.findLast((event) => event.type === "lease_granted");
  if (granted?.type !== "lease_granted") return html`<p class="muted">No runner has taken its evaluation.</p>`;
  return html`<p data-runner="${granted.data.runner_id}">Evaluated by runner <code>${granted.data.runner_id}</code> (labels: ${labelsText(granted.data.labels)}) on lease <code>${granted.data.lease_id}</code>.</p>`;
}

/** The agent's run, its report about itself, and the context it was given. */
function agentSection(candidate: CandidateState, proposer: string | null) {
  const agent = candidate.agent;
  const report = candidate.agent_report;
  return html`<h2>Agent</h2>
<ul>
<li>Proposed by ${proposer ? html`<code>${proposer}</code>` : "an unnamed proposer"} at ${candidate.proposed_at}</li>
${
  agent
    ? html`<li>Run: ${agent.timed_out ? "timed out" : `exit ${agent.exit_code ?? "by signal"}`} after ${Math.round(agent.duration_ms)} ms; confined by ${agent.confinement ? html`<code>${agent.confinement.mechanism}</code>, network ${agent.confinement.network}` : "nothing recorded"}</li>`
    : html`<li>No agent run was observed (proposed with <code>step</code>).</li>`
}
${candidate.report?.exec_zone ? html`<li>Evaluation confined by <code>${candidate.report.exec_zone.mechanism}</code>, network ${candidate.report.exec_zone.network}</li>` : ""}
${report?.agent?.model ? html`<li>Model: <code>${report.agent.model}</code>${report.agent.provider ? ` (${report.agent.provider})` : ""}</li>` : ""}
${report?.cost?.usd === undefined ? "" : html`<li>Reported cost: $${report.cost.usd.toFixed(4)}</li>`}
${report?.description ? html`<li>Its description: ${report.description}</li>` : ""}
</ul>
${contextSection(candidate)}
${
  report?.context_files && report.context_files.length > 0
    ? html`<h3>Files the agent says it read</h3><table><tr><th>path</th><th>sha256</th></tr>${report.context_files.map(
        (file) => html`<tr><td><code>${file.path}</code></td><td>${file.sha256 ? html`<code>${file.sha256.slice(0, 16)}…</code>` : "unread"}</td></tr>`,
      )}</table>`
    : ""
}`;
}

/** The context the runner built for its agent run (docs/design.md §6.9), file by file, as its proposal recorded it. */
function contextSection(candidate: CandidateState) {
  const context = candidate.context;
  if (!context) return "";
  return html`<h3>Context the runner gave it</h3>
<p data-context="${context.files.length}">${context.files.length} file(s), about ${context.tokens} of ${context.budget} tokens; <code>context.md</code> <code>${context.context_sha256.slice(0, 16)}…</code>${
    context.left_out.length > 0 ? `; left out for the budget: ${context.left_out.join(", ")}` : ""
  }.</p>
${
  context.files.length > 0
    ? html`<table><tr><th>path</th><th>tier</th><th>sha256</th></tr>${context.files.map(
        (file) => html`<tr><td><code>${file.path}</code></td><td>${file.tier}</td><td><code>${file.sha256.slice(0, 16)}…</code></td></tr>`,
      )}</table>`
    : ""
}`;
}

/**
 * Its agent's request to change protected files and a person's answer (docs/design.md §6.8): what it asks
 * and why, then who answered and how, or until when it waits. Answered with `loopwarden ack` / `reject`.
 */
function reviewSection(state: LoopState, candidate: CandidateState) {
  const request = candidate.review_request;
  if (!request) return "";
  const review = candidate.review;
  const answer = review
    ? html`<p data-review="${review.decision}">${review.decision === "ack" ? "Approved" : "Refused"} by <code>${review.by}</code> at ${review.at}: ${review.note}</p>`
    : candidate.status === "awaiting_review"
      ? html`<p data-review="awaiting">Waits for a person's answer until ${addMs(candidate.proposed_at, reviewTimeoutMs(state))}, then the loop halts <code>human_required</code>. Answer with <code>loopwarden ack ${candidate.candidate_id} --note …</code> or <code>loopwarden reject ${candidate.candidate_id} --note …</code>.</p>`
      : html`<p data-review="unanswered" class="muted">Not answered: the candidate was decided without waiting for one.</p>`;
  return html`<h2>Review</h2>
<p>Its agent asks to change ${request.files.map((file, index) => html`${index > 0 ? ", " : ""}<code>${file}</code>`)}. Its reason, in the agent's words: ${request.why}</p>
${answer}`;
}

/** A candidate's page. `events` are its own events, in order. */
export function candidatePage(state: LoopState, candidate: CandidateState, events: readonly LoopEvent[], viewer: Viewer) {
  const loopId = state.loop_id;
  const verdict = candidate.verdict;
  const report = candidate.report;
  const observation = lastObservation(events);
  const proposal = proposalOf(events);
  return page(
    `${candidate.candidate_id} · ${state.contract.name}`,
    html`<p class="muted"><a href="/loops">Loops</a> › <a href="/loops/${loopId}">${state.contract.name}</a> › ${candidate.candidate_id}</p>
<h1>${candidate.candidate_id}: <span class="${candidate.status}">${statusWord(candidate)}</span></h1>
<p>Commit <code>${candidate.commit}</code>, from ${candidate.parent === BASELINE_ID ? "t0" : candidateLink(loopId, candidate.parent)}. Change <code>${candidate.diff_sha256.slice(0, 16)}…</code>${candidate.empty ? " (no change)" : ""}.</p>
${verdict ? html`<p data-verdict="${verdict.decision}">${verdict.detail}</p>` : ""}
${reviewSection(state, candidate)}
<h2>Gates</h2>
${evaluatedBy(events)}
${
  report
    ? html`<table data-gates><tr><th>gate</th><th>outcome</th><th>log</th></tr>${report.gates.map(
        (gate) =>
          html`<tr><td>${gate.name}${gate.soft ? " (soft)" : ""}</td><td class="${gate.passed ? "promoted" : "rejected"}">${gate.passed ? "passed" : "FAILED"}: ${gateOutcome(gate)}</td><td>${gate.log ? html`<a href="${fileHref(loopId, gate.log)}">${gate.log.name}</a>` : "–"}</td></tr>`,
      )}</table>`
    : html`<p class="muted">Not evaluated${candidate.status === "rejected" ? " (rejected before evaluation)" : " yet"}.</p>`
}
${
  report
    ? html`<h2>Tests</h2>
<p>${report.tests.failing.filter((id) => !isDerivedTestId(id)).length} failing, ${report.tests.passing_count} passing${verdict ? `; ${verdict.failing_before} failed before it` : ""}.</p>
<h3>Regressed (passed before, fail here)</h3>
${testList(verdict?.regressed ?? [], "regressed tests")}
<h3>Failing</h3>
${testList(report.tests.failing, "failing tests")}`
    : ""
}
${samplesSection(candidate, observation)}
${guardsSection(observation)}
${filesSection(loopId, candidate)}
${agentSection(candidate, proposal ? (proposal.proposer.kind === "command" ? `the agent command ${proposal.proposer.command}` : "step") : null)}
<p class="muted">Its events: ${events.map((event, index) => html`${index > 0 ? ", " : ""}#${event.seq} ${event.type}`)}. <a href="${candidateHref(loopId, candidate.candidate_id)}">Permalink</a>.</p>`,
    { viewer },
  );
}
