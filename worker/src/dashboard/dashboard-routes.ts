import { Hono, type Context } from "hono";
import { csrf } from "hono/csrf";
import { html } from "hono/html";
import * as z from "zod";
import { DASHBOARD_SCRIPT } from "../../../dist/page/dashboard-script.js";
import { listLoops } from "../db/loop-list.js";
import { requireScope, type AuthEnv } from "../http/auth.js";
import { ApiError, refusalError } from "../http/http-errors.js";
import { eventStreamResponse, openLoop, streamStart } from "../http/loop-access.js";
import { readParam } from "../http/validate.js";
import { serveArtifact } from "../routes/artifacts.js";
import { page, pageHeaders, type Viewer } from "./layout.js";
import { dashboardError } from "./error-page.js";
import { LOOP_STATUSES, LOOPS_PER_PAGE, loopsPage, type CandidateFilter } from "./list-pages.js";
import { formLimit, readActionForm, requireSession, type DashboardEnv } from "./login-routes.js";
import type { DashboardView } from "./views.js";

// The dashboard's pages (DESIGN §1, §8; docs/dashboard.md), served by the worker itself: the team's loops
// (from D1), one loop and its candidates (rendered by the loop's object from its state), the loop's event
// stream for live updates (the one `watch` reads), its stored files, and cancelling it. Every route needs
// a session (login-routes.ts) and reaches a loop only through `openLoop`, as the API does: the scope, the
// token's loop restriction and the loop's team are settled before anything is read or done, and a loop of
// another team is 404, never a hint that it exists.

/** Dashboard routes, mounted at the root. */
export const dashboardRoutes = new Hono<DashboardEnv>();

dashboardRoutes.get("/", (c) => c.redirect("/loops", 302));

// The live updates' script, public like the receipt page's: it holds nothing but code.
dashboardRoutes.get("/assets/dashboard.js", (c) =>
  c.body(DASHBOARD_SCRIPT, 200, { "Content-Type": "text/javascript; charset=utf-8", "Cache-Control": "public, max-age=3600" }),
);

dashboardRoutes.use("/loops", pageHeaders, requireSession());
dashboardRoutes.use("/loops/*", pageHeaders, requireSession());

/** The API's context, as the loop access helpers take it: the dashboard's adds only the session. */
function api(c: Context<DashboardEnv>): Context<AuthEnv> {
  return c as unknown as Context<AuthEnv>;
}

/** Who is looking, for the pages: their team, their session's CSRF token, and whether they may act. */
function viewerOf(c: Context<DashboardEnv>): Viewer {
  const principal = c.get("principal");
  return { csrf: c.get("session").csrf, mayAct: principal.scopes.includes("propose"), team: principal.owner ? "owner (every team)" : principal.team_id };
}

const LoopsQuery = z.object({
  status: z.enum(LOOP_STATUSES).optional().catch(undefined),
  before: z.string().max(200).optional(),
});

dashboardRoutes.get("/loops", async (c) => {
  const principal = requireScope(api(c), "read");
  const query = readParam(c.req.query(), LoopsQuery, "query");
  const { rows, next } = await listLoops(c.env.DB, principal, { status: query.status, cursor: query.before, limit: LOOPS_PER_PAGE });
  return c.html(loopsPage(rows, { viewer: viewerOf(c), status: query.status ?? null, next, first: query.before === undefined }));
});

/** Renders a page of one loop in its object; a loop awaiting its baseline gets a page saying what it waits for. */
async function loopView(c: Context<DashboardEnv>, view: DashboardView): Promise<Response> {
  const { stub, caller } = await openLoop(api(c), c.req.param("id"), "read");
  const answer = await stub.dashboard({ caller, view, viewer: viewerOf(c) });
  if (answer.ok) return c.html(answer.html);
  if (answer.code === "awaiting_baseline") {
    return c.html(
      page("Awaiting its baseline", html`<h1>Awaiting its baseline</h1><p>${answer.message}</p><p><a href="">Reload</a> once a runner has measured it.</p>`, {
        viewer: viewerOf(c),
      }),
    );
  }
  throw refusalError(answer);
}

/** What an action just done says on the page it returns to (`?done=`). */
const NOTICES: Record<string, string> = { cancelled: "Cancelled: the loop halted with cancelled (exit 11), and its receipt is signed." };

dashboardRoutes.get("/loops/:id", (c) => {
  if (c.req.query("part") === "live") return loopView(c, { kind: "live" });
  return loopView(c, { kind: "loop", notice: NOTICES[c.req.query("done") ?? ""] });
});

const CandidatesQuery = z.object({
  parent: z
    .string()
    .regex(/^(t0|c[1-9]\d{0,6})$/)
    .optional()
    .catch(undefined),
  status: z.enum(["queued", "leased", "promoted", "rejected"]).optional().catch(undefined),
  page: z.coerce.number().int().min(1).max(1_000_000).default(1).catch(1),
});

dashboardRoutes.get("/loops/:id/candidates", (c) => {
  const query = CandidatesQuery.parse(c.req.query());
  const filter: CandidateFilter = { parent: query.parent ?? null, status: query.status ?? null, page: query.page };
  return loopView(c, { kind: "candidates", filter });
});

dashboardRoutes.get("/loops/:id/candidates/:candidate", (c) => {
  const candidate = c.req.param("candidate");
  if (!/^c[1-9]\d{0,6}$/.test(candidate)) throw new ApiError(404, "not_found", `no candidate ${candidate}`);
  return loopView(c, { kind: "candidate", candidate_id: candidate });
});

const StreamQuery = z.object({ after: z.coerce.number().int().min(0).default(0) });

// The same stream `watch` reads (GET /v1/loops/:id/events as Server-Sent Events), with the session's access.
dashboardRoutes.get("/loops/:id/events", async (c) => {
  const { stub, caller } = await openLoop(api(c), c.req.param("id"), "read");
  const query = readParam(c.req.query(), StreamQuery, "query");
  return eventStreamResponse(stub, caller, streamStart(api(c), query.after));
});

dashboardRoutes.get("/loops/:id/files/:sha256", (c) => serveArtifact(api(c), { drawing: c.req.query("view") === "svg" }));

// A forged form (another origin, or without the session's CSRF token) is refused before the loop is reached.
dashboardRoutes.post("/loops/:id/cancel", csrf(), formLimit, async (c) => {
  const form = await readActionForm(c);
  const { stub, caller, loopId } = await openLoop(api(c), c.req.param("id"), "propose");
  const answer = await stub.cancel({ caller, reason: form.reason?.trim() || "cancelled from the dashboard" });
  if (!answer.ok) throw refusalError(answer);
  return c.redirect(`/loops/${loopId}?done=cancelled`, 303);
});

dashboardRoutes.onError(dashboardError);
