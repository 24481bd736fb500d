// `npm run bench:dashboard`: the dashboard's pages of one loop as it grows to 1,000 and 5,000 candidates
// (issue 27), served by the local coordinator (`loopwarden serve`: the built worker in workerd through
// Miniflare, fresh state), written to bench/results/dashboard.md. The loop is seeded through the API as
// runners drive it (test/support/seed-candidates.ts; test/worker/dashboard-scale.test.ts seeds the same plan inside the object): every
// 125th candidate promoted, the rest rejected. For each size, the loop page, its live part (`?part=live`,
// what the page fetches again on each event), the last page of the candidates' list and the best
// candidate's page are each requested once to warm them, then REQUESTS times one after another; a
// request's time is its whole round trip on 127.0.0.1 (body read), an upper bound of the server's time.
// The floor is GET /healthz (the worker, one D1 read) measured the same way in the same run. Then the
// coordinator is restarted on the same state and the loop page asked once: the loop's object loads and
// folds its whole log first. Prints figures; asserts nothing (a shared 2-core machine). Goal (issue 27):
// at 5,000 candidates the loop page in under 300 ms of server time and under 500 KB of HTML.
import { writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "../runner/src/coordinator/client.js";
import { startCoordinator, tempDir, TEST_OWNER_TOKEN, type TestCoordinator } from "../test/support/cli.js";
import { createSeedLoop, dashboardSession, SEED_PROMOTE_EVERY, seedCandidates, timedGet } from "../test/support/seed-candidates.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const SIZES = [1_000, 5_000];
/** Timed requests per page and size, after one that warms it. */
const REQUESTS = 20;
/** The worker's candidates' list shows this many a page (worker/src/dashboard/list-pages.ts CANDIDATES_PER_PAGE). */
const CANDIDATES_PER_PAGE = 100;
const GOAL_MS = 300;
const GOAL_BYTES = 500_000;

const at = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
const ms = (value: number) => `${value.toFixed(1)} ms`;
const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;
const seconds = (value: number) => `${(value / 1000).toFixed(1)} s`;

interface Timed {
  bytes: number;
  body: string;
  p50: number;
  p90: number;
  max: number;
  warm: number;
}

const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};

const tmp = tempDir("bench-dashboard");
const stateDir = path.join(tmp.dir, "state");
const stopped: string[] = [];
let coordinator: TestCoordinator | undefined;

/** `url` requested once to warm it, then REQUESTS times: its size and round trips. */
async function timed(url: string, cookie?: string): Promise<Timed> {
  const warm = await timedGet(url, cookie);
  if (warm.status !== 200) throw new Error(`GET ${url}: ${warm.status} ${warm.body.slice(0, 300)}`);
  const times: number[] = [];
  let last = warm;
  for (let request = 0; request < REQUESTS; request++) {
    last = await timedGet(url, cookie);
    if (last.status !== 200) throw new Error(`GET ${url}: ${last.status}`);
    times.push(last.ms);
  }
  times.sort((a, b) => a - b);
  return { bytes: last.bytes, body: last.body, p50: at(times, 0.5), p90: at(times, 0.9), max: times.at(-1) ?? Number.NaN, warm: warm.ms };
}

/** Bytes of the first match of `pattern` in `html`: a part of the loop page. */
const partBytes = (html: string, pattern: RegExp) => Buffer.byteLength(pattern.exec(html)?.[0] ?? "");

