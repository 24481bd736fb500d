import { base64 } from "@scure/base";
import { utf8ToBytes } from "@noble/hashes/utils.js";
import * as z from "zod";

// DSSE v1 (github.com/secure-systems-lab/dsse, envelope.md and protocol.md): a signature is over the
// pre-authentication encoding of the payload and its type, never over the payload alone, so a payload
// cannot be re-read as another type. Standard base64 (with padding) in the envelope, as the spec's
// examples use.

/** The payload type of an in-toto Statement inside a DSSE envelope. */
export const IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json";

/** `PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, LEN the byte length in ASCII decimal. */
export function pae(payloadType: string, payload: Uint8Array): Uint8Array {
  const type = utf8ToBytes(payloadType);
  const head = utf8ToBytes(`DSSEv1 ${type.length} ${payloadType} ${payload.length} `);
  const out = new Uint8Array(head.length + payload.length);
  out.set(head, 0);
  out.set(payload, head.length);
  return out;
}

const Base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, "must be standard base64");

/** A DSSE envelope: the payload (base64), its type, and one or more signatures over its PAE. */
export const Envelope = z.object({
  payload: Base64,
  payloadType: z.string().min(1),
  signatures: z.array(z.object({ keyid: z.string(), sig: Base64 })).min(1),
});
export type Envelope = z.infer<typeof Envelope>;

/** Base64 (standard, padded) of bytes. */
export function toBase64(bytes: Uint8Array): string {
  return base64.encode(bytes);
}

/** Bytes of standard base64; throws on anything else. */
export function fromBase64(text: string): Uint8Array {
  return base64.decode(text);
}

/** Signs a payload: Ed25519 over its PAE, by a key named `kid` (the worker's WebCrypto key; a test's). */
export interface Signer {
  kid: string;
  sign(message: Uint8Array): Promise<Uint8Array>;
}

/** A DSSE envelope of a JSON payload (serialised as RFC 8785 canonical JSON), signed by `signer`. */
export async function signEnvelope(payloadJson: string, payloadType: string, signer: Signer): Promise<Envelope> {
  const payload = utf8ToBytes(payloadJson);
  const sig = await signer.sign(pae(payloadType, payload));
  return { payload: toBase64(payload), payloadType, signatures: [{ keyid: signer.kid, sig: toBase64(sig) }] };
}
