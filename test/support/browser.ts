import path from "node:path";
import { chromium, type Browser } from "playwright-core";
import { ROOT } from "./cli.js";

// Headless Chromium for the browser tests (the receipt page, the dashboard): Debian's `chromium`, which
// .ci/run installs when missing, or any named by LOOPWARDEN_CHROMIUM, through playwright-core (which
// cannot download browsers here). Screenshots go to test-results/.

/** Where the browser tests' screenshots go. */
export const SHOTS = path.join(ROOT, "test-results");

/** Starts headless Chromium with nothing reaching out on its own (no updates, no sync, no background requests). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.LOOPWARDEN_CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}
