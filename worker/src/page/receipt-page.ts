import { html } from "hono/html";
import { BASELINE_ID, HALT_MEANINGS, type CandidateState, type LoopState } from "#shared/engine/index.js";
import type { ArtifactRef } from "#shared/wire/observation.js";
import type { ConfinementAttestation, OracleAttestation, ReceiptStatement } from "#shared/receipts/index.js";
import { formatInterval, formatPercent } from "#shared/format-percent.js";
import { storedFilesOf } from "#shared/explain/gate-failure.js";
import { metricChart } from "./chart.js";

// The public receipt page (DESIGN §9): what the loop set out to do, why it stopped and how its zones were
// confined (DESIGN §6.7), the baseline against the best, every candidate with its verdict and its stored
// files (DESIGN §10), and the metric over iterations — rendered on the server, so it reads without
// JavaScript. Only the verification panel runs in the browser (/r/assets/verify.js):
// everything else on the page is what the signed statement and its log say, and the panel checks them.

/** How many decided candidates one page of the table lists: a loop of 5,000 candidates is 25 pages, never one huge one. */
export const CANDIDATES_PER_PAGE = 200;
/** How many of a candidate's files its row links: its failing gates' logs first; the rest are a command away. */
export const FILES_PER_CANDIDATE = 4;

/** Where the page serves a file the signed log names (`/r/<id>/files/<sha256>`, routes/receipts.ts). */
function fileHref(receiptId: string, file: ArtifactRef): string {
  return `/r/${receiptId}/files/${file.sha256}`;
}

/** One evaluation's files in full, each linked, with its size and digest. */
function fileTable(receiptId: string, files: readonly ArtifactRef[]) {
  return html`<table>
<tr><th>file</th><th>bytes</th><th>sha256</th></tr>
${files.map((file) => html`<tr><td><a href="${fileHref(receiptId, file)}">${file.name}</a></td><td>${file.size}</td><td><code>${file.sha256.slice(0, 16)}…</code></td></tr>`)}
</table>`;
}

/**
 * What t0's and the best's evaluations stored (their gate logs, the contract's artifacts, the metric's
 * output), in full: the evidence the headline rests on, named in the signed log by digest and linked.
 * Other candidates' files are linked from their rows (`candidateFiles`), and listed in full here when the
 * page is asked for one's (`?files=cN`).
 */
function storedFiles(receiptId: string, state: LoopState, asked: string | undefined) {
  const t0 = storedFilesOf(state.t0_evidence);
  const report = state.best.candidate_id === BASELINE_ID ? null : state.candidates[state.best.candidate_id]?.report;
  const best = report ? storedFilesOf(report) : [];
  const other = asked === undefined || asked === state.best.candidate_id ? undefined : state.candidates[asked];
  const others = other?.report ? storedFilesOf(other.report) : [];
  if (t0.length === 0 && best.length === 0 && others.length === 0) return "";
  return html`${
    others.length > 0
      ? html`<h2 id="files">Files stored with ${other?.candidate_id}</h2>
${fileTable(receiptId, others)}`
      : ""
  }${
    best.length > 0
      ? html`<h2>Files stored with the best</h2>
${fileTable(receiptId, best)}`
      : ""
  }
${
  t0.length > 0
    ? html`<h2>Files stored with t0 (the baseline${report ? "" : ", also the best"})</h2>
${fileTable(receiptId, t0)}`
    : ""
}
<p class="muted">Named in the signed log by digest and served from it: a receipt publishes the files its log names (gate logs, metric output, the contract's artifacts; never a candidate's code). A member of the loop's team fetches a candidate's with <code>loopwarden artifacts CANDIDATE ${state.loop_id} --download DIR</code> (t0's: <code>t0</code>), which checks each digest.</p>`;
}

/**
 * A candidate's files in its row, bounded: the logs of its failed gates first (what a rejection is about),
 * then its other gate logs and files, at most FILES_PER_CANDIDATE links, the rest counted with the
 * command that lists them all. A candidate rejected unevaluated stored nothing.
 */
