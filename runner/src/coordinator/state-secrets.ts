import { randomBytes, webcrypto } from "node:crypto";
import { chmod, link, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";

// The local coordinator's secrets (DESIGN §11, §12), kept in its state directory readable by their owner
// only (mode 0600), never in the repository: the receipt signing key, and the instance owner's token.
// Each is generated on first use; a deployed coordinator has them as secrets (`wrangler secret put`).

/** Where the receipt signing key lives in a state directory. */
export function signingKeyFile(stateDir: string): string {
  return path.join(stateDir, "receipt-signing-key.jwk");
}

/** Where the owner token lives in a state directory. */
export function ownerTokenFile(stateDir: string): string {
  return path.join(stateDir, "owner-token");
}

/**
 * The state directory's private signing key as JWK text, generated on first use. A key generated here
 * records when in its own `not_before` member (written with it, in the one file), which the coordinator
 * publishes as the key's `not_before` (DESIGN §9): the key verifies nothing said to be signed earlier. A
 * key from before that has none, and is published without a lower bound.
 */
export async function localSigningKey(stateDir: string): Promise<string> {
  return (
    await secretFileOnce(signingKeyFile(stateDir), async () => {
      const pair = (await webcrypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
      const jwk = await webcrypto.subtle.exportKey("jwk", pair.privateKey);
      return `${JSON.stringify({ ...jwk, not_before: new Date().toISOString() })}\n`;
    })
  ).text;
}

/**
 * The local instance owner's token: LOOPWARDEN_OWNER_TOKEN when set, else the state directory's,
 * generated on first use (`created` says this call made it, so `serve` prints it that once).
 */
export async function localOwnerToken(stateDir: string): Promise<{ token: string; created: boolean; file: string | null }> {
  const fromEnv = process.env.LOOPWARDEN_OWNER_TOKEN;
  if (fromEnv) return { token: fromEnv, created: false, file: null };
  const file = ownerTokenFile(stateDir);
  const { text, created } = await secretFileOnce(file, async () => `lwo_${randomBytes(32).toString("base64url")}\n`);
  return { token: text.trim(), created, file };
}

/**
 * Makes the state directory, readable by its owner only (0700), and narrows one that exists already:
 * it holds the owner token and the signing key, next to other users and to an unconfined agent's reach.
 */
export async function privateStateDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
}

/**
 * A secret file's text, generated and stored (0600, atomically) when it does not exist. Written whole
 * under another name, then linked into place: a crash never leaves half a secret, and of two processes
 * starting at once the first link wins and both use that one secret.
 */
async function secretFileOnce(file: string, generate: () => Promise<string>): Promise<{ text: string; created: boolean }> {
  const existing = await readSecret(file);
  if (existing !== null) return { text: existing, created: false };
  // A state directory is made on first use (a command may need the owner token before any coordinator ran).
  await privateStateDir(path.dirname(file));
  const text = await generate();
  const temporary = `${file}.${randomBytes(6).toString("hex")}.tmp`;
  await writeFile(temporary, text, { mode: 0o600, flag: "wx" });
  try {
    await link(temporary, file);
    return { text, created: true };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    const winner = await readSecret(file);
    if (winner === null) throw error;
    return { text: winner, created: false };
  } finally {
    await rm(temporary, { force: true });
  }
}

async function readSecret(file: string): Promise<string | null> {
  return readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return null;
    throw error;
  });
}
