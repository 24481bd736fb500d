import { readFile } from "node:fs/promises";
import { describeKeyLifetime, jwkThumbprint, KeySet, PublicJwkInput, type PublicJwk } from "#shared/receipts/index.js";
import { UserError } from "../errors.js";

// The three documents a receipt is verified from (DESIGN §9): its envelope, the event log up to the
// head it signs, and the key set that verifies it — fetched from a receipt URL, or read from files for
// verifying offline.

/** A receipt's documents, as text (what was fetched or read) and parsed. */
export interface ReceiptDocuments {
  envelopeText: string;
  eventsText: string;
  keysText: string;
  envelope: unknown;
  events: Record<string, unknown>[];
  keys: KeySet;
  /** Where the key set came from: served by the receipt's own coordinator, or a file the user gave (pinned). */
  keySource: KeySource;
}

/** Where a receipt's key set came from. */
export interface KeySource {
  /** `server`: the key set the receipt URL's coordinator serves (trusting that server); `file`: one given with --key. */
  from: "server" | "file";
  /** The URL or file it was read from. */
  location: string;
}

/** The receipt page URL (`…/r/<id>`) of a URL naming the receipt, its envelope (`.json`) or its log. */
export function receiptBase(url: string): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UserError(`not a URL: ${url}`, 2);
  }
  const match = /^(.*\/r\/rc_[0-9a-f]{32})(\.json|\/events\.jsonl|\/)?$/.exec(parsed.pathname);
  if (!match?.[1]) throw new UserError(`${url} is not a receipt URL (…/r/rc_<32 hex digits>)`, 2);
  parsed.pathname = match[1];
  parsed.search = "";
  parsed.hash = "";
  return parsed;
}

async function fetchText(url: string): Promise<string> {
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  } catch (error) {
    throw new UserError(`cannot fetch ${url} (${(error as { cause?: { code?: string } }).cause?.code ?? (error as Error).message})`);
  }
  if (response.status === 404) throw new UserError(`no receipt at ${url} (HTTP 404)`);
  if (!response.ok) throw new UserError(`fetching ${url} answered HTTP ${response.status}`);
  return response.text();
}

/** JSONL text as objects; a line that is not a JSON object is named. */
function eventsOf(text: string, where: string): Record<string, unknown>[] {
  return text
    .split("\n")
    .filter((line) => line.trim().length > 0)
    .map((line, index) => {
      try {
        const value = JSON.parse(line) as unknown;
        if (value && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
      } catch {
        // named below
      }
      throw new UserError(`${where}: line ${index + 1} is not a JSON object`);
    });
}

function jsonOf(text: string, where: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new UserError(`${where} is not JSON`);
  }
}

/** A key set from a file or response: a set `{ keys: [...] }`, or one public JWK (a pinned key; its kid is its thumbprint). */
export function keySetOf(text: string, where: string): KeySet {
  const value = jsonOf(text, where);
  const set = KeySet.safeParse(value);
  if (set.success) return set.data;
  if (value && typeof value === "object" && "keys" in value) {
    const issue = set.error.issues[0];
    throw new UserError(`${where} is not a key set: ${issue ? `${issue.path.join(".")}: ${issue.message}` : "invalid"}`);
  }
  const one = PublicJwkInput.safeParse(value);
  if (!one.success) throw new UserError(`${where} is neither a key set ({ "keys": [...] }) nor a public Ed25519 JWK`);
  return { keys: [{ ...one.data, kid: one.data.kid ?? jwkThumbprint(one.data) }] };
}

/** Fetches a receipt's envelope, log and (unless a pinned key set is given) the coordinator's published keys. */
export async function fetchReceipt(url: string, pinnedKeys?: string): Promise<ReceiptDocuments> {
  const base = receiptBase(url);
  const keySource: KeySource =
    pinnedKeys === undefined ? { from: "server", location: `${base.origin}/.well-known/loopwarden/keys.json` } : { from: "file", location: pinnedKeys };
  const [envelopeText, eventsText, keysText] = await Promise.all([
    fetchText(`${base.href}.json`),
    fetchText(`${base.href}/events.jsonl`),
    keySource.from === "server" ? fetchText(keySource.location) : readFile(keySource.location, "utf8"),
  ]);
  return {
    envelopeText,
    eventsText,
    keysText,
    envelope: jsonOf(envelopeText, `${base.href}.json`),
    events: eventsOf(eventsText, `${base.href}/events.jsonl`),
    keys: keySetOf(keysText, keySource.location),
    keySource,
  };
}

