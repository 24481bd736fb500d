import { mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { localSigningKey, signingKeyFile } from "../../../runner/src/local-signing-key.js";

// The local coordinator's receipt key (DESIGN §12): made once per state directory, readable by its
// owner only, and the same key on every later start (receipts signed before a restart keep verifying).

const stateDir = mkdtempSync(path.join(os.tmpdir(), "lw-key-"));
afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

describe("the local signing key", () => {
  it("is generated on first use as a private Ed25519 JWK, mode 0600, and reused after", async () => {
    const first = await localSigningKey(stateDir);
    expect(JSON.parse(first)).toMatchObject({ kty: "OKP", crv: "Ed25519", d: expect.any(String), x: expect.any(String) });
    expect(statSync(signingKeyFile(stateDir)).mode & 0o777).toBe(0o600);
    expect(await localSigningKey(stateDir)).toBe(first);
  });

  it("two coordinators starting at once on one state directory both sign with the one key stored", async () => {
    const dir = mkdtempSync(path.join(stateDir, "concurrent-"));
    const keys = await Promise.all([localSigningKey(dir), localSigningKey(dir), localSigningKey(dir)]);
    const stored = await localSigningKey(dir);
    expect(keys).toEqual([stored, stored, stored]);
    expect(JSON.parse(stored)).toMatchObject({ kty: "OKP" });
  });
});
