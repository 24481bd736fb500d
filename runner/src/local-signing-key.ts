import { randomBytes, webcrypto } from "node:crypto";
import { link, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";

// The local coordinator's receipt signing key (DESIGN §12): generated on first start, kept in the state
// directory readable by its owner only (mode 0600), never in the repository. Receipts it signs verify
// against the key set it publishes, like a deployed coordinator's.

/** Where the key lives in a state directory. */
export function signingKeyFile(stateDir: string): string {
  return path.join(stateDir, "receipt-signing-key.jwk");
}

/** The state directory's private signing key as JWK text, generated and stored (0600, atomically) on first use. */
export async function localSigningKey(stateDir: string): Promise<string> {
  const file = signingKeyFile(stateDir);
  const existing = await readKey(file);
  if (existing !== null) return existing;
  const pair = (await webcrypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
  const text = `${JSON.stringify(await webcrypto.subtle.exportKey("jwk", pair.privateKey))}\n`;
  // Written whole under another name, then linked into place: a crash never leaves half a key, and of
  // two processes starting at once the first link wins and both sign with that one key.
  const temporary = `${file}.${randomBytes(6).toString("hex")}.tmp`;
  await writeFile(temporary, text, { mode: 0o600, flag: "wx" });
  try {
    await link(temporary, file);
    return text;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    const winner = await readKey(file);
    if (winner === null) throw error;
    return winner;
  } finally {
    await rm(temporary, { force: true });
  }
}

async function readKey(file: string): Promise<string | null> {
  return readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return null;
    throw error;
  });
}
