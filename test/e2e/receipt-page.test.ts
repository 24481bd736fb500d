import { cpSync, mkdirSync } from "node:fs";
import path from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchChromium, SHOTS } from "../support/browser.js";
import { ROOT, makeRepo, runCli, startCoordinator, tempDir, type TestCoordinator } from "../support/cli.js";

// The public receipt page (DESIGN §9) in a real browser: headless Chromium (Debian's `chromium`, which
// .ci/run installs when missing) opens a receipt served by the local coordinator; the page verifies the
// receipt with the browser's WebCrypto and the shared verifier, and says so. Served a tampered log, it
// says the receipt is not verified. Screenshots go to test-results/.

/** The page's verification panel, once it has said what it found. */
async function verificationPanel(page: Page) {
  const panel = page.locator("#verification");
  await panel
    .locator("[data-status]")
    .filter({ hasText: /Verified in this browser|NOT verified|Could not verify/ })
    .waitFor({ timeout: 30_000 });
  return panel;
}

describe("the receipt page", () => {
  const tmp = tempDir("receipt-page");
  const repo = path.join(tmp.dir, "repo");
  let coordinator: TestCoordinator;
  let browser: Browser;
  let url = "";

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    coordinator = await startCoordinator(path.join(tmp.dir, "state"));
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    makeRepo(repo, {});
    const run = await runCli(["--json", "--server", coordinator.url, "run", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"], {
      cwd: repo,
    });
    url = (JSON.parse(run.stdout) as { receipt_url: string }).receipt_url;
    browser = await launchChromium();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await coordinator?.stop();
    tmp.cleanup();
  });

  it("shows the loop's outcome without JavaScript", async () => {
    const page = await browser.newPage({ javaScriptEnabled: false });
    await page.goto(url);
    // A flag-only loop is named after its repository's directory.
    await expect(page.locator("h1").textContent()).resolves.toBe("repo");
    const body = (await page.locator("body").textContent()) ?? "";
    expect(body).toContain("Halted: success_condition_met");
    expect(body).toContain("every gate passes on the best candidate");
    // Three candidates in their table (found by its heading: other tables come and go with the evidence),
    // and the best's stored files (its gate log); the chart has the two that were measured (c2 changed nothing).
    expect(await page.locator("h2:text-is('Candidates') + table tr").count()).toBe(4);
    expect(await page.locator("h2:text-is('Files stored with the best') + table").textContent()).toContain("gate-check.log");
    expect(await page.locator("svg.chart circle").count()).toBe(2);
    expect(await page.locator("svg.chart circle.promoted").count()).toBe(1);
    // Each evaluated candidate's row links its gate log, which the receipt serves to the browser as text.
    const links = page.locator("h2:text-is('Candidates') + table a[href*='/files/']");
    expect(await links.count()).toBeGreaterThanOrEqual(2);
    const href = (await links.first().getAttribute("href")) ?? "";
    expect(href).toMatch(/^\/r\/rc_[0-9a-f]{32}\/files\/[0-9a-f]{64}$/);
    const log = await page.goto(new URL(href, url).href);
    expect(log?.status()).toBe(200);
    expect(await page.locator("body").textContent()).toMatch(/\$ node --test[\s\S]*\[loopwarden\] exit code \d+ in \d+ ms/);
    await page.close();
  });

  it("verifies the receipt in the browser and says so, naming the key", async () => {
    const page = await browser.newPage();
    await page.goto(url);
    const panel = await verificationPanel(page);
    await page.screenshot({ path: path.join(SHOTS, "receipt-page-valid.png"), fullPage: true });
    expect(await panel.getAttribute("data-result")).toBe("valid");
    const keys = (await (await fetch(`${coordinator.url}/.well-known/loopwarden/keys.json`)).json()) as { keys: { kid: string }[] };
    expect(await panel.locator("[data-status]").textContent()).toContain(`signed by key ${keys.keys[0]?.kid}`);
    // Envelope, signature, statement, chain, verdicts, scope, predicate.
    expect(await panel.locator("li.ok").count()).toBe(7);
    await page.close();
  });

  it("served a tampered log, says the receipt is not verified and why", async () => {
    const page = await browser.newPage();
    await page.route("**/events.jsonl", async (route) => {
      const response = await route.fetch();
      const tampered = (await response.text()).replace('"decision":"rejected"', '"decision":"promoted"');
      await route.fulfill({ response, body: tampered });
    });
    await page.goto(url);
    const panel = await verificationPanel(page);
    await page.screenshot({ path: path.join(SHOTS, "receipt-page-tampered.png"), fullPage: true });
    expect(await panel.getAttribute("data-result")).toBe("invalid");
    expect(await panel.locator("[data-status]").textContent()).toMatch(/^NOT verified: chain: event \d+ does not match its hash/);
    await page.close();
  });
});
