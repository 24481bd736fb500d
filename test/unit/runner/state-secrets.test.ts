import { chmodSync, mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { localOwnerToken, localSigningKey, ownerTokenFile, signingKeyFile } from "../../../runner/src/coordinator/state-secrets.js";

// The local coordinator's secrets (DESIGN §11, §12). Its receipt key: made once per state directory, readable by its
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

  it("records when it was generated in its own not_before member, which the coordinator publishes as the key's not_before", async () => {
    const dir = mkdtempSync(path.join(stateDir, "dated-"));
    const before = Date.now();
    const { not_before } = JSON.parse(await localSigningKey(dir)) as { not_before: string };
    expect(not_before).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    expect(Date.parse(not_before)).toBeGreaterThanOrEqual(before);
    expect(Date.parse(not_before)).toBeLessThanOrEqual(Date.now());
  });

  it("two coordinators starting at once on one state directory both sign with the one key stored", async () => {
    const dir = mkdtempSync(path.join(stateDir, "concurrent-"));
    const keys = await Promise.all([localSigningKey(dir), localSigningKey(dir), localSigningKey(dir)]);
    const stored = await localSigningKey(dir);
    expect(keys).toEqual([stored, stored, stored]);
    expect(JSON.parse(stored)).toMatchObject({ kty: "OKP" });
  });
});

describe("the local owner token", () => {
  it("is generated once per state directory (mode 0600), says it was created that once, and is reused after", async () => {
    const dir = mkdtempSync(path.join(stateDir, "owner-"));
    const saved = process.env.LOOPWARDEN_OWNER_TOKEN;
    delete process.env.LOOPWARDEN_OWNER_TOKEN;
    try {
      const first = await localOwnerToken(dir);
      expect(first).toMatchObject({ created: true, file: ownerTokenFile(dir) });
      // 256 random bits, base64url: long enough for the coordinator's minimum (32 characters).
      expect(first.token).toMatch(/^lwo_[A-Za-z0-9_-]{43}$/);
      expect(statSync(ownerTokenFile(dir)).mode & 0o777).toBe(0o600);
      expect(await localOwnerToken(dir)).toEqual({ ...first, created: false });
      const racing = await Promise.all([1, 2, 3].map(() => localOwnerToken(mkdtempSync(path.join(dir, "race-")))));
      expect(racing.every((answer) => answer.created)).toBe(true);
    } finally {
      if (saved !== undefined) process.env.LOOPWARDEN_OWNER_TOKEN = saved;
    }
  });

  it("is made in a state directory that does not exist yet, as a first command finds it", async () => {
    const dir = path.join(stateDir, "not-yet", "state");
    const saved = process.env.LOOPWARDEN_OWNER_TOKEN;
    delete process.env.LOOPWARDEN_OWNER_TOKEN;
    try {
      const made = await localOwnerToken(dir);
      expect(made.created).toBe(true);
      expect(statSync(dir).mode & 0o777).toBe(0o700);
      expect(await localSigningKey(dir)).toMatch(/"kty":"OKP"/);
    } finally {
      if (saved !== undefined) process.env.LOOPWARDEN_OWNER_TOKEN = saved;
    }
  });

  it("narrows a state directory that exists open to others to its owner (0700) when it writes a secret there", async () => {
    const dir = mkdtempSync(path.join(stateDir, "open-"));
    chmodSync(dir, 0o755);
    const saved = process.env.LOOPWARDEN_OWNER_TOKEN;
    delete process.env.LOOPWARDEN_OWNER_TOKEN;
    try {
      await localOwnerToken(dir);
      expect(statSync(dir).mode & 0o777).toBe(0o700);
    } finally {
      if (saved !== undefined) process.env.LOOPWARDEN_OWNER_TOKEN = saved;
    }
  });

  it("is LOOPWARDEN_OWNER_TOKEN when that is set, and then no file is written", async () => {
    const dir = mkdtempSync(path.join(stateDir, "owner-env-"));
    const saved = process.env.LOOPWARDEN_OWNER_TOKEN;
    process.env.LOOPWARDEN_OWNER_TOKEN = "lwo_from_the_environment_0123456789abcdef";
    try {
      expect(await localOwnerToken(dir)).toEqual({ token: "lwo_from_the_environment_0123456789abcdef", created: false, file: null });
      expect(() => statSync(ownerTokenFile(dir))).toThrow();
    } finally {
      if (saved === undefined) delete process.env.LOOPWARDEN_OWNER_TOKEN;
      else process.env.LOOPWARDEN_OWNER_TOKEN = saved;
    }
  });
});
