import type { ChainHead, LoopEvent, LoopState } from "#shared/engine/index.js";
import type { Answer } from "../loop/refusal.js";
import { candidatePage } from "./candidate-page.js";
import type { Viewer } from "./layout.js";
import { candidatesPage, type CandidateFilter } from "./list-pages.js";
import { loopLive, loopPage } from "./loop-page.js";

// Which of a loop's dashboard pages to render, and rendering it where the loop's state is: inside its
// LoopObject, which answers the HTML (a page of a 5,000-candidate loop is far smaller than its state).

/** A page of one loop: the loop page (or only its live part), its candidates' list, or one candidate's page. */
export type DashboardView =
  | { kind: "loop"; notice?: string | undefined }
  | { kind: "live" }
  | { kind: "candidates"; filter: CandidateFilter }
  | { kind: "candidate"; candidate_id: string };

/** The HTML of `view`; a candidate the loop does not have is not found. */
export async function renderView(
  state: LoopState,
  head: ChainHead,
  view: DashboardView,
  viewer: Viewer,
  eventsOf: (candidateId: string) => LoopEvent[],
): Promise<Answer<{ html: string }>> {
  switch (view.kind) {
    case "loop":
      return { ok: true, html: String(await loopPage(state, head, viewer, view.notice)) };
    case "live":
      return { ok: true, html: String(await loopLive(state, head)) };
    case "candidates":
      return { ok: true, html: String(await candidatesPage(state, view.filter, viewer)) };
    case "candidate": {
      const candidate = Object.hasOwn(state.candidates, view.candidate_id) ? state.candidates[view.candidate_id] : undefined;
      if (!candidate) return { ok: false, code: "not_found", message: `loop ${state.loop_id} has no candidate ${view.candidate_id}` };
      return { ok: true, html: String(await candidatePage(state, candidate, eventsOf(view.candidate_id), viewer)) };
    }
  }
}
