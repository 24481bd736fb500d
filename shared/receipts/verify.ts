import { utf8 } from "@scure/base";
import { canonicalJson, sameJson } from "../canonical-json.js";
import { sha256Hex } from "../hash.js";
import { verifyChain, type ChainHead } from "../engine/chain.js";
import { cancelLoop, confirmBest, createLoop, proposeCandidate, recheckBest, requeueIfStale, unnamedComparison } from "../engine/commands.js";
import { haltContextUnsatisfiable, reviewCandidate, reviewTimeouts } from "../engine/review-commands.js";
import { releaseLease } from "../engine/lease-commands.js";
import { formatLabels, labelsSatisfy } from "../engine/labels.js";
import { decide } from "../engine/decide.js";
import { LoopEvent, type EventDraft } from "../engine/events.js";
import { stepwiseFold } from "../engine/state.js";
import { type LoopState } from "../engine/state-types.js";
import { Envelope, fromBase64, IN_TOTO_PAYLOAD_TYPE, pae } from "./dsse.js";
import { describeKeyLifetime, jwkThumbprint, keyLifetimeProblem, type KeySet, type PublicJwk } from "./keys.js";
import { receiptStatement, ReceiptStatement } from "./statement.js";
import { formatPercent } from "../format-percent.js";
import { formatList } from "../format-list.js";
import { outOfScope } from "../engine/scope.js";
import type { ChangedPaths } from "../wire/observation.js";

// Verifying a receipt (DESIGN §9), offline once its three documents are fetched: the envelope's
// signature against the published key set, by a key whose lifetime covers the signing time the
// statement states (a revoked key verifies nothing), the event log's hash chain up to the signed head, every
// verdict and halt in the log re-derived with the same engine that decided it, and the signed predicate
// recomputed from the log. Pure except for the signature check, which is injected (WebCrypto in Node
// and in the browser): this file runs unchanged in both.

/** Verifies an Ed25519 signature over `message` with a public key of the key set. */
export type Ed25519Verify = (key: PublicJwk, message: Uint8Array, signature: Uint8Array) => Promise<boolean>;

/** One check and its outcome: `ok` is null when it could not be made because an earlier one failed. */
export interface ReceiptCheck {
  check: "envelope" | "signature" | "statement" | "chain" | "verdicts" | "scope" | "predicate";
  ok: boolean | null;
  detail: string;
}

/** The outcome of verifying a receipt: valid only when every check passed. */
export interface ReceiptVerification {
  ok: boolean;
  checks: ReceiptCheck[];
  /** The first failed check's detail, e.g. `event 41: recorded verdict promoted, recomputed rejected`. */
  first_failure: string | null;
  statement: ReceiptStatement | null;
  /** The key whose signature verified. */
  key: PublicJwk | null;
}

/** An event in a few words, for naming where a log and the engine part ways. */
function describeDraft(draft: EventDraft): string {
  if (draft.type === "verdict") return `verdict ${draft.data.decision} (${draft.data.reason}) for ${draft.data.candidate_id}`;
  if (draft.type === "halted") return `halt ${draft.data.halt_reason}`;
  if (draft.type === "lease_requeued")
    return `re-queue of ${draft.data.candidate_id} (leased against ${draft.data.compare_to.candidate_id}, best ${draft.data.best.candidate_id})`;
  if (draft.type === "lease_released") return `release of ${draft.data.candidate_id}'s lease ${draft.data.lease_id}`;
  if (draft.type === "recheck_reported") return `recheck of ${draft.data.candidate_id} (${draft.data.purpose})`;
  if (draft.type === "confirm_measured") return `confirm of ${draft.data.candidate_id} (${formatPercent(draft.data.estimate)} over ${draft.data.pairs} pairs)`;
  return draft.type;
}

/** The signing time a payload states (its predicate's `issued_at`), read for the key's window before the statement is checked; null when unreadable. */
function signedAtOf(payload: string): string | null {
  try {
    const statement = JSON.parse(utf8.encode(fromBase64(payload))) as { predicate?: { issued_at?: unknown } } | null;
    const at = statement?.predicate?.issued_at;
    return typeof at === "string" ? at : null;
  } catch {
    return null;
  }
}

