import { cpSync, mkdirSync } from "node:fs";
import path from "node:path";
import type { Browser, BrowserContext } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client } from "../../runner/src/coordinator/client.js";
import { createApiLoop, iterate } from "../support/api-loop.js";
import { launchChromium, SHOTS } from "../support/browser.js";
import { ROOT, TEST_OWNER_TOKEN, makeRepo, runCli, startCoordinator, tempDir, type TestCoordinator } from "../support/cli.js";

// The dashboard (issue 27) in a real browser: headless Chromium (Debian's `chromium`) against a local
// coordinator. Team A's loops: one run to its halt by the runner on a copy of examples/demo whose check
// writes JUnit (so rejections name failing tests, and gate logs are stored), and one driven through the
// API so the test decides when its next evaluation lands. Team B's loop is B's alone. The browser logs
// in with a one-time link minted for A's token, as `run` and `serve` print one. Screenshots of each page
// go to test-results/.

const CHECK = "node --test --test-reporter=junit --test-reporter-destination=out/junit.xml";
const LOOP_YAML = `name: textkit
mode: check_fixpoint
objective: make every test pass
gates:
  - name: unit
    run: ${CHECK}
    tests: { junit: out/junit.xml }
agent: { run: node agent.mjs }
stop: { max_iterations: 10 }
`;

