import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { VERSION } from "#shared/version.js";

describe("VERSION", () => {
  it("is the version in package.json, so /healthz, --version and receipts report what was installed", () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
    expect(VERSION).toBe(pkg.version);
  });
});