/**
 * The signature check: some signature verifies with a key of the set whose kid is its own thumbprint
 * (and, when `pin` is given, is that thumbprint), and the key may verify what the statement says was
 * signed when it was (`keyLifetimeProblem`: not revoked, the signing time inside its window).
 */
async function checkSignature(
  envelope: Envelope,
  keys: KeySet,
  verify: Ed25519Verify,
  pin: string | undefined,
): Promise<{ check: ReceiptCheck; key: PublicJwk | null }> {
  const message = pae(envelope.payloadType, fromBase64(envelope.payload));
  const signedAt = signedAtOf(envelope.payload);
  const ids = envelope.signatures.map((signature) => signature.keyid).join(", ");
  if (pin !== undefined && !envelope.signatures.some((signature) => signature.keyid === pin)) {
    return { check: { check: "signature", ok: false, detail: `the receipt is signed by keyid ${ids}, not the pinned key ${pin}` }, key: null };
  }
  let refused: string | null = null;
  for (const signature of envelope.signatures) {
    if (pin !== undefined && signature.keyid !== pin) continue;
    const key = keys.keys.find((candidate) => candidate.kid === signature.keyid && jwkThumbprint(candidate) === candidate.kid);
    if (!key) continue;
    let bytes: Uint8Array;
    try {
      bytes = fromBase64(signature.sig);
    } catch {
      continue;
    }
    if (!(await verify(key, message, bytes))) continue;
    // A genuine signature, by a key that may not vouch for this signing time: another signature may still.
    const problem = keyLifetimeProblem(key, signedAt);
    if (problem) {
      refused ??= problem;
      continue;
    }
    const lifetime = key.status === "active" || key.status === undefined ? "" : ` (${describeKeyLifetime(key)})`;
    const window = key.not_before || key.not_after ? `, signed at ${signedAt} within its window` : "";
    return { check: { check: "signature", ok: true, detail: `Ed25519 signature by key ${key.kid}${lifetime}${window}` }, key };
  }
  if (refused) return { check: { check: "signature", ok: false, detail: refused }, key: null };
  if (pin !== undefined && !keys.keys.some((key) => key.kid === pin)) {
    return { check: { check: "signature", ok: false, detail: `the pinned key ${pin} is not in the key set` }, key: null };
  }
  return { check: { check: "signature", ok: false, detail: `no signature verifies with a published key (keyid ${ids})` }, key: null };
}

/**
 * Re-derives every verdict and halt of a log with the engine: after each creation, proposal and report,
 * the events the engine produces must be the events recorded next, and no verdict or halt may appear
 * that the engine did not produce. Answers the folded state, or the first event that differs.
 */
export function rederive(events: readonly LoopEvent[]): { ok: true; state: LoopState | null } | { ok: false; detail: string } {
  // One fold written in place, so the whole check stays linear in the log.
  const fold = stepwiseFold();
  let state: LoopState | null = null;
  let expected: EventDraft[] = [];
  for (const event of events) {
    const draft: EventDraft = { type: event.type, at: event.at, data: event.data } as EventDraft;
    const next = expected.shift();
    if (next) {
      if (!sameJson(next, draft)) {
        return { ok: false, detail: `event ${event.seq}: recorded ${describeDraft(draft)}, recomputed ${describeDraft(next)}` };
      }
    } else if (draft.type === "verdict" || draft.type === "halted") {
      return { ok: false, detail: `event ${event.seq}: recorded ${describeDraft(draft)}, which the engine did not produce here` };
    }
    try {
      const produced = producedBefore(state, draft);
      state = fold.apply(draft);
      if (produced) expected = produced;
    } catch (error) {
      return { ok: false, detail: `event ${event.seq}: cannot be applied (${(error as Error).message})` };
    }
  }
  const missing = expected[0];
  if (missing) return { ok: false, detail: `the log ends before the engine's ${describeDraft(missing)}` };
  return { ok: true, state };
}

/**
 * The events the engine appends right after a creation, a proposal, a report (its verdict and halt) or
 * a recheck, computed from the loop before it, as the engine's command computed them (the command is
 * re-run and must produce the recorded event first); null for any other event. Leases
 * are checked against the same loop: a lease names the best of its time, a report is judged only when
 * its comparison is not stale, a re-queue only when it is (nothing is promoted on stale evidence), and a
 * release only of a lease that was out, under its own fencing token.
 */
