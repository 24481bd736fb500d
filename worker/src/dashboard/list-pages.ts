import { html } from "hono/html";
import type { LoopState } from "#shared/engine/index.js";
import type { StoredLoopRow } from "../db/schema.js";
import { page, type Viewer } from "./layout.js";
import { againstBaseline, candidateLink, statusWord } from "./page-parts.js";

// The dashboard's lists (docs/dashboard.md): the team's loops, from the D1 projection, and one loop's
// candidates, from its folded state. Both paged, both filterable with a plain GET form.

/** Loops per page of the loops' list. */
export const LOOPS_PER_PAGE = 50;
/** Candidates per page of a loop's candidates. */
export const CANDIDATES_PER_PAGE = 100;

/** The statuses the loops' list filters by. */
export const LOOP_STATUSES = ["running", "halted", "awaiting_baseline"] as const;
export type LoopStatus = (typeof LOOP_STATUSES)[number];

/** A loop's status in words: running, awaiting its baseline, or its halt reason with the exit class. */
function loopStatus(row: StoredLoopRow): string {
  if (row.status === "halted") return `halted: ${row.haltReason ?? "?"} (exit ${row.exitClass ?? "?"})`;
  return row.status === "awaiting_baseline" ? "awaiting its baseline" : "running";
}

/** The loops' list: `rows` is one page (newest first), `next` the cursor of the page after it, if any. */
export function loopsPage(rows: readonly StoredLoopRow[], options: { viewer: Viewer; status: LoopStatus | null; next: string | null; first: boolean }) {
  const { status } = options;
  const filterLink = (to: LoopStatus | null, text: string) =>
    to === status ? html`<strong aria-current="page">${text}</strong>` : html`<a href="/loops${to ? `?status=${to}` : ""}">${text}</a>`;
  return page(
    "Loops",
    html`<h1>Loops</h1>
<nav aria-label="filter by status"><p>Show: ${filterLink(null, "all")} · ${filterLink("running", "running")} · ${filterLink("halted", "halted")} · ${filterLink("awaiting_baseline", "awaiting a baseline")}</p></nav>
${
  rows.length === 0
    ? html`<p class="muted">No loops${status ? " with this status" : ""} yet. <code>loopwarden run</code> starts one.</p>`
    : html`<table data-loops>
<tr><th scope="col">loop</th><th scope="col">mode</th><th scope="col">status</th><th scope="col">iterations</th><th scope="col">best against baseline</th><th scope="col">runners</th><th scope="col">last activity</th></tr>
${rows.map(
  (row) =>
    html`<tr data-loop="${row.id}"><td><a href="/loops/${row.id}">${row.name}</a><br><code class="muted">${row.id}</code></td><td>${row.mode}</td><td>${loopStatus(row)}</td><td>${row.iteration}</td><td>${againstBaseline(row.mode, row.t0Score, row.bestScore)}</td><td>${row.runners}</td><td>${row.updatedAt}</td></tr>`,
)}
</table>`
}
<p>${options.first ? "" : html`<a href="/loops${status ? `?status=${status}` : ""}">newest</a> · `}${
      options.next
        ? html`<a href="/loops?${status ? `status=${status}&amp;` : ""}before=${encodeURIComponent(options.next)}" rel="next">older loops</a>`
        : html`<span class="muted">no older loops</span>`
    }</p>`,
    { viewer: options.viewer },
  );
}

/** What the candidates' list is filtered by: a parent, a status; and which page. */
export interface CandidateFilter {
  parent: string | null;
  status: "queued" | "leased" | "promoted" | "rejected" | null;
  page: number;
}

/** A loop's candidates, in proposal order, filtered and paged. */
export function candidatesPage(state: LoopState, filter: CandidateFilter, viewer: Viewer) {
  const loopId = state.loop_id;
  const matching = state.candidate_order.flatMap((id) => {
    const candidate = state.candidates[id];
    if (!candidate) return [];
    if (filter.parent !== null && candidate.parent !== filter.parent) return [];
    if (filter.status !== null && candidate.status !== filter.status) return [];
    return [candidate];
  });
  const pages = Math.max(1, Math.ceil(matching.length / CANDIDATES_PER_PAGE));
  const current = Math.min(Math.max(1, filter.page), pages);
  const shown = matching.slice((current - 1) * CANDIDATES_PER_PAGE, current * CANDIDATES_PER_PAGE);
  const query = (to: number) =>
    [filter.parent ? `parent=${filter.parent}` : "", filter.status ? `status=${filter.status}` : "", to > 1 ? `page=${to}` : ""].filter(Boolean).join("&");
  const link = (to: number, text: string) => html`<a href="/loops/${loopId}/candidates${query(to) ? `?${query(to)}` : ""}">${text}</a>`;
  return page(
    `Candidates · ${state.contract.name}`,
    html`<p class="muted"><a href="/loops">Loops</a> › <a href="/loops/${loopId}">${state.contract.name}</a> › candidates</p>
<h1>Candidates${filter.parent ? ` tried from ${filter.parent}` : ""}${filter.status ? ` (${filter.status})` : ""}</h1>
<form method="get" action="/loops/${loopId}/candidates">
${filter.parent ? html`<input type="hidden" name="parent" value="${filter.parent}">` : ""}
<label for="status">Status</label> <select id="status" name="status"><option value="">any</option>${(["queued", "leased", "promoted", "rejected"] as const).map(
      (status) => html`<option value="${status}"${filter.status === status ? " selected" : ""}>${status}</option>`,
    )}</select> <button type="submit">Show</button>
</form>
<table data-candidates>
<tr><th scope="col">candidate</th><th scope="col">from</th><th scope="col">status</th><th scope="col">why</th></tr>
${shown.map(
  (candidate) =>
    html`<tr><td>${candidateLink(loopId, candidate.candidate_id)}</td><td>${candidate.parent}</td><td class="${candidate.status}">${statusWord(candidate)}</td><td>${candidate.verdict?.detail ?? ""}</td></tr>`,
)}
</table>
<p>${matching.length} candidate(s); page ${current} of ${pages}${current > 1 ? html` · ${link(current - 1, "previous")}` : ""}${current < pages ? html` · ${link(current + 1, "next")}` : ""}</p>`,
    { viewer },
  );
}
