// `npm run bench:verify`: how long verifying a receipt takes, and how much memory, as the loop's log
// grows (DESIGN §9), written to bench/results/verify.md. Receipts of 100, 1,000 and 10,000 events are
// built with the engine and signed with a fresh key; `loopwarden verify FILE --events --key` is timed as
// a user of the installed package runs it (the compiled CLI in a new process, under /usr/bin/time for
// its peak memory), the shared verifier alone in
// this process, and `sha256sum` over the same log bytes as the floor (reading and hashing them once).
// Prints figures; asserts nothing. Goal (issue 10): under 1 s at 10,000 events on this 2-core machine.
import { execFileSync } from "node:child_process";
import { webcrypto } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { canonicalJson } from "#shared/canonical-json.js";
import {
  applyEvent,
  createLoop,
  grantLease,
  proposeCandidate,
  reportObservation,
  sealEvent,
  type ChainHead,
  type EventDraft,
  type LoopEvent,
  type LoopState,
} from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import { IN_TOTO_PAYLOAD_TYPE, jwkThumbprint, receiptStatement, signEnvelope, verifyReceipt } from "#shared/receipts/index.js";
import { Contract } from "#shared/wire/contract.js";
import type { FullObservation } from "#shared/wire/observation.js";
import { verifyEd25519 } from "../runner/src/receipts/receipt-crypto.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
// The CLI an installed package runs, which this bench's npm script builds first (`npm run build:cli`).
const cli = path.join(root, "dist", "cli", "main.js");
const SIZES = [100, 1_000, 10_000];
const RUNS = 3;
const TESTS = Array.from({ length: 10 }, (_, index) => `tests/test_parse.py::test_case_${index}`);

const observation = (failing: number): FullObservation => ({
  gates: [{ name: "unit", exit_code: failing > 0 ? 1 : 0, signal: null, timed_out: false, duration_ms: 5, log: null }],
  tests: { passing: TESTS.slice(failing), failing: TESTS.slice(0, failing) },
});