function candidateFiles(receiptId: string, loopId: string, candidate: CandidateState) {
  const report = candidate.report;
  if (!report) return html`<span class="muted">–</span>`;
  const failed = report.gates.filter((gate) => !gate.passed && gate.log);
  const links = [
    ...failed.map((gate) => ({ file: gate.log as ArtifactRef, failed: true })),
    ...report.gates.filter((gate) => gate.passed && gate.log).map((gate) => ({ file: gate.log as ArtifactRef, failed: false })),
    ...report.artifacts.map((file) => ({ file, failed: false })),
  ];
  const shown = links.slice(0, FILES_PER_CANDIDATE);
  const more = links.length - shown.length;
  return html`${shown.map(
    ({ file, failed: isFailed }, index) =>
      html`${index > 0 ? " · " : ""}<a href="${fileHref(receiptId, file)}"${isFailed ? html` class="rejected" title="a failed gate's output"` : ""}>${file.name}</a>`,
  )}${more > 0 ? html` <a href="/r/${receiptId}?files=${candidate.candidate_id}#files">+${more} more</a> <span class="muted">(<code>loopwarden artifacts ${candidate.candidate_id} ${loopId}</code>)</span>` : ""}`;
}

/**
 * An optimize loop's headline: the confirm measurement of t0 against the best (DESIGN §6.3) when there
 * is one — never a product of step-wise estimates, which are shown as what they are.
 */
function headline(predicate: ReceiptStatement["predicate"]) {
  const { confirm } = predicate;
  if (confirm) {
    return html`<p class="headline"><strong>Confirmed against t0:</strong> ${predicate.best.candidate_id} is ${formatPercent(confirm.estimate)} better on ${confirm.metric}${formatInterval(confirm.interval)}${confirm.level === null ? "" : ` (${Math.round(confirm.level * 100)}% interval)`}, t0 and the best measured interleaved over ${confirm.pairs} pair(s) on one runner.</p>`;
  }
  const step = predicate.best.verdict?.metric;
  return html`<p>${
    step
      ? `The best's last step: ${formatPercent(step.estimate)} better than the best before it${formatInterval(step.interval)} over ${step.pairs} interleaved pair(s).`
      : "No candidate improved on the baseline."
  } <strong>No gain over t0 is claimed:</strong> t0 and the best were not measured against each other (no confirm measurement).</p>`;
}

/**
 * How the zones were confined (DESIGN §6.7), beside the verdict: the signed summary, marked when any agent
 * run or evaluation ran unconfined, recorded nothing, or was not run by a runner.
 */
function confinementLine(confinement: ConfinementAttestation | undefined) {
  if (!confinement) {
    return html`<p class="confinement unconfined" data-confinement="unattested"><strong>⚠ Confinement not attested:</strong> this receipt was signed before coordinators recorded how the agent and the gates were confined.</p>`;
  }
  if (confinement.fully_confined) return html`<p class="confinement" data-confinement="confined"><strong>Confinement:</strong> ${confinement.summary}.</p>`;
  return html`<p class="confinement unconfined" data-confinement="unconfined"><strong>⚠ Not every run was confined:</strong> ${confinement.summary}. An agent that is not walled off could reach what decides (the gates, the runner's state and keys): these verdicts are worth only what it could not touch.</p>`;
}

/** What the check was held to (DESIGN §6.5): marked when its precondition was skipped or not recorded. */
function oracleParagraph(oracle: OracleAttestation | undefined) {
  if (!oracle) {
    return html`<p class="confinement unconfined" data-oracle="unattested"><strong>⚠ Precondition not attested:</strong> this receipt was signed before coordinators recorded a loop's precondition.</p>`;
  }
  if (oracle.precondition === "measured") return html`<p class="confinement" data-oracle="measured"><strong>Check:</strong> ${oracle.summary}.</p>`;
  return html`<p class="confinement unconfined" data-oracle="${oracle.precondition}"><strong>⚠ Check not checked first:</strong> ${oracle.summary}.</p>`;
}

