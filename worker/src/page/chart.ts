import { html } from "hono/html";
import type { LoopState } from "#shared/engine/index.js";
import type { Verdict } from "#shared/wire/event-parts.js";

// The metric (or failing count) over iterations as inline SVG, for the receipt page and the dashboard's
// loop page: every decided candidate a point, the best-so-far as a staircase, the baseline as a dashed
// line, and in optimize mode each candidate's interval as a whisker. Drawn on the server, so it reads
// without JavaScript; its size stops growing with the loop past DOTS_AT_MOST points.

/** One point of the chart: an iteration's candidate and the value it was judged on. */
export interface Point {
  iteration: number;
  candidate: string;
  value: number;
  promoted: boolean;
  /** Optimize mode: the candidate's interval, in the metric's own units; null when it has none. */
  whisker: [number, number] | null;
}

/**
 * The interval of a verdict's relative improvement, in the metric's units around the candidate's median:
 * the improvement is best/candidate − 1 for a lower-is-better metric and candidate/best − 1 for a
 * higher-is-better one (shared/engine/statistics.ts), so each bound is the value at which the candidate
 * would have that improvement over the same best.
 */
function whiskerOf(metric: NonNullable<Verdict["metric"]>, direction: "lower" | "higher"): [number, number] | null {
  const [low, high] = metric.interval ?? [];
  if (low === undefined || high === undefined) return null;
  const value = metric.candidate_median;
  const at = (improvement: number) =>
    direction === "lower" ? (value * (1 + metric.estimate)) / (1 + improvement) : (value * (1 + improvement)) / (1 + metric.estimate);
  const bounds = [at(low), at(high)].filter(Number.isFinite);
  if (bounds.length < 2) return null;
  return [Math.min(...bounds), Math.max(...bounds)];
}

/** The value a loop is judged on for each decided candidate: the failing count, or the metric in optimize mode. */
export function pointsOf(state: LoopState): Point[] {
  const points: Point[] = [];
  const direction = state.contract.metric?.direction ?? "lower";
  for (const id of state.candidate_order) {
    const verdict = state.candidates[id]?.verdict;
    if (!verdict) continue;
    const optimize = state.contract.mode === "optimize";
    const value = optimize ? (verdict.metric?.candidate_median ?? null) : verdict.failing_after;
    if (value === null) continue;
    const whisker = optimize && verdict.metric ? whiskerOf(verdict.metric, direction) : null;
    points.push({ iteration: points.length + 1, candidate: id, value, promoted: verdict.decision === "promoted", whisker });
  }
  return points;
}

/**
 * Above this many measured candidates the rejected ones are not drawn one dot each (a dot and its title
 * per candidate made a loop of 5,000 candidates a 400 KB chart): each column of pixels gets one stroke
 * from its lowest to its highest value, so the chart's size stops growing with the loop. Promotions are
 * always drawn one by one: downsampling never loses one.
 */
export const DOTS_AT_MOST = 500;

/** One path: per pixel column, a round-capped stroke over the values in it (a single value draws a dot). */
function columnMarks(points: readonly Point[], x: (point: Point) => number, y: (point: Point) => number): string {
  const columns = new Map<number, { top: number; bottom: number }>();
  for (const point of points) {
    const column = Math.round(x(point));
    const value = y(point);
    const seen = columns.get(column);
    columns.set(column, seen ? { top: Math.min(seen.top, value), bottom: Math.max(seen.bottom, value) } : { top: value, bottom: value });
  }
  return [...columns].map(([column, { top, bottom }]) => `M${column} ${top.toFixed(1)}V${bottom.toFixed(1)}`).join("");
}

/**
 * The chart of a loop's decided candidates against its baseline. `href` links each dot to its candidate
 * (the dashboard) while dots are drawn one by one. The SVG carries `data-points` and `data-promotions`,
 * the counts it stands for whether or not it is downsampled.
 */
export function metricChart(state: LoopState, baseline: number | null, options: { href?: (candidateId: string) => string } = {}) {
  const points = pointsOf(state);
  if (points.length === 0 || baseline === null) return html`<p class="muted">No candidate was measured yet.</p>`;
  const width = 640;
  const height = 220;
  const pad = 36;
  const values = [baseline, ...points.flatMap((point) => [point.value, ...(point.whisker ?? [])])];
  const low = Math.min(...values);
  const high = Math.max(...values);
  const x = (iteration: number) => pad + ((width - 2 * pad) * iteration) / Math.max(1, points.length);
  const y = (value: number) => (high === low ? height / 2 : height - pad - ((height - 2 * pad) * (value - low)) / (high - low));
  let best = baseline;
  const stairs = [`M ${x(0)} ${y(best)}`];
  for (const point of points) {
    if (point.promoted) {
      stairs.push(`H ${x(point.iteration)}`, `V ${y(point.value)}`);
      best = point.value;
    }
  }
  stairs.push(`H ${x(points.length)}`);
  const label = state.contract.mode === "optimize" ? (state.contract.metric?.name ?? "metric") : "failing tests";
  const dense = points.length > DOTS_AT_MOST;
  const promotions = points.filter((point) => point.promoted);
  const whisker = (point: Point) =>
    point.whisker
      ? html`<line x1="${x(point.iteration)}" x2="${x(point.iteration)}" y1="${y(point.whisker[0])}" y2="${y(point.whisker[1])}" class="whisker" />`
      : "";
  // Promoted: a larger filled dot; rejected: a hollow one — told apart by shape, not colour alone.
  const dot = (point: Point) => {
    const mark = html`<circle cx="${x(point.iteration)}" cy="${y(point.value)}" r="${point.promoted ? 5 : 4}" class="${point.promoted ? "dot-promoted promoted" : "dot-rejected rejected"}" data-candidate="${point.candidate}"><title>${point.candidate}: ${point.value} (${point.promoted ? "promoted" : "rejected"})</title></circle>`;
    return options.href ? html`<a href="${options.href(point.candidate)}">${whisker(point)}${mark}</a>` : html`${whisker(point)}${mark}`;
  };
  return html`<svg class="chart" viewBox="0 0 ${width} ${height}" role="img" data-points="${points.length}" data-promotions="${promotions.length}" aria-label="${label} over ${points.length} evaluated candidates, ${promotions.length} promoted; baseline ${baseline}, best ${best}">
    <text x="${pad}" y="16" class="axis">${label}: best-so-far as a line, baseline dashed; ${dense ? "rejected candidates as grey strokes per column, promoted as filled dots" : "rejected as hollow dots, promoted as filled dots"}${state.contract.mode === "optimize" ? "; whiskers: intervals" : ""}</text>
    <text x="4" y="${y(high) + 4}" class="axis">${high}</text>
    <text x="4" y="${y(low) + 4}" class="axis">${low}</text>
    <line x1="${pad}" x2="${width - pad}" y1="${y(baseline)}" y2="${y(baseline)}" class="baseline"><title>baseline (t0): ${baseline}</title></line>
    <path d="${stairs.join(" ")}" class="best" />
    ${
      dense
        ? html`<path d="${columnMarks(
            points.filter((point) => !point.promoted),
            (point) => x(point.iteration),
            (point) => y(point.value),
          )}" class="columns" />${promotions.map(dot)}`
        : points.map(dot)
    }
  </svg>`;
}
