import { html } from "hono/html";
import { BASELINE_ID, type CandidateState, type ChainHead, type LoopState } from "#shared/engine/index.js";
import { explainState } from "#shared/explain/explain-state.js";
import { formatLabels } from "#shared/engine/labels.js";
import { metricChart } from "../page/chart.js";
import { page, type Viewer } from "./layout.js";
import { candidateHref, candidateLink, labelsText, scoreText, statusWord } from "./page-parts.js";

// The dashboard's loop page (docs/dashboard.md): what the loop is for and where it stands — the halt in
// plain words with the next step (what `explain` prints), the metric over iterations, a pass/fail strip per
// gate, the candidate tree, runners and leases, the receipt. Everything inside `#live` is rendered again
// (`?part=live`) when the loop's event stream says something happened; at 5,000 candidates it stays a few
// hundred kilobytes: the chart and the strips downsample, the tree folds rejected leaves away.

/** How many rejected leaves of one node the tree names before it links to the rest. */
export const LEAVES_NAMED = 8;
/** How deep the tree nests a branch off the promoted path before it links to the rest. */
const BRANCH_DEPTH = 6;
/** Width of the strips' drawing, in the SVG's units: past this many candidates a strip aggregates per column. */
const STRIP_WIDTH = 640;

/** The gate outcomes of every evaluated candidate, in proposal order: a strip per gate. */
function gateStrips(state: LoopState, loopId: string) {
  const evaluated = state.candidate_order.flatMap((id) => {
    const report = state.candidates[id]?.report;
    return report ? [{ id, gates: new Map(report.gates.map((gate) => [gate.name, gate.passed])) }] : [];
  });
  if (evaluated.length === 0) return html`<p class="muted">No candidate was evaluated yet.</p>`;
  const names = state.contract.gates.map((gate) => gate.name);
  const step = Math.min(8, STRIP_WIDTH / evaluated.length);
  const rows = names.map((name) => {
    let passed = 0;
    let failed = 0;
    // Per column of the drawing: failed when any candidate in it failed (a failure is never averaged away).
    const columns = new Map<number, "pass" | "fail">();
    evaluated.forEach((candidate, index) => {
      const outcome = candidate.gates.get(name);
      if (outcome === undefined) return;
      if (outcome) passed++;
      else failed++;
      const column = Math.floor(index * step);
      if (columns.get(column) !== "fail") columns.set(column, outcome ? "pass" : "fail");
    });
    const notRun = evaluated.length - passed - failed;
    const marks = (kind: "pass" | "fail") =>
      [...columns]
        .filter(([, outcome]) => outcome === kind)
        .map(([column]) => `M${column + 1} ${kind === "fail" ? 2 : 12}V22`)
        .join("");
    // Failures are tall bars, passes short ones: readable without colour.
    return html`<tr><th scope="row">${name}</th><td><svg class="strip" viewBox="0 0 ${STRIP_WIDTH + 2} 24" width="100%" height="24" role="img" aria-label="gate ${name}: ${passed} passed, ${failed} failed, ${notRun} not run" data-gate="${name}" data-passed="${passed}" data-failed="${failed}">
<path d="${marks("pass")}" class="pass" stroke-width="${Math.max(1, step - 1)}" /><path d="${marks("fail")}" class="fail" stroke-width="${Math.max(1, step - 1)}" /></svg></td><td>${passed} passed, ${failed} failed${notRun > 0 ? `, ${notRun} not run` : ""}</td></tr>`;
  });
  return html`<table class="strips"><tr><th>gate</th><th>over ${evaluated.length} evaluated candidates (tall: failed)</th><th></th></tr>${rows}</table>
<p class="muted">Every candidate: <a href="/loops/${loopId}/candidates">the candidates' list</a>.</p>`;
}

/** The candidates under each candidate (and under t0), in proposal order. */
function childrenOf(state: LoopState): Map<string, CandidateState[]> {
  const children = new Map<string, CandidateState[]>();
  for (const id of state.candidate_order) {
    const candidate = state.candidates[id];
    if (!candidate) continue;
    const siblings = children.get(candidate.parent);
    if (siblings) siblings.push(candidate);
    else children.set(candidate.parent, [candidate]);
  }
  return children;
}

