import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";

// A synchronous SHA-256 (rather than WebCrypto's async digest) lets the LoopObject seal events inside one
// synchronous SQL transaction (DESIGN §4.5), and runs unchanged in Node, workerd and the browser.
//
// The portable implementation is @noble/hashes, in JavaScript. Where the platform has a native synchronous
// one (Node's crypto), its host installs it with `useSha256`: hashing a 10,000-event log took 165 ms with
// noble and 20 ms with Node's (issue 30). Both give the same digest, which a unit test checks.

/** A synchronous SHA-256: lower-case hex of the digest of a UTF-8 string or raw bytes. */
export type Sha256Hex = (input: string | Uint8Array) => string;

const portable: Sha256Hex = (input) => bytesToHex(sha256(typeof input === "string" ? utf8ToBytes(input) : input));
let implementation: Sha256Hex = portable;

/** Installs a native SHA-256 in place of the portable one (the runner does, with Node's crypto); null restores the portable one. */
export function useSha256(native: Sha256Hex | null): void {
  implementation = native ?? portable;
}

/** Lower-case hex SHA-256 of a UTF-8 string or raw bytes. */
export function sha256Hex(input: string | Uint8Array): string {
  return implementation(input);
}

/** True when `value` looks like a lower-case hex SHA-256 digest. */
export function isSha256Hex(value: string): boolean {
  return /^[0-9a-f]{64}$/.test(value);
}