function producedBefore(state: LoopState | null, draft: EventDraft): EventDraft[] | null {
  if (draft.type === "loop_created") {
    const { data } = draft;
    if (data.contract_hash !== sha256Hex(canonicalJson(data.contract))) throw new Error("its contract hash is not the hash of its contract");
    const created = createLoop({ ...data, at: draft.at });
    if (!created.ok) throw new Error(`the engine refuses this creation (${created.error.message})`);
    return created.events.slice(1);
  }
  if (state && draft.type === "candidate_proposed") {
    // The proposal is the event's data less what the engine assigned (id, parent) and the request's hash:
    // derived, not listed field by field, so a field added to proposals cannot be left out here.
    const { candidate_id: _id, parent: _parent, request_hash, ...proposal } = draft.data;
    const proposed = proposeCandidate(state, proposal, { request_hash, at: draft.at });
    if (!proposed.ok) throw new Error(`the engine refuses this proposal (${proposed.error.message})`);
    const [recomputed, ...rest] = proposed.events;
    if (!recomputed || !sameJson(recomputed, draft)) throw new Error("the engine proposes this candidate differently");
    return rest;
  }
  if (state && draft.type === "lease_granted") {
    // A candidate waiting for a person's answer is nobody's job until it is acknowledged.
    if (state.candidates[draft.data.candidate_id]?.status === "awaiting_review") {
      throw new Error(`the lease hands out ${draft.data.candidate_id}, which awaited a person's review`);
    }
    const named = draft.data.compare_to;
    // Absent from leases granted before leases named what they compare against.
    if (named && (named.candidate_id !== state.best.candidate_id || named.commit !== state.best.commit)) {
      throw new Error(`the lease names ${named.candidate_id} as the best, but the best was ${state.best.candidate_id}`);
    }
    // A lease goes only to a runner whose labels satisfy the contract's (absent from leases granted before labels were recorded).
    const required = state.contract.evaluate?.labels ?? {};
    if (draft.data.labels && !labelsSatisfy(required, draft.data.labels)) {
      throw new Error(
        `the lease went to runner ${draft.data.runner_id} labelled ${formatLabels(draft.data.labels)}, without the contract's ${formatLabels(required)}`,
      );
    }
    return null;
  }
  if (state && draft.type === "observation_reported") {
    const { data } = draft;
    const stale = requeueIfStale(state, { ...data, compared_to: data.observation.compared_to, at: draft.at });
    if (stale) throw new Error(`a report under a stale comparison is judged here; the engine answers it with a ${describeDraft(stale)}`);
    const lease = state.candidates[data.candidate_id]?.lease;
    const unnamed = lease?.lease_id === data.lease_id ? unnamedComparison(state, lease, data.observation) : null;
    if (unnamed) throw new Error(`the engine refuses this report: ${unnamed}`);
    // Decided on the loop before the report is recorded, as `reportObservation` decides it: whether the
    // report measured a tree already measured (and so feeds the flake monitor) is read from that loop.
    return decide(state, state.contract, data.candidate_id, data.observation, draft.at).events;
  }
  if (state && draft.type === "lease_requeued") {
    const { data } = draft;
    const recomputed = requeueIfStale(state, { ...data, compared_to: data.compared_to ?? undefined, at: draft.at });
    if (!recomputed) throw new Error("the engine does not re-queue here: the lease is not current or its comparison is not stale");
    if (!sameJson(recomputed, draft)) throw new Error(`recorded ${describeDraft(draft)}, recomputed ${describeDraft(recomputed)}`);
    return [];
  }
  if (state && draft.type === "lease_released") {
    // Only the lease's current holder releases it, once: a release of a lease that was not out is forged.
    const released = releaseLease(state, { ...draft.data, at: draft.at });
    if (!released.ok) throw new Error(`the engine refuses this release (${released.error.message})`);
    const [recomputed] = released.events;
    if (!recomputed) throw new Error(`lease ${draft.data.lease_id} was already released`);
    if (!sameJson(recomputed, draft)) throw new Error(`recorded ${describeDraft(draft)}, recomputed ${describeDraft(recomputed)}`);
    return [];
  }
  if (state && draft.type === "cancel_requested") {
    // A person's request: the halt that follows must be the engine's answer to it, and nothing may be
    // cancelled once halted.
    const cancelled = cancelLoop(state, { ...draft.data, at: draft.at });
    if (!cancelled.ok) throw new Error(`the engine refuses this cancel (${cancelled.error.message})`);
    const [recomputed, ...rest] = cancelled.events;
    if (!recomputed || !sameJson(recomputed, draft)) throw new Error("the engine records this cancel differently");
    return rest;
  }
  if (state && draft.type === "review_decided") {
    // A person's answer: the verdict after a rejection must be the engine's, and only a request is answered.
    const { candidate_id, decision, note, by } = draft.data;
    const reviewed = reviewCandidate(state, { candidate_id, decision, note, by, at: draft.at });
    if (!reviewed.ok) throw new Error(`the engine refuses this review (${reviewed.error.message})`);
    const [recomputed, ...rest] = reviewed.events;
    if (!recomputed || !sameJson(recomputed, draft)) throw new Error("the engine records this review differently");
    return rest;
  }
  if (state && draft.type === "review_timed_out") {
    // Only a request that waited out stop.review_timeout times out, and the halt is the engine's.
    const [recomputed, ...rest] = reviewTimeouts(state, draft.at);
    if (!recomputed || !sameJson(recomputed, draft)) throw new Error("no review request had timed out by then");
    return rest;
  }
  if (state && draft.type === "context_unsatisfiable") {
    const { at, data } = draft;
    const halted = haltContextUnsatisfiable(state, { ...data, at });
    if (!halted.ok) throw new Error(`the engine refuses this context report (${halted.error.message})`);
    return halted.events.slice(1);
  }
  if (state && draft.type === "recheck_reported") {
    // A re-run of a best: judged against that best's recorded outcome, the halt (if any) the engine's.
    const { request_hash, by, ...recheck } = draft.data;
    const rechecked = recheckBest(state, { ...recheck, by }, { request_hash, at: draft.at });
    if (!rechecked.ok) throw new Error(`the engine refuses this recheck (${rechecked.error.message})`);
    const [recomputed, ...rest] = rechecked.events;
    if (!recomputed || !sameJson(recomputed, draft)) throw new Error("the engine records this recheck differently");
    return rest;
  }
  if (state && draft.type === "confirm_measured") {
    // The estimate is recomputed from the recorded readings: a confirm figure is the engine's, never the runner's.
    const confirmed = confirmBest(state, { candidate_id: draft.data.candidate_id, samples: draft.data.samples }, draft.at);
    if (!confirmed.ok) throw new Error(`the engine records no confirm measurement here (${confirmed.error.message})`);
    const [recomputed] = confirmed.events;
    if (!recomputed) throw new Error("the engine wants more pairs before it records a confirm measurement");
    if (!sameJson(recomputed, draft)) throw new Error(`recorded ${describeDraft(draft)}, recomputed ${describeDraft(recomputed)}`);
    return [];
  }
  return null;
}