/** Reads a receipt saved as files: the envelope, its log and the key set (or a pinned key). */
export async function readReceiptFiles(envelopeFile: string, eventsFile: string, keyFile: string): Promise<ReceiptDocuments> {
  // Read as bytes and decoded once: `readFile(file, "utf8")` decodes piece by piece, 35 ms of a 5 MiB log.
  const read = (file: string) =>
    readFile(file).then(
      (bytes) => bytes.toString("utf8"),
      (error: NodeJS.ErrnoException) => {
        throw new UserError(`cannot read ${file} (${error.code ?? error.message})`);
      },
    );
  const [envelopeText, eventsText, keysText] = await Promise.all([read(envelopeFile), read(eventsFile), read(keyFile)]);
  return {
    envelopeText,
    eventsText,
    keysText,
    envelope: jsonOf(envelopeText, envelopeFile),
    events: eventsOf(eventsText, eventsFile),
    keys: keySetOf(keysText, keyFile),
    keySource: { from: "file", location: keyFile },
  };
}

/**
 * A receipt's documents for a command (`verify`, `replay`): fetched from a receipt URL, or read from a
 * saved envelope file, which needs its log (`--events`) and a key (`--key`).
 */
export async function receiptDocumentsFor(
  receipt: string,
  options: { events?: string | undefined; key?: string | undefined },
  command: string,
): Promise<ReceiptDocuments> {
  if (isReceiptUrl(receipt)) return fetchReceipt(receipt, options.key);
  if (options.events === undefined || options.key === undefined) {
    throw new UserError(
      `a receipt file is ${command === "verify" ? "verified" : "replayed"} with its log and a key: loopwarden ${command} FILE --events EVENTS.jsonl --key KEYS.json`,
      2,
    );
  }
  return readReceiptFiles(receipt, options.events, options.key);
}

/** Whether a command's receipt argument is a URL rather than a file. */
export function isReceiptUrl(receipt: string): boolean {
  return /^https?:\/\//i.test(receipt);
}

/**
 * Which key verified a receipt, and why it is trusted, in one line: a key served by the receipt's own
 * coordinator is trusted only as far as that server is, which the line says, with the fingerprint (its
 * RFC 7638 thumbprint, the kid) to pin it by.
 */
export function keyLine(source: KeySource, key: PublicJwk | null, pin: string | undefined): string {
  const lifetime = key && key.status !== undefined && key.status !== "active" ? ` (${describeKeyLifetime(key)})` : "";
  const which = key ? `key: ${key.kid}${lifetime}` : "key: none verified the signature; keys";
  if (source.from === "file") return `${which} from ${source.location} (pinned with --key${pin === undefined ? "" : " and --key-fingerprint"})`;
  if (pin !== undefined) return `${which} as served by ${source.location}, pinned by its fingerprint (--key-fingerprint ${pin})`;
  const hint = key ? `--key-fingerprint ${key.kid}` : "--key-fingerprint <kid>";
  return `${which} as served by ${source.location} (not pinned: pin it with ${hint} or --key FILE)`;
}

/** A `--key-fingerprint` value: an Ed25519 key's RFC 7638 thumbprint (43 base64url characters), as a key set names it (its kid). */
export function keyFingerprint(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const fingerprint = value.trim();
  if (!/^[A-Za-z0-9_-]{43}$/.test(fingerprint)) {
    throw new UserError(`--key-fingerprint ${value} is not a key's RFC 7638 thumbprint (43 base64url characters, the kid a key set names it by)`, 2);
  }
  return fingerprint;
}