/** The promoted path: from t0 to the best-so-far, through each promotion's parent. */
function promotedPath(state: LoopState): string[] {
  const path: string[] = [];
  for (let id = state.best.candidate_id; id !== BASELINE_ID;) {
    path.unshift(id);
    const parent = state.candidates[id]?.parent;
    if (parent === undefined || path.length > state.candidate_order.length) break;
    id = parent;
  }
  return [BASELINE_ID, ...path];
}

/**
 * The candidate tree: the promoted path from t0 to the best as the spine (one flat list, however long),
 * each node with what was tried from it — rejected leaves folded into a count with the first few named,
 * anything else nested a few levels deep, then linked.
 */
function candidateTree(state: LoopState, loopId: string) {
  const children = childrenOf(state);
  const path = promotedPath(state);
  const onPath = new Set(path);
  const node = (id: string) => {
    const candidate = state.candidates[id];
    return candidate
      ? html`${candidateLink(loopId, id)} <span class="${candidate.status}">${statusWord(candidate)}</span>`
      : html`<strong>t0</strong> <span class="muted">(the baseline)</span>`;
  };
  const branches = (id: string, depth: number): ReturnType<typeof html> | string => {
    const under = (children.get(id) ?? []).filter((child) => !onPath.has(child.candidate_id));
    if (under.length === 0) return "";
    const leaves = under.filter((child) => child.status === "rejected" && !children.has(child.candidate_id));
    const folded = new Set(leaves);
    const others = under.filter((child) => !folded.has(child));
    const leafList =
      leaves.length > 0
        ? html`<li><details><summary>${leaves.length} rejected ${leaves.length === 1 ? "leaf" : "leaves"}</summary>${leaves
            .slice(0, LEAVES_NAMED)
            .map((leaf, index) => html`${index > 0 ? ", " : ""}${candidateLink(loopId, leaf.candidate_id)}`)}${
            leaves.length > LEAVES_NAMED ? html` … <a href="/loops/${loopId}/candidates?parent=${id}&amp;status=rejected">all ${leaves.length}</a>` : ""
          }</details></li>`
        : "";
    const nested = others.map((child) =>
      depth >= BRANCH_DEPTH
        ? html`<li>${node(child.candidate_id)} <a href="/loops/${loopId}/candidates?parent=${child.candidate_id}">what was tried from it</a></li>`
        : html`<li>${node(child.candidate_id)}${branches(child.candidate_id, depth + 1)}</li>`,
    );
    return html`<ul class="tree">${nested}${leafList}</ul>`;
  };
  return html`<ol class="tree root" data-tree>${path.map((id) => html`<li class="on-path" data-path="${id}">${node(id)}${branches(id, 1)}</li>`)}</ol>
<p class="muted">In bold: the promoted path from t0 to the best (${path.length - 1} promotion${path.length === 2 ? "" : "s"}).</p>`;
}

/** The runners: which labels the loop asks of them, who measured t0, and who holds a lease now. */
function runners(state: LoopState) {
  const leased = state.unsettled.flatMap((id) => {
    const candidate = state.candidates[id];
    return candidate?.status === "leased" && candidate.lease ? [{ id, lease: candidate.lease }] : [];
  });
  const labels = state.contract.evaluate?.labels;
  return html`<p>${labels && Object.keys(labels).length > 0 ? html`Evaluated only by runners labelled <code>${formatLabels(labels)}</code>.` : "Any runner of the team may evaluate."}
${state.t0_measured_by ? html` t0 was measured by <code>${state.t0_measured_by.runner_id}</code>.` : ""}</p>
${
  leased.length > 0
    ? html`<table data-leases><tr><th>candidate</th><th>runner</th><th>its labels</th><th>lease</th><th>expires</th></tr>${leased.map(
        ({ id, lease }) =>
          html`<tr><td>${candidateLink(state.loop_id, id)}</td><td><code>${lease.runner_id}</code></td><td>${labelsText(lease.labels)}</td><td><code>${lease.lease_id}</code> (token ${lease.fencing_token})</td><td>${lease.expires_at}</td></tr>`,
      )}</table>`
    : html`<p class="muted">No lease is held now.</p>`
}`;
}

/** The halt in plain words, with the evidence and the next step: `explain`'s own text. */
function haltPanel(state: LoopState) {
  const { lines } = explainState(state);
  if (!state.halt) {
    return html`<p class="halt" data-status="running"><strong>Running.</strong> ${state.iterations} of at most ${state.contract.stop.max_iterations} iterations.</p>`;
  }
  const exit = state.halt.exit_class;
  return html`<section class="halt" data-status="halted" data-halt="${state.halt.halt_reason}" data-class="${exit === 10 ? "converged" : "other"}" aria-label="why it halted">
<p><strong>Halted: ${state.halt.halt_reason}</strong> (exit ${exit})</p>
<pre>${lines.join("\n")}</pre>
</section>`;
}