describe("the dashboard", () => {
  const tmp = tempDir("dashboard");
  const repo = path.join(tmp.dir, "repo");
  let coordinator: TestCoordinator;
  let browser: Browser;
  let signedIn: BrowserContext;
  let teamA: Client;
  let runLoop = "";
  let apiLoop = "";
  let otherTeamsLoop = "";
  let receiptUrl = "";

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
    const owner = new Client(coordinator.url, { token: TEST_OWNER_TOKEN });
    const a = await owner.createTeam({ name: "dashboard-a" });
    const b = await owner.createTeam({ name: "dashboard-b" });
    teamA = new Client(coordinator.url, { token: a.token.token });
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    makeRepo(repo, { "loop.yaml": LOOP_YAML, ".gitignore": "out/\n" });
    const run = await runCli(["--json", "--server", coordinator.url, "--token", a.token.token, "run"], { cwd: repo });
    const outcome = JSON.parse(run.stdout) as { loop_id: string; halt_reason: string; receipt_url: string };
    expect(outcome.halt_reason, run.stderr).toBe("success_condition_met");
    runLoop = outcome.loop_id;
    receiptUrl = outcome.receipt_url;
    apiLoop = await createApiLoop(teamA, "dashboard-api-driven");
    await iterate(teamA, apiLoop, "dashboard-a1");
    otherTeamsLoop = await createApiLoop(new Client(coordinator.url, { token: b.token.token }), "dashboard-team-b-only");
    browser = await launchChromium();
    // Logged in as team A the way `run` and `serve` offer: a one-time link, used once.
    signedIn = await browser.newContext();
    const link = await teamA.loginLink();
    await (await signedIn.newPage()).goto(link.url);
  }, 180_000);
  afterAll(async () => {
    await browser?.close();
    await coordinator?.stop();
    tmp.cleanup();
  });

  it("lists the team's loops, and only those", async () => {
    const page = await signedIn.newPage();
    await page.goto(`${coordinator.url}/loops`);
    await expect(page.locator(`tr[data-loop="${runLoop}"]`).innerText()).resolves.toContain("halted: success_condition_met (exit 10)");
    await expect(page.locator(`tr[data-loop="${apiLoop}"]`).innerText()).resolves.toContain("running");
    expect(await page.locator(`tr[data-loop="${otherTeamsLoop}"]`).count()).toBe(0);
    await page.screenshot({ path: path.join(SHOTS, "dashboard-loops.png"), fullPage: true });
    await page.close();
  });

  it("shows a loop's chart with a point per measured candidate and its promotions, its halt in words and its receipt", async () => {
    const page = await signedIn.newPage();
    await page.goto(`${coordinator.url}/loops/${runLoop}`);
    const events = await teamA.eventLines(runLoop);
    const verdicts = events
      .map((line) => JSON.parse(line) as { type: string; data: { decision?: string; failing_after?: number | null } })
      .filter((event) => event.type === "verdict");
    const measured = verdicts.filter((event) => event.data.decision !== "need_samples" && event.data.failing_after !== null);
    const chart = page.locator("svg.chart");
    expect(Number(await chart.getAttribute("data-points"))).toBe(measured.length);
    expect(await chart.locator("circle").count()).toBe(measured.length);
    expect(await chart.locator("circle.promoted").count()).toBe(verdicts.filter((event) => event.data.decision === "promoted").length);
    await expect(page.locator("[data-halt]").innerText()).resolves.toContain("what next: review and merge the loop's branch");
    expect(await page.locator("a[data-receipt]").getAttribute("href")).toBe(new URL(receiptUrl).pathname);
    await page.screenshot({ path: path.join(SHOTS, "dashboard-loop.png"), fullPage: true });
    await page.close();
  });

  it("shows a candidate's failing tests (c1 fixed one of three) and a download of its gate's log", async () => {
    const page = await signedIn.newPage();
    await page.goto(`${coordinator.url}/loops/${runLoop}/candidates/c1`);
    expect(await page.locator('[data-tests="failing tests"] li').count()).toBeGreaterThan(0);
    const download = page.locator("table[data-files] a").first();
    expect(await download.innerText()).toMatch(/gate-unit\.log/);
    const [file] = await Promise.all([page.waitForEvent("download"), download.click()]);
    expect(file.suggestedFilename()).toMatch(/gate-unit\.log/);
    // A stored file keeps its own, sandboxed policy: nothing in it can act on the dashboard's origin.
    const served = await page.request.get(new URL((await download.getAttribute("href")) ?? "", coordinator.url).href);
    expect(served.headers()["content-security-policy"]).toBe("default-src 'none'; sandbox");
    await page.screenshot({ path: path.join(SHOTS, "dashboard-candidate.png"), fullPage: true });
    await page.close();
  });

  it("shows a new evaluation without a reload, then cancels the loop from the page with a receipt", async () => {
    const page = await signedIn.newPage();
    await page.goto(`${coordinator.url}/loops/${apiLoop}`);
    await page.evaluate(() => Object.assign(globalThis, { loadedOnce: true }));
    const chart = page.locator("svg.chart");
    expect(await chart.getAttribute("data-points")).toBe("1");
    await page.locator("[data-live-status]").filter({ hasText: "Live" }).waitFor({ timeout: 10_000 });
    await iterate(teamA, apiLoop, "dashboard-a2");
    await page.locator('svg.chart[data-points="2"]').waitFor({ timeout: 15_000 });
    // The same document: the page was updated in place, not reloaded.
    expect(await page.evaluate(() => (globalThis as { loadedOnce?: boolean }).loadedOnce)).toBe(true);
    await page.screenshot({ path: path.join(SHOTS, "dashboard-live.png"), fullPage: true });

    await page.locator("form[data-cancel] input[name=reason]").fill("enough for today");
    await page.locator("form[data-cancel] button").click();
    await page.locator("[data-halt=cancelled]").waitFor({ timeout: 15_000 });
    const loop = await teamA.getLoop(apiLoop);
    expect(loop.halt).toMatchObject({ halt_reason: "cancelled", exit_class: 11 });
    expect(loop.receipt_id).toBeDefined();
    expect(await page.locator("a[data-receipt]").getAttribute("href")).toBe(`/r/${loop.receipt_id}`);
    await page.screenshot({ path: path.join(SHOTS, "dashboard-cancelled.png"), fullPage: true });
    await page.close();
  });

  it("refuses a visit without a session, while the receipt page stays public", async () => {
    const anonymous = await browser.newContext();
    const page = await anonymous.newPage();
    const refused = await page.goto(`${coordinator.url}/loops/${runLoop}`);
    expect(refused?.status()).toBe(401);
    expect(await page.locator("input[name=token]").count()).toBe(1);
    expect(await page.locator("svg.chart").count()).toBe(0);
    await page.screenshot({ path: path.join(SHOTS, "dashboard-login.png"), fullPage: true });
    const receipt = await page.goto(receiptUrl);
    expect(receipt?.status()).toBe(200);
    await anonymous.close();
  });

  it("answers a page of another team's loop as not found", async () => {
    const page = await signedIn.newPage();
    for (const path of [`/loops/${otherTeamsLoop}`, `/loops/${otherTeamsLoop}/candidates`, `/loops/${otherTeamsLoop}/events`]) {
      const response = await page.goto(`${coordinator.url}${path}`);
      expect(response?.status(), path).toBe(404);
    }
    await page.close();
  });
});