const started = performance.now();
const load = os.loadavg()[0] ?? 0;
try {
  coordinator = await startCoordinator(stateDir);
  const client = new Client(coordinator.url, { token: TEST_OWNER_TOKEN, retryForMs: 5_000 });
  const loopId = await createSeedLoop(client, "bench-dashboard");
  const cookie = await dashboardSession(coordinator.url, TEST_OWNER_TOKEN);
  const rows: string[] = [];
  const parts: string[] = [];
  const seeding: string[] = [];
  let seeded = 0;
  let bestAt5000 = "";
  for (const size of SIZES) {
    const result = await seedCandidates(client, loopId, size - seeded, {
      onProgress: (done) => {
        if ((seeded + done) % 1_000 < SEED_PROMOTE_EVERY) console.error(`seeded ${seeded + done} of ${size}`);
      },
    });
    seeding.push(
      `| ${seeded.toLocaleString("en")} → ${size.toLocaleString("en")} | ${result.requests.toLocaleString("en")} | ${seconds(result.ms)} | ${Math.round(result.candidates / (result.ms / 1000))} |`,
    );
    seeded = size;
    const summary = await client.getLoop(loopId);
    const base = coordinator.url;
    const floor = await timed(`${base}/healthz`);
    const pages: [string, string][] = [
      ["loop page", `/loops/${loopId}`],
      ["live part", `/loops/${loopId}?part=live`],
      [`candidates' list, page ${Math.ceil(size / CANDIDATES_PER_PAGE)}`, `/loops/${loopId}/candidates?page=${Math.ceil(size / CANDIDATES_PER_PAGE)}`],
      [`candidate page (${summary.best.candidate_id}, the best)`, `/loops/${loopId}/candidates/${summary.best.candidate_id}`],
    ];
    rows.push(`| ${size.toLocaleString("en")} | GET /healthz (the floor) | ${kib(floor.bytes)} | ${ms(floor.p50)} | ${ms(floor.p90)} | ${ms(floor.max)} | — |`);
    for (const [name, url] of pages) {
      const page = await timed(`${base}${url}`, cookie);
      rows.push(
        `| ${size.toLocaleString("en")} | ${name} | ${kib(page.bytes)} | ${ms(page.p50)} | ${ms(page.p90)} | ${ms(page.max)} | ${ms(page.p50 - floor.p50)} |`,
      );
      if (name !== "loop page") continue;
      const html = page.body;
      const chart = /<svg class="chart"[^>]*>[\s\S]*?<\/svg>/.exec(html)?.[0] ?? "";
      const points = /data-points="(\d+)"/.exec(chart)?.[1] ?? "?";
      const promotions = /data-promotions="(\d+)"/.exec(chart)?.[1] ?? "?";
      const dots = (chart.match(/<circle [^>]*class="[^"]*\bpromoted\b/g) ?? []).length;
      const folds = [...html.matchAll(/<summary>(\d+) rejected (?:leaf|leaves)<\/summary>/g)];
      const chartBytes = Buffer.byteLength(chart);
      const strips = partBytes(html, /<table class="strips">[\s\S]*?<\/table>/);
      const tree = partBytes(html, /<ol class="tree root"[\s\S]*?<\/ol>/);
      parts.push(
        `| ${size.toLocaleString("en")} | ${kib(page.bytes)} | ${kib(chartBytes)} (${points} points, ${promotions} promotions, ${dots} drawn) | ${kib(strips)} | ${kib(tree)} (${folds.length} folds of ${folds.reduce((sum, fold) => sum + Number(fold[1]), 0)} rejected leaves) | ${kib(page.bytes - chartBytes - strips - tree)} |`,
      );
      if (size === 5_000) bestAt5000 = `${kib(page.bytes)} and ${ms(page.p50)} p50 / ${ms(page.p90)} p90`;
    }
  }

  // A restart on the same state: the first request reaches a loop object that must load its log first.
  const events = (await client.getLoop(loopId)).head.seq;
  await coordinator.stop();
  stopped.push(`the first coordinator (pid ${coordinator.pid})`);
  coordinator = await startCoordinator(stateDir);
  await timedGet(`${coordinator.url}/healthz`);
  const cold = await timedGet(`${coordinator.url}/loops/${loopId}`, cookie);
  const warmAgain = await timedGet(`${coordinator.url}/loops/${loopId}`, cookie);
  if (cold.status !== 200 || warmAgain.status !== 200) throw new Error(`after the restart: ${cold.status}, ${warmAgain.status}`);

  say("# Dashboard pages at scale");
  say();
  say(
    `\`npm run bench:dashboard\` (\`npm run build:worker && npm run build:cli && tsx bench/dashboard.ts\`), ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores, load average ${load.toFixed(1)} as it started; the whole bench took ${seconds(performance.now() - started)}.`,
  );
  say();
  say(
    `Goal (issue 27): at 5,000 candidates the loop page renders in under ${GOAL_MS} ms of server time and under ${GOAL_BYTES / 1000} KB of HTML; the chart downsamples without losing a promotion; the tree folds rejected leaves. At 5,000 candidates: **${bestAt5000}**.`,
  );
  say();
  say(
    `One loop on the local coordinator (\`loopwarden serve\`, fresh state), check_fixpoint over 50 tests, seeded through the API as runners drive it (test/support/seed-candidates.ts; test/worker/dashboard-scale.test.ts seeds the same plan, test/support/seed-plan.ts, inside the loop's object): each candidate proposed with its lease in one request, then its observation reported as a difference from t0; every ${SEED_PROMOTE_EVERY}th promoted (fewer failing tests), every other one rejected (no improvement), 12 in flight at once between two promotions. Measured at 1,000 candidates, then seeded on to 5,000 and measured again. Each page is requested once to warm it, then ${REQUESTS} times one after another, with a dashboard session (a one-time login link's cookie). A request's time is its whole round trip on 127.0.0.1, body read: an upper bound of the server's time. The floor is GET /healthz (the worker and one D1 read, no session, no loop object) in the same run; "over the floor" is the page's p50 minus the floor's.`,
  );
  say();
  say("## Size and round trip by page");
  say();
  say("| candidates | page | HTML | p50 | p90 | max | p50 over the floor |");
  say("|---:|---|---:|---:|---:|---:|---:|");
  for (const row of rows) say(row);
  say();
  say("## Where the loop page's bytes go");
  say();
  say(
    "The chart draws each promotion as a dot of its own and, past 500 points, the rejected candidates as one path of strokes per pixel column (worker/src/page/chart.ts); the strips aggregate per column; the tree is the promoted path with each node's rejected leaves folded into a count, the first 8 named (worker/src/dashboard/loop-page.ts).",
  );
  say();
  say("| candidates | loop page | chart | gate strips | candidate tree | the rest |");
  say("|---:|---:|---:|---:|---:|---:|");
  for (const row of parts) say(row);
  say();
  say("## Seeding");
  say();
  say(
    "What seeding the loop took (not a dashboard figure; it shows what each further candidate costs the loop's object as the loop grows). Each candidate is two requests, a proposal with its lease and a report; the rejected candidates between two promotions go 12 at a time, each promotion alone.",
  );
  say();
  say("| candidates | requests | time | candidates/s |");
  say("|---:|---:|---:|---:|");
  for (const row of seeding) say(row);
  say();
  say("## After a restart");
  say();
  say(
    `The coordinator stopped and started again on the same state; GET /healthz first (the worker loaded), then the loop page: its object loads and folds its ${events.toLocaleString("en")} events before it renders. First request: ${kib(cold.bytes)} in ${ms(cold.ms)}; the next: ${ms(warmAgain.ms)}.`,
  );
  await coordinator.stop();
  stopped.push(`the restarted coordinator (pid ${coordinator.pid})`);
  coordinator = undefined;
  say();
  say(`Every process started was stopped by its pid: ${stopped.join(", ")}; then the temporary state directory was removed.`);
  writeFileSync(path.join(root, "bench", "results", "dashboard.md"), `${lines.join("\n")}\n`);
  console.log("\nwritten to bench/results/dashboard.md");
} finally {
  await coordinator?.stop();
  tmp.cleanup();
}