/** What a candidate could change (DESIGN §6.4): the scope, or, marked, that only the protected set guarded the check. */
function scopeParagraph(scope: string[] | null | undefined) {
  if (scope === undefined) {
    return html`<p class="confinement unconfined" data-scope="unattested"><strong>⚠ Scope not attested:</strong> this receipt was signed before coordinators recorded a loop's scope.</p>`;
  }
  if (scope === null) {
    return html`<p class="confinement unconfined" data-scope="none"><strong>⚠ No scope:</strong> the contract named no paths the agent could change, so only the default protected set (tests, the check's configuration, manifests, lockfiles, CI) guarded the check, and a change to any other file could be kept.</p>`;
  }
  return html`<p class="confinement" data-scope="scoped"><strong>Scope:</strong> ${scope.map((glob, index) => html`${index > 0 ? ", " : ""}<code>${glob}</code>`)}. A candidate that changed any other path could not be promoted.</p>`;
}

/** A candidate's verdict cell marks what of it ran unconfined (`isolation: none`): its agent run, its evaluation, or both. */
function unconfinedMark(candidate: CandidateState) {
  const zones = [
    ...(candidate.agent?.confinement?.mechanism === "none" ? ["agent"] : []),
    ...(candidate.report?.exec_zone?.mechanism === "none" ? ["gates"] : []),
  ];
  return zones.length > 0 ? html` <span class="unconfined-mark">(${zones.join(" and ")} UNCONFINED)</span>` : "";
}

/** Links to the other pages of the candidates' table, when there is more than one. */
function pageLinks(receiptId: string, loopId: string, page: number, pages: number, total: number) {
  if (pages <= 1) return "";
  const first = (page - 1) * CANDIDATES_PER_PAGE + 1;
  const last = Math.min(total, page * CANDIDATES_PER_PAGE);
  const link = (to: number, text: string) => html`<a href="/r/${receiptId}${to === 1 ? "" : `?page=${to}`}#candidates">${text}</a>`;
  return html`<p class="muted" data-pages>Candidates ${first}–${last} of ${total} (page ${page} of ${pages})${page > 1 ? html` · ${link(1, "first")} · ${link(page - 1, "previous")}` : ""}${page < pages ? html` · ${link(page + 1, "next")} · ${link(pages, "last")}` : ""}. Every candidate, with its files: <code>loopwarden export --format candidates.jsonl ${loopId}</code></p>`;
}

/**
 * The HTML of a receipt's page, from its signed statement and the loop's state at the signed head. `page`
 * is the page of the candidates' table (CANDIDATES_PER_PAGE decided candidates each, in proposal order);
 * `files` a candidate whose files are listed in full, beside t0's and the best's.
 */