/**
 * Verifies a receipt: its envelope, against the key set, over the events of its log. With `pin` (an RFC
 * 7638 thumbprint), only a signature by that key of the set counts.
 */
export async function verifyReceipt(input: {
  envelope: unknown;
  events: readonly Record<string, unknown>[];
  keys: KeySet;
  verify: Ed25519Verify;
  pin?: string | undefined;
}): Promise<ReceiptVerification> {
  const checks: ReceiptCheck[] = [];
  const done = (statement: ReceiptStatement | null, key: PublicJwk | null): ReceiptVerification => {
    const failed = checks.find((check) => check.ok === false);
    return { ok: checks.every((check) => check.ok === true), checks, first_failure: failed ? `${failed.check}: ${failed.detail}` : null, statement, key };
  };
  const skipped = (names: ReceiptCheck["check"][], why: string) => names.forEach((check) => checks.push({ check, ok: null, detail: `not checked: ${why}` }));

  const envelope = Envelope.safeParse(input.envelope);
  if (!envelope.success) {
    checks.push({ check: "envelope", ok: false, detail: "not a DSSE envelope" });
    skipped(["signature", "statement", "chain", "verdicts", "scope", "predicate"], "no envelope");
    return done(null, null);
  }
  const { payloadType } = envelope.data;
  checks.push(
    payloadType === IN_TOTO_PAYLOAD_TYPE
      ? { check: "envelope", ok: true, detail: `DSSE envelope of ${payloadType}` }
      : { check: "envelope", ok: false, detail: `payloadType is ${JSON.stringify(payloadType)}, not ${IN_TOTO_PAYLOAD_TYPE}` },
  );
  const signature = await checkSignature(envelope.data, input.keys, input.verify, input.pin);
  checks.push(signature.check);

  let statement: ReceiptStatement | null = null;
  try {
    const parsed = ReceiptStatement.safeParse(JSON.parse(utf8.encode(fromBase64(envelope.data.payload))));
    statement = parsed.success ? parsed.data : null;
  } catch {
    statement = null;
  }
  if (!statement) {
    checks.push({ check: "statement", ok: false, detail: "the payload is not a loopwarden receipt statement (in-toto Statement v1)" });
    skipped(["chain", "verdicts", "scope", "predicate"], "no statement");
    return done(null, signature.key);
  }
  checks.push({ check: "statement", ok: true, detail: `in-toto Statement v1, ${statement.predicate.kind} receipt of loop ${statement.predicate.loop_id}` });

  const signed: ChainHead = statement.predicate.log;
  const chain = verifyChain(input.events);
  if (!chain.ok) checks.push({ check: "chain", ok: false, detail: chain.message });
  else if (chain.head?.seq !== signed.seq || chain.head.hash !== signed.hash) {
    const ends = chain.head ? `ends at event ${chain.head.seq} (${chain.head.hash.slice(0, 12)})` : "is empty";
    checks.push({ check: "chain", ok: false, detail: `the log ${ends}; the receipt signs event ${signed.seq} (${signed.hash.slice(0, 12)})` });
  } else checks.push({ check: "chain", ok: true, detail: `${signed.seq} events, hash-chained up to the signed head ${signed.hash.slice(0, 12)}` });
  if (checks.at(-1)?.ok !== true) {
    skipped(["verdicts", "scope", "predicate"], "the log is not the one signed");
    return done(statement, signature.key);
  }

  const parsed: LoopEvent[] = [];
  for (const event of input.events) {
    const one = LoopEvent.safeParse(event);
    if (!one.success) {
      checks.push({ check: "verdicts", ok: false, detail: `event ${String(event.seq)}: does not match the event schema` });
      skipped(["scope", "predicate"], "the log does not parse");
      return done(statement, signature.key);
    }
    parsed.push(one.data);
  }
  const derived = rederive(parsed);
  if (!derived.ok || !derived.state) {
    checks.push({ check: "verdicts", ok: false, detail: derived.ok ? "the log has no loop" : derived.detail });
    skipped(["scope", "predicate"], "the verdicts do not re-derive");
    return done(statement, signature.key);
  }
  const verdicts = parsed.filter((event) => event.type === "verdict").length;
  const halt = derived.state.halt ? " and the halt" : "";
  checks.push({ check: "verdicts", ok: true, detail: `all ${verdicts} verdict(s)${halt} re-derived with the engine` });

  checks.push(checkScope(derived.state, parsed));

  const { predicate } = statement;
  const recomputed = receiptStatement(derived.state, signed, { kind: predicate.kind, issued_at: predicate.issued_at, version: predicate.coordinator.version });
  // A receipt signed before coordinators recorded the zones, or the scope, attests none: every other
  // figure is still checked, and the verifier says what is not attested rather than calling it invalid.
  const unattested = LATER_FIELDS.filter((field) => predicate[field] === undefined);
  const expected = { ...recomputed, predicate: { ...recomputed.predicate } as Partial<typeof recomputed.predicate> };
  for (const field of unattested) delete expected.predicate[field];
  const different = firstDifference(expected, statement);
  checks.push(
    different === null
      ? {
          check: "predicate",
          ok: true,
          detail: `every attested figure is the log's${unattested.length > 0 ? ` (a receipt from before ${unattested.map((field) => LATER_FIELD_NAMES[field].since).join(" and ")} were recorded: it attests ${unattested.map((field) => `no ${LATER_FIELD_NAMES[field].what}`).join(" and ")})` : ""}`,
        }
      : { check: "predicate", ok: false, detail: `${different} differs from what the log says` },
  );
  return done(statement, signature.key);
}

