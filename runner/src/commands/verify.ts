import { verifyReceipt } from "#shared/receipts/index.js";
import { UserError } from "../errors.js";
import { emitResult, paint, type OutputMode } from "../output.js";
import { verifyEd25519 } from "../receipts/receipt-crypto.js";
import { isReceiptUrl, keyFingerprint, keyLine, receiptDocumentsFor } from "../receipts/receipt-documents.js";

/** Exit code of an invalid receipt: the `objective_unverified` class (DESIGN §7, §13). */
const INVALID = 13;

/** What the receipt says the scope was (DESIGN §6.4): the globs, or, marked, that there was none or it predates scopes. */
function scopeClaim(scope: string[] | null | undefined, attested: boolean): string {
  if (scope === undefined) return paint("scope: not attested (the receipt predates scopes)", "yellow");
  const label = attested ? "scope:" : "scope (as the receipt claims; not verified):";
  if (scope === null) return paint(`${label} none — only the default protected set guarded the check`, "yellow");
  return `${label} ${scope.join(", ")} (no promoted candidate changed any other path)`;
}

/** How the key was pinned, if it was: by the file given (`--key`), by its fingerprint, or both; null when the receipt's server chose it. */
function pinnedBy(from: "server" | "file", pin: string | undefined): "key_file" | "fingerprint" | "key_file_and_fingerprint" | null {
  if (from === "file") return pin === undefined ? "key_file" : "key_file_and_fingerprint";
  return pin === undefined ? null : "fingerprint";
}

/**
 * `loopwarden verify <url | file> [--events FILE] [--key FILE] [--key-fingerprint KID]` (DESIGN §9):
 * checks a receipt offline once its documents are fetched — the DSSE signature against the published (or
 * pinned) key, within that key's lifetime, the hash chain up to the signed head, every verdict and the
 * halt re-derived with the engine, the attested figures against the log — and says which key verified it
 * and where that key came from (the receipt's own server, unless pinned), and how the receipt says each
 * zone was confined. Exit 0 when valid, 13 naming the first failed check otherwise (a signature by
 * another key than the one `--key-fingerprint` pins included).
 */
export async function verifyCommand(
  receipt: string,
  options: OutputMode & { events?: string | undefined; key?: string | undefined; keyFingerprint?: string | undefined },
): Promise<number> {
  const isUrl = isReceiptUrl(receipt);
  if (isUrl && options.events !== undefined) throw new UserError("--events is for a receipt file; a receipt URL serves its own log", 2);
  const pin = keyFingerprint(options.keyFingerprint);
  const documents = await receiptDocumentsFor(receipt, options, "verify");
  const result = await verifyReceipt({ envelope: documents.envelope, events: documents.events, keys: documents.keys, verify: verifyEd25519, pin });
  const predicate = result.statement?.predicate;
  const attested = result.checks.some((check) => check.check === "predicate" && check.ok === true);
  const mark = (ok: boolean | null) => (ok === true ? paint("ok", "green") : ok === false ? paint("FAILED", "red") : paint("not checked", "dim"));
  emitResult(
    options,
    {
      status: result.ok ? "ok" : "error",
      valid: result.ok,
      ...(predicate ? { loop_id: predicate.loop_id, iteration: predicate.iterations.total } : {}),
      ...(predicate?.halt ? { halt_reason: predicate.halt.halt_reason, exit_class: predicate.halt.exit_class } : {}),
      ...(predicate ? { confinement: predicate.confinement, scope: predicate.scope, oracle: predicate.oracle, reviews: predicate.reviews ?? [] } : {}),
      receipt: isUrl ? receipt : { envelope: receipt, events: options.events, key: options.key },
      key: result.key?.kid ?? null,
      // Which key verified it (its fingerprint, the RFC 7638 thumbprint), and whence that key came.
      key_fingerprint: result.key?.kid ?? null,
      key_source: { from: documents.keySource.from, location: documents.keySource.location, pinned: pinnedBy(documents.keySource.from, pin) },
      key_lifetime: result.key
        ? { status: result.key.status ?? "active", not_before: result.key.not_before ?? null, not_after: result.key.not_after ?? null }
        : null,
      checks: result.checks,
      errors: result.first_failure ? [result.first_failure] : [],
    },
    [
      ...result.checks.map((check) => `  ${check.check.padEnd(9)} ${mark(check.ok)}  ${check.detail}`),
      // Whom the signature is trusted on: a key the receipt's own server served is said to be so, in yellow.
      documents.keySource.from === "server" && pin === undefined
        ? paint(keyLine(documents.keySource, result.key, pin), "yellow")
        : keyLine(documents.keySource, result.key, pin),
      // What the receipt says of the zones, beside its verdict (DESIGN §6.7): an unconfined run says so, and
      // a claim the log did not bear out is named as one.
      ...(predicate
        ? [
            predicate.confinement
              ? `${attested ? "confinement:" : "confinement (as the receipt claims; not verified):"} ${
                  predicate.confinement.fully_confined ? predicate.confinement.summary : paint(predicate.confinement.summary, "yellow")
                }`
              : paint("confinement: not attested (the receipt predates the zones' records)", "yellow"),
            scopeClaim(predicate.scope, attested),
            predicate.oracle
              ? `${attested ? "check:" : "check (as the receipt claims; not verified):"} ${predicate.oracle.precondition === "measured" ? predicate.oracle.summary : paint(predicate.oracle.summary, "yellow")}`
              : paint("check: precondition not attested (the receipt predates preconditions)", "yellow"),
            // Who let which protected file change (docs/design.md §6.8): every approval is a person's, named.
            ...(predicate.reviews ?? []).map(
              (review) =>
                `${attested ? "review:" : "review (as the receipt claims; not verified):"} ${review.candidate_id}: change to ${review.files.join(", ")} ${
                  review.decision === "ack" ? paint("approved", "yellow") : "refused"
                } by ${review.by} at ${review.at} (now ${review.status}): ${review.note}`,
            ),
            ...(predicate.best.context
              ? [
                  `context: the best's agent run was given ${predicate.best.context.files.length} file(s), ${predicate.best.context.tokens} of ${predicate.best.context.budget} tokens (context.md ${predicate.best.context.context_sha256.slice(0, 12)})`,
                ]
              : []),
          ]
        : []),
      result.ok
        ? `valid: ${predicate?.kind} receipt of loop ${predicate?.loop_id} (${predicate?.halt ? predicate.halt.halt_reason : "running"}), signed by ${result.key?.kid}`
        : `INVALID: ${result.first_failure}`,
    ],
  );
  return result.ok ? 0 : INVALID;
}
