import { bytesToHex } from "@noble/hashes/utils.js";
import { canonicalJson } from "#shared/canonical-json.js";
import type { ChainHead, EventDraft } from "#shared/engine/index.js";
import { envelopeDigest, IN_TOTO_PAYLOAD_TYPE, receiptStatement, signEnvelope, type Envelope } from "#shared/receipts/index.js";
import { VERSION } from "#shared/version.js";
import { writeProjection, type OutboxItem } from "../db/projection.js";
import type { LoopEventStore } from "./loop-event-store.js";
import { keySetOf, receiptKeyOf } from "../receipt-keys.js";
import type { Refusal } from "./refusal.js";

// A loop's receipts (DESIGN §9), for its LoopObject: signed over the log as it is, recorded as
// `receipt_issued` with the envelope's outbox row in one transaction, and the outbox drained to D1 so the
// receipt's URL answers at once. Signing is slow I/O and happens before the transaction, never inside one.

/**
 * Outbox rows written to D1 per batch. A running loop's 5 s of rows (about eleven a decision: each
 * append's events, its candidates' rows and the loop's row, which `latestRows` writes once) fit in one,
 * so a report that halts the loop, which drains before it answers (its receipt's URL answers then),
 * waits for one D1 round trip, not two or three as with 50 (issue 30).
 */
const DRAIN_BATCH = 200;
/**
 * How long an outbox row may wait for the alarm to drain it, unless it changes how the loop is listed
 * (LoopEventStore.listingChanged): the rows of the appends within it go to D1 in one batch, so a loop
 * costs D1 at most one batch per this long however fast it decides. Drained at every append, a
 * decision's three requests cost three D1 batches and three alarms, 40% of the worker's CPU per
 * decision under `npm run bench:load` (issue 30). A running loop's listing (its iteration, best,
 * runners) is then at most this far behind its log; its creation and its halt are not.
 */
export const DRAIN_DELAY_MS = 5_000;
/** Delay before the alarm retries a failed drain by re-arming itself (the runtime also retries thrown alarms). */
export const DRAIN_RETRY_MS = 5_000;

/** A signed receipt as the LoopObject answers it. */
export type SignedReceipt = { ok: true; receipt_id: string; envelope: Envelope; head: ChainHead } | Refusal;

export class LoopReceipts {
  /** The final receipt being signed, so a report and the alarm never issue two. */
  private finalReceipt: Promise<void> | null = null;

  constructor(
    private readonly env: Env,
    private readonly sql: SqlStorage,
    private readonly store: LoopEventStore,
    /** Re-arms the loop's alarm, with a drain retried after the given delay. */
    private readonly scheduleAlarm: (retryDrainInMs: number) => Promise<void>,
  ) {}

  /**
   * Signs a receipt over the log as it is now and records it: the envelope goes to D1 (drained at once,
   * so its URL answers when this returns) and `receipt_issued` to the log.
   */
  async sign(kind: "final" | "interim"): Promise<SignedReceipt> {
    if (!this.store.state || !this.store.head) return { ok: false, code: "not_found", message: "no such loop" };
    const key = receiptKeyOf(this.env);
    if (!key) {
      return {
        ok: false,
        code: "signing_unconfigured",
        message: "this coordinator has no receipt signing key (the RECEIPT_SIGNING_KEY secret; see the README, Receipts)",
      };
    }
    const { signer } = await key;
    // A key the published set no longer calls active (revoked, or retired with a not_after) would sign
    // receipts nobody can verify: none is signed until RECEIPT_SIGNING_KEY is replaced.
    const published = await keySetOf(this.env).then(
      (set) => set.keys.find((entry) => entry.kid === signer.kid),
      () => undefined,
    );
    if (published?.status !== "active") {
      return {
        ok: false,
        code: "signing_unconfigured",
        message: `the receipt signing key ${signer.kid} is ${published ? published.status : "not published (the key variables cannot be read)"}: set a new RECEIPT_SIGNING_KEY (see the README, Receipts)`,
      };
    }
    // The state and its head as they are now, read together after the awaits above: other requests may
    // have appended meanwhile, and the state is folded in place (loop-event-store.ts).
    const state = this.store.state;
    const head = this.store.head;
    if (!state || !head) return { ok: false, code: "not_found", message: "no such loop" };
    const issuedAt = new Date().toISOString();
    const statement = receiptStatement(state, head, { kind, issued_at: issuedAt, version: VERSION });
    const envelope = await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, signer);
    const receiptId = `rc_${bytesToHex(crypto.getRandomValues(new Uint8Array(16)))}`;
    const issued: EventDraft = {
      type: "receipt_issued",
      at: issuedAt,
      data: { receipt_id: receiptId, kind, head, keyid: signer.kid, envelope_sha256: envelopeDigest(envelope) },
    };
    const appended = this.store.tryAppend([issued], () => {
      const row = {
        id: receiptId,
        loopId: state.loop_id,
        kind,
        headSeq: head.seq,
        headHash: head.hash,
        keyid: signer.kid,
        envelope: JSON.stringify(envelope),
        issuedAt,
      };
      this.sql.exec("INSERT INTO outbox (item) VALUES (?)", JSON.stringify({ kind: "receipt", row } satisfies OutboxItem));
    });
    if ("ok" in appended) return appended;
    try {
      await this.drainOutbox();
    } catch (error) {
      console.error("loopwarden: writing the receipt to D1 failed; the alarm retries", error);
    }
    await this.scheduleAlarm(DRAIN_RETRY_MS);
    return { ok: true, receipt_id: receiptId, envelope, head };
  }

  /**
   * The receipt of a halted loop, when a signing key is configured: issued at the halt, and again when
   * what it attests changed (a confirm measurement came in); the alarm retries one that failed.
   */
  issueFinal(): Promise<void> {
    if (this.finalReceipt) return this.finalReceipt;
    const state = this.store.state;
    if (!state?.halt || (state.final_receipt !== null && !state.final_receipt_outdated) || !receiptKeyOf(this.env)) return Promise.resolve();
    this.finalReceipt = (async () => {
      try {
        const issued = await this.sign("final");
        if (!issued.ok) console.error("loopwarden: the final receipt was not issued", issued.code, issued.message);
      } catch (error) {
        console.error("loopwarden: the final receipt was not issued; the alarm retries", error);
      } finally {
        this.finalReceipt = null;
      }
    })();
    return this.finalReceipt;
  }

  /** Writes the outbox to D1 in batches, each removed once D1 has it (a re-delivery changes nothing). */
  async drainOutbox(): Promise<void> {
    for (;;) {
      const rows = this.sql.exec<{ id: number; item: string }>("SELECT id, item FROM outbox ORDER BY id LIMIT ?", DRAIN_BATCH).toArray();
      const last = rows.at(-1);
      if (!last) {
        this.store.listingChanged = false;
        return;
      }
      await writeProjection(
        this.env.DB,
        rows.map((row) => JSON.parse(row.item) as OutboxItem),
      );
      this.sql.exec("DELETE FROM outbox WHERE id <= ?", last.id);
    }
  }
}