/** Predicate fields that receipts signed by earlier coordinators lack, and what they are called. */
const LATER_FIELDS = ["confinement", "scope", "oracle"] as const;
const LATER_FIELD_NAMES: Record<(typeof LATER_FIELDS)[number], { since: string; what: string }> = {
  confinement: { since: "zones", what: "confinement" },
  scope: { since: "scopes", what: "scope" },
  oracle: { since: "preconditions", what: "precondition" },
};

/**
 * The scope check (DESIGN §6.4), made again from the log: every promoted candidate's changed paths, as
 * its evaluating runner read them against t0, lie inside the contract's scope. The verdicts re-derived
 * already imply it; this names what was checked, and holds on its own should the engine ever change.
 */
function checkScope(state: LoopState, events: readonly LoopEvent[]): ReceiptCheck {
  const scope = state.contract.scope;
  if (!scope) return { check: "scope", ok: true, detail: "none: the contract names no scope, so only the protected set guarded the check" };
  // The last report's readings of each candidate still awaiting its verdict.
  const reported = new Map<string, ChangedPaths | undefined>();
  let promoted = 0;
  let bestPaths = 0;
  // Paths a person approved the change of (docs/design.md §6.8): admitted for their candidate, and for
  // every candidate after it was promoted, as the engine admits them.
  const acked = new Map<string, string[]>();
  const approved = new Set<string>();
  let approvedCount = 0;
  for (const event of events) {
    if (event.type === "review_decided" && event.data.decision === "ack") acked.set(event.data.candidate_id, event.data.files);
    if (event.type === "observation_reported") reported.set(event.data.candidate_id, event.data.observation.guards?.changed_paths);
    if (event.type !== "verdict" || event.data.decision === "need_samples") continue;
    const changed = reported.get(event.data.candidate_id);
    reported.delete(event.data.candidate_id);
    if (event.data.decision !== "promoted") continue;
    const where = `event ${event.seq}: ${event.data.candidate_id} was promoted`;
    if (!changed) return { check: "scope", ok: false, detail: `${where} without a reading of the paths it changed` };
    if (changed.against !== state.t0.commit)
      return { check: "scope", ok: false, detail: `${where} on paths read against ${changed.against.slice(0, 12)}, not t0` };
    const own = new Set(acked.get(event.data.candidate_id) ?? []);
    const outside = outOfScope(
      scope,
      changed.paths.filter((path) => !approved.has(path) && !own.has(path)),
    );
    if (outside.length > 0 || changed.total > changed.paths.length) {
      return {
        check: "scope",
        ok: false,
        detail: `${where}, though it changed ${outside.length > 0 ? formatList(outside) : `${changed.total} paths`} outside the scope`,
      };
    }
    promoted++;
    bestPaths = changed.total;
    for (const path of own) approved.add(path);
    approvedCount = approved.size;
  }
  return {
    check: "scope",
    ok: true,
    detail: `${formatList(scope)}: the changed paths of ${promoted} promoted candidate(s) re-checked, all inside it${approvedCount > 0 ? ` or approved by a person (${approvedCount} path(s))` : ""}${promoted > 0 ? ` (the last one changes ${bestPaths} path(s) since t0)` : ""}`,
  };
}

/** The path of the first member where two JSON values differ (canonical JSON compared), or null. */
function firstDifference(expected: unknown, actual: unknown, path = "statement"): string | null {
  if (sameJson(expected, actual)) return null;
  if (expected && actual && typeof expected === "object" && typeof actual === "object" && !Array.isArray(expected) && !Array.isArray(actual)) {
    const keys = [...new Set([...Object.keys(expected), ...Object.keys(actual)])].sort();
    for (const key of keys) {
      const inner = firstDifference((expected as Record<string, unknown>)[key], (actual as Record<string, unknown>)[key], `${path}.${key}`);
      if (inner) return inner;
    }
  }
  return path;
}

/** The sha256 an envelope is recorded under (`receipt_issued.envelope_sha256`): of its canonical JSON. */
export function envelopeDigest(envelope: Envelope): string {
  return sha256Hex(canonicalJson(envelope));
}
