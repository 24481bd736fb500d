import { webcrypto } from "node:crypto";
import type { Ed25519Verify } from "#shared/receipts/index.js";

// The signature check the shared verifier is given in Node: WebCrypto's Ed25519, as the browser's
// receipt page uses, over the published public key.

/** Verifies an Ed25519 signature with a public JWK through WebCrypto. */
export const verifyEd25519: Ed25519Verify = async (key, message, signature) => {
  const imported = await webcrypto.subtle.importKey("jwk", { kty: key.kty, crv: key.crv, x: key.x }, { name: "Ed25519" }, false, ["verify"]);
  return webcrypto.subtle.verify({ name: "Ed25519" }, imported, signature, message);
};