/** The contract in brief: gates, metric, stop conditions and scope, with its hash. */
function contractSummary(state: LoopState) {
  const { contract } = state;
  const metric = contract.metric;
  return html`<dl>
<dt>Gates</dt><dd>${contract.gates.map((gate, index) => html`${index > 0 ? ", " : ""}<code>${gate.name}</code>${gate.soft ? " (soft)" : ""}`)}</dd>
${metric ? html`<dt>Metric</dt><dd><code>${metric.name}</code>, ${metric.direction} is better</dd>` : ""}
<dt>Stops at</dt><dd>${contract.stop.max_iterations} iterations, or ${contract.stop.no_progress} without progress${contract.stop.budget?.cost_usd === undefined ? "" : `, or $${contract.stop.budget.cost_usd} of reported cost`}</dd>
<dt>Scope</dt><dd>${contract.scope ? contract.scope.map((glob, index) => html`${index > 0 ? ", " : ""}<code>${glob}</code>`) : "none named: only the protected set guards the check"}</dd>
<dt>Contract</dt><dd><code>${state.contract_hash.slice(0, 16)}…</code></dd>
</dl>`;
}

/** The part of the page the live updates render again: everything that changes as the loop runs. */
export function loopLive(state: LoopState, head: ChainHead) {
  const optimize = state.contract.mode === "optimize";
  const baseline = optimize ? state.t0.metric : state.t0.failing.length;
  const loopId = state.loop_id;
  return html`${haltPanel(state)}
<h2>Baseline and best</h2>
<table>
<tr><th></th><th>commit</th><th>${optimize ? (state.contract.metric?.name ?? "metric") : "failing tests"}</th></tr>
<tr><td>t0 (baseline)</td><td><code>${state.t0.commit.slice(0, 12)}</code></td><td>${scoreText(state, state.t0)}</td></tr>
<tr><td>best: ${state.best.candidate_id === BASELINE_ID ? "t0" : candidateLink(loopId, state.best.candidate_id)}</td><td><code>${state.best.commit.slice(0, 12)}</code></td><td>${scoreText(state, state.best)}</td></tr>
</table>
${state.final_receipt ? html`<p>Receipt: <a href="/r/${state.final_receipt}" data-receipt>/r/${state.final_receipt}</a> (public, verifiable by anyone).</p>` : ""}
<h2>Over the iterations</h2>
${metricChart(state, baseline, { href: (id) => candidateHref(loopId, id) })}
<h2>Gates</h2>
${gateStrips(state, loopId)}
<h2>Candidates</h2>
${candidateTree(state, loopId)}
<h2>Runners and leases</h2>
${runners(state)}
<p class="muted" data-head="${head.seq}">Event ${head.seq}, <code>${head.hash.slice(0, 16)}…</code>.</p>`;
}

/** The whole loop page; `notice` says the outcome of an action just taken. */
export function loopPage(state: LoopState, head: ChainHead, viewer: Viewer, notice?: string) {
  const loopId = state.loop_id;
  return page(
    state.contract.name,
    html`<p class="muted"><a href="/loops">Loops</a> › ${loopId}</p>
<h1>${state.contract.name}</h1>
<p>${state.contract.mode}${state.contract.objective ? html` — ${state.contract.objective}` : ""}</p>
${notice ? html`<p class="notice" role="status">${notice}</p>` : ""}
${
  !state.halt && viewer.mayAct
    ? html`<form method="post" action="/loops/${loopId}/cancel" data-cancel>
<input type="hidden" name="csrf" value="${viewer.csrf}">
<label for="reason">Cancel this loop: why?</label> <input id="reason" name="reason" maxlength="500" size="30"> <button type="submit">Cancel loop</button>
<span class="muted">(halts it as <code>cancelled</code>, exit 11, with a signed receipt)</span>
</form>`
    : ""
}
<details><summary>Contract</summary>${contractSummary(state)}</details>
<p class="muted" aria-live="polite" data-live-status></p>
<div id="live" data-live data-loop="${loopId}" data-seq="${head.seq}" data-halted="${state.halt ? "yes" : "no"}">
${loopLive(state, head)}
</div>`,
    { viewer, script: true },
  );
}
