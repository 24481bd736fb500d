import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";

// A synchronous SHA-256 (rather than WebCrypto's async digest) lets the LoopObject seal events inside one
// synchronous SQL transaction (DESIGN §4.5), and runs unchanged in Node, workerd and the browser.

/** Lower-case hex SHA-256 of a UTF-8 string or raw bytes. */
export function sha256Hex(input: string | Uint8Array): string {
  return bytesToHex(sha256(typeof input === "string" ? utf8ToBytes(input) : input));
}

/** True when `value` looks like a lower-case hex SHA-256 digest. */
export function isSha256Hex(value: string): boolean {
  return /^[0-9a-f]{64}$/.test(value);
}