/** A loop's log of at least `size` events: a creation, then proposal, lease, report and verdict per iteration. */
function logOf(size: number): LoopEvent[] {
  const contract = Contract.parse({
    name: "verify-bench",
    mode: "check_fixpoint",
    gates: [{ name: "unit", run: "pytest", tests: { junit: "out/junit.xml" } }],
    agent: { run: "agent" },
    stop: { max_iterations: 100_000, no_progress: 100_000 },
  });
  const drafts: EventDraft[] = [];
  let state: LoopState | null = null;
  let clock = Date.parse("2026-12-01T00:00:00.000Z");
  const at = () => new Date((clock += 1_000)).toISOString();
  const append = (events: EventDraft[]) => {
    for (const event of events) state = applyEvent(state, event);
    drafts.push(...events);
  };
  const created = createLoop({
    loop_id: "lp_0123456789abcdef01234567",
    contract,
    contract_hash: sha256Hex(canonicalJson(contract)),
    t0: { commit: "a".repeat(40), observation: observation(3) },
    at: at(),
  });
  if (!created.ok) throw new Error(created.error.message);
  append(created.events);
  for (let iteration = 1; drafts.length < size; iteration++) {
    if (!state) throw new Error("no state");
    const proposal = {
      idempotency_key: `bench-${iteration}`,
      commit: sha256Hex(`commit ${iteration}`).slice(0, 40),
      diff_sha256: sha256Hex(`diff ${iteration}`),
      empty: false,
      proposer: { kind: "command" as const, command: "agent" },
      agent: { exit_code: 0, timed_out: false, duration_ms: 1 },
    };
    const proposed = proposeCandidate(state, proposal, { request_hash: sha256Hex(canonicalJson(proposal)), at: at() });
    if (!proposed.ok) throw new Error(proposed.error.message);
    append(proposed.events);
    const leased = grantLease(state, { runner_id: "bench", labels: {}, at: at(), ttl_ms: 60_000 });
    if (!leased.ok || !leased.value) throw new Error("no lease");
    append(leased.events);
    const reported = reportObservation(state, {
      lease_id: leased.value.lease_id,
      fencing_token: leased.value.fencing_token,
      observation: observation(3),
      request_hash: sha256Hex(`report ${iteration}`),
      at: at(),
    });
    if (!reported.ok) throw new Error(reported.error.message);
    append(reported.events);
  }
  let head: ChainHead | null = null;
  return drafts.map((draft) => {
    const event = sealEvent(draft, head);
    head = { seq: event.seq, hash: event.hash };
    return event;
  });
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;
const seconds = (ms: number) => `${(ms / 1_000).toFixed(2)} s`;

const pair = (await webcrypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
const { x } = await webcrypto.subtle.exportKey("jwk", pair.publicKey);
if (!x) throw new Error("no public key");
const kid = jwkThumbprint({ x });
const keys = { keys: [{ kty: "OKP" as const, crv: "Ed25519" as const, x, kid, alg: "EdDSA" as const, use: "sig" as const, status: "active" as const }] };
const signer = { kid, sign: async (message: Uint8Array) => new Uint8Array(await webcrypto.subtle.sign({ name: "Ed25519" }, pair.privateKey, message)) };

const dir = mkdtempSync(path.join(os.tmpdir(), "lw-bench-verify-"));
/** `loopwarden verify`'s median at the goal's size (10,000 events and more), ms. */
let atGoal = Number.NaN;
const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};
try {
  say("# Receipt verification time");
  say();
  say(`\`npm run bench:verify\`, ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores; medians of ${RUNS} runs.`);
  say();
  say(
    "Goal (the receipts issue): `loopwarden verify` under 1 s at 10,000 events on this 2-core machine. `loopwarden verify` is the CLI as a user of the installed package runs it on saved files (the compiled CLI, dist/cli, in a new process, loading it included); the verifier alone is `verifyReceipt` in one process (signature, chain, every verdict re-derived, the predicate recomputed); `sha256sum` reads and hashes the same log bytes once, the floor.",
  );
  say();
  say("| events | log bytes | `loopwarden verify` | its peak RSS | verifier alone | `sha256sum` of the log |");
  say("|---:|---:|---:|---:|---:|---:|");
  for (const size of SIZES) {
    const events = logOf(size);
    const last = events.at(-1);
    let state: LoopState | null = null;
    for (const event of events) state = applyEvent(state, event);
    if (!state || !last) throw new Error("empty log");
    const statement = receiptStatement(state, { seq: last.seq, hash: last.hash }, { kind: "final", issued_at: new Date().toISOString(), version: "bench" });
    const envelope = await signEnvelope(canonicalJson(statement), IN_TOTO_PAYLOAD_TYPE, signer);
    const files = { envelope: path.join(dir, `${size}.json`), events: path.join(dir, `${size}.events.jsonl`), keys: path.join(dir, "keys.json") };
    writeFileSync(files.envelope, JSON.stringify(envelope));
    writeFileSync(files.events, events.map((event) => `${JSON.stringify(event)}\n`).join(""));
    writeFileSync(files.keys, JSON.stringify(keys));

    const verifyArgs = [cli, "--json", "verify", files.envelope, "--events", files.events, "--key", files.keys];
    const viaCli: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      const started = performance.now();
      const output = execFileSync(process.execPath, verifyArgs, { encoding: "utf8" });
      viaCli.push(performance.now() - started);
      if (!(JSON.parse(output) as { valid: boolean }).valid) throw new Error(`the ${size}-event receipt did not verify`);
    }
    // Peak memory from one more run under GNU time, whose line (KiB) is the last of stderr.
    const timed = execFileSync(
      "sh",
      [
        "-c",
        `/usr/bin/time -f %M "${process.execPath}" "${cli}" --json verify "${files.envelope}" --events "${files.events}" --key "${files.keys}" 2>&1 >/dev/null`,
      ],
      { encoding: "utf8" },
    );
    const peakKiB = Number(timed.trim().split("\n").at(-1));

    const inProcess: number[] = [];
    const records = readFileSync(files.events, "utf8")
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    for (let run = 0; run < RUNS; run++) {
      const started = performance.now();
      const result = await verifyReceipt({ envelope, events: records, keys, verify: verifyEd25519 });
      inProcess.push(performance.now() - started);
      if (!result.ok) throw new Error(`verifyReceipt: ${result.first_failure}`);
    }
    const floor: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      const started = performance.now();
      execFileSync("sha256sum", [files.events], { stdio: "ignore" });
      floor.push(performance.now() - started);
    }
    if (size >= 10_000) atGoal = median(viaCli);
    say(
      `| ${events.length.toLocaleString("en")} | ${(statSync(files.events).size / 1024 / 1024).toFixed(1)} MiB | ${seconds(median(viaCli))} | ${(peakKiB / 1024).toFixed(0)} MiB | ${seconds(median(inProcess))} | ${seconds(median(floor))} |`,
    );
  }
  say();
  say(`Goal: \`loopwarden verify\` under 1 s at 10,000 events — ${seconds(atGoal)}, ${atGoal < 1_000 ? "met" : "not met"}.`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
writeFileSync(path.join(root, "bench", "results", "verify.md"), `${lines.join("\n")}\n`);
console.log("\nwritten to bench/results/verify.md");