export function receiptPage(input: { receiptId: string; statement: ReceiptStatement; state: LoopState; url: string; page?: number; files?: string }) {
  const { receiptId, statement, state, url } = input;
  const { predicate } = statement;
  const optimize = predicate.mode === "optimize";
  const halt = predicate.halt;
  const decided = state.candidate_order.flatMap((id) => {
    const candidate = state.candidates[id];
    return candidate?.verdict ? [candidate] : [];
  });
  const pages = Math.max(1, Math.ceil(decided.length / CANDIDATES_PER_PAGE));
  const page = Math.min(Math.max(1, Math.floor(input.page ?? 1)), pages);
  const shown = decided.slice((page - 1) * CANDIDATES_PER_PAGE, page * CANDIDATES_PER_PAGE);
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Receipt: ${predicate.name}</title>
<style>
body { font: 15px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #1b1b1b; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; } .muted { color: #666; } code { font-size: 0.9em; }
table { border-collapse: collapse; width: 100%; } td, th { text-align: left; padding: 0.25rem 0.5rem; border-bottom: 1px solid #ddd; vertical-align: top; }
.promoted { color: #17703a; fill: #1f9d55; } .rejected { color: #9b1c1c; fill: #fff; stroke: #777; } .baseline { stroke: #555; stroke-dasharray: 4 3; } .whisker { stroke: #777; } .best { fill: none; stroke: #1f9d55; stroke-width: 2; } .columns { fill: none; stroke: #aaa; stroke-width: 8; stroke-linecap: round; }
.axis { font-size: 11px; fill: #666; } .chart { width: 100%; height: auto; border: 1px solid #eee; }
#verification { border: 2px solid #999; padding: 0.5rem 1rem; border-radius: 6px; }
#verification[data-result="valid"] { border-color: #1f9d55; } #verification[data-result="invalid"], #verification[data-result="error"] { border-color: #c0392b; }
.confinement { padding: 0.25rem 0.75rem; border-left: 4px solid #1f9d55; } .confinement.unconfined { border-left-color: #c0392b; background: #fdecea; } .unconfined-mark { color: #9b1c1c; font-weight: bold; }
#verification li.ok { color: #17703a; } #verification li.failed { color: #9b1c1c; } #verification li.skipped { color: #666; }
</style>
</head>
<body>
<p class="muted">loopwarden receipt · ${predicate.kind} · issued ${predicate.issued_at} · coordinator ${predicate.coordinator.version}</p>
<h1>${predicate.name}</h1>
${predicate.objective ? html`<p>${predicate.objective}</p>` : ""}
<p><strong>${halt ? `Halted: ${halt.halt_reason}` : "Still running"}</strong>${halt ? html` (exit ${halt.exit_class}) — ${HALT_MEANINGS[halt.halt_reason]}. <span class="muted">${halt.detail}</span>` : ""}</p>
${confinementLine(predicate.confinement)}
${scopeParagraph(predicate.scope)}
${oracleParagraph(predicate.oracle)}

<section id="verification" data-receipt="${receiptId}">
<h2>Verification</h2>
<p data-status>Verifying in this browser…</p>
<ul data-checks></ul>
<noscript><p>The rest of this page reads without JavaScript; verifying it here needs it. Or run <code>loopwarden verify ${url}</code>.</p></noscript>
<p class="muted">The same checks offline: <code>loopwarden verify ${url}</code></p>
</section>

<h2>Baseline and best</h2>
<table>
<tr><th></th><th>commit</th><th>failing</th><th>passing</th>${optimize ? html`<th>${state.contract.metric?.name ?? "metric"}</th>` : ""}</tr>
<tr><td>t0 (baseline)</td><td><code>${predicate.t0.commit.slice(0, 12)}</code></td><td>${predicate.t0.failing}</td><td>${predicate.t0.passing}</td>${optimize ? html`<td>${predicate.t0.metric ?? "–"}</td>` : ""}</tr>
<tr><td>best: ${predicate.best.candidate_id}</td><td><code>${predicate.best.commit.slice(0, 12)}</code></td><td>${predicate.best.failing}</td><td>${predicate.best.passing}</td>${optimize ? html`<td>${predicate.best.metric ?? "–"}</td>` : ""}</tr>
</table>
${optimize ? headline(predicate) : ""}
<p class="muted">Iterations: ${predicate.iterations.total} of ${predicate.iterations.max} (${predicate.iterations.promoted} promoted, ${predicate.iterations.rejected} rejected).
Signed head: event ${predicate.log.seq}, <code>${predicate.log.hash.slice(0, 16)}…</code>. Contract <code>${predicate.contract_hash.slice(0, 16)}…</code>.</p>

${storedFiles(receiptId, state, input.files)}

<h2>Over the iterations</h2>
${metricChart(state, optimize ? state.t0.metric : state.t0.failing.length)}

<h2 id="candidates">Candidates</h2>
<table>
<tr><th>candidate</th><th>commit</th><th>verdict</th><th>why</th><th>files</th></tr>
${shown.map(
  (candidate) =>
    html`<tr><td>${candidate.candidate_id}</td><td><code>${candidate.commit.slice(0, 10)}</code></td><td class="${candidate.verdict?.decision}">${candidate.verdict?.decision} (${candidate.verdict?.reason})${unconfinedMark(candidate)}</td><td>${candidate.verdict?.detail}</td><td>${candidateFiles(receiptId, state.loop_id, candidate)}</td></tr>`,
)}
</table>
${pageLinks(receiptId, state.loop_id, page, pages, decided.length)}
<p class="muted">Documents: <a href="/r/${receiptId}.json">envelope (DSSE)</a> · <a href="/r/${receiptId}/events.jsonl">event log</a> · <a href="/.well-known/loopwarden/keys.json">keys</a></p>
<script type="module" src="/r/assets/verify.js"></script>
</body>
</html>`;
}
