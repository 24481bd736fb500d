import { KeySet, verifyReceipt, type Ed25519Verify, type ReceiptCheck } from "#shared/receipts/index.js";

// The receipt page's verification panel (DESIGN §9): the same shared verifier `loopwarden verify` runs,
// in the reader's browser, with the browser's own WebCrypto. It fetches the receipt's three documents
// from this origin, checks the signature, the hash chain, every verdict and the attested figures, and
// says plainly what was verified, against which key, and what was not.

const verifyEd25519: Ed25519Verify = async (key, message, signature) => {
  const imported = await crypto.subtle.importKey("jwk", { kty: key.kty, crv: key.crv, x: key.x }, { name: "Ed25519" }, false, ["verify"]);
  return crypto.subtle.verify({ name: "Ed25519" }, imported, new Uint8Array(signature), new Uint8Array(message));
};

async function text(url: string): Promise<string> {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url} answered HTTP ${response.status}`);
  return response.text();
}

function item(check: ReceiptCheck): HTMLLIElement {
  const li = document.createElement("li");
  li.className = check.ok === true ? "ok" : check.ok === false ? "failed" : "skipped";
  const mark = document.createElement("strong");
  mark.textContent = `${check.ok === true ? "✓" : check.ok === false ? "✗" : "–"} ${check.check}`;
  li.append(mark, ` ${check.detail}`);
  return li;
}

async function run(panel: HTMLElement): Promise<void> {
  const id = panel.dataset.receipt ?? "";
  const status = panel.querySelector<HTMLElement>("[data-status]");
  const list = panel.querySelector<HTMLElement>("[data-checks]");
  if (!status || !list) return;
  try {
    if (!crypto?.subtle) throw new Error("this browser has no WebCrypto here (it needs a secure context: https or localhost)");
    const [envelope, log, keys] = await Promise.all([text(`/r/${id}.json`), text(`/r/${id}/events.jsonl`), text("/.well-known/loopwarden/keys.json")]);
    const events = log
      .split("\n")
      .filter((line) => line.trim().length > 0)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const result = await verifyReceipt({ envelope: JSON.parse(envelope), events, keys: KeySet.parse(JSON.parse(keys)), verify: verifyEd25519 });
    list.replaceChildren(...result.checks.map(item));
    panel.dataset.result = result.ok ? "valid" : "invalid";
    status.textContent = result.ok
      ? `Verified in this browser: signed by key ${result.key?.kid}${result.key?.status === "retired" ? " (retired)" : ""}, ${events.length} events hash-chained up to the signed head, every verdict and the halt re-derived, every figure on this page as the log says.`
      : `NOT verified: ${result.first_failure}. Do not trust this receipt.`;
  } catch (error) {
    panel.dataset.result = "error";
    status.textContent = `Could not verify: ${(error as Error).message}. Nothing on this page is verified; try \`loopwarden verify ${location.href}\`.`;
  }
}

const panel = document.getElementById("verification");
if (panel) void run(panel);
