// `npm run bench:load`: many loops driven at once over HTTP on 127.0.0.1, with malformed and oversized
// requests mixed in (issue 14, item 6). For each host — the local coordinator (`loopwarden serve`: the
// built worker in workerd through Miniflare's API, no proxy) and `wrangler dev` serving the same built
// bundle (`--no-bundle`) behind its own proxy — and for N = 50 and 200 loops, N async clients each run
// the real cycle (propose a candidate and lease it in one request, as `loopwarden run` does → report what was measured) until their loop halts or
// ITERATIONS decisions were made, within a deadline. About one request in ten is malformed or oversized,
// and must be answered with the 4xx the API defines, never a 5xx. Afterwards every loop's event log must
// hold exactly the events the valid requests produced (by type, candidate and verdict), and its hash
// chain must verify; no loop may exist for a malformed creation. Writes bench/results/load.md. Timings
// are printed, not asserted (a shared 2-core machine); the correctness checks are asserted: a failed
// one sets the exit code to 1 (what the worker stored and answered; not what a proxy or a connection
// lost on the way, which is counted and retried as the runner's client does).
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import nodeHttp from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { compactTests, LoopEvent, testBaseOf, verifyChain } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import type { FullObservation, FullTests } from "#shared/wire/observation.js";
import { BUNDLE_FILE } from "../scripts/lib/worker-bundle.js";
import { startCoordinator, TEST_OWNER_TOKEN } from "../test/support/cli.js";
import { applyWranglerMigrations, startWranglerDev } from "../test/support/wrangler-dev.js";
import { mulberry32 } from "../test/support/prng.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
/** Loop counts; `tsx bench/load.ts 5 --only miniflare` tries other ones (printed, not written to results). */
const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const only = option("--only");
/** A coordinator already running (its owner token TEST_OWNER_TOKEN), to drive instead of starting one: for looking into its log. */
const given = option("--url");
const chosenSizes = args.filter((arg, index) => /^\d+$/.test(arg) && !args[index - 1]?.startsWith("--")).map(Number);
const SIZES = chosenSizes.length > 0 ? chosenSizes : [50, 200];
/**
 * The cycle as `loopwarden run` sends it: a proposal that asks for its lease too (one request), then the
 * report. With `--separate-lease`, the lease is its own request, as a `loopwarden work` runner leases a
 * job another client proposed (a trial: printed, not written to results).
 */
const SEPARATE_LEASE = args.includes("--separate-lease");
/** Valid requests in one decision's cycle. */
const REQUESTS_PER_DECISION = SEPARATE_LEASE ? 3 : 2;
const TRIAL = chosenSizes.length > 0 || only !== undefined || given !== undefined || SEPARATE_LEASE;
/** Decisions per loop at most: the plan below halts a loop on its 8th (success). */
const ITERATIONS = 8;
/** No iteration starts after this long from a run's start; a run's whole drive is bounded by it. */
const DEADLINE_MS = 60_000;
/** Requests in flight at once, across all the loops' clients (the rest wait in the client). */
const MAX_IN_FLIGHT = 64;
/** The chance that a valid request is followed by a malformed one: about one request in ten is malformed. */
const MALFORMED_AFTER = 1 / 9;
/** Sequential requests that reach the worker but no Durable Object, D1 or R2: each host's floor. */
const FLOOR_REQUESTS = 300;
const SEED = 14;
/**
 * The worker's body caps (worker/src/app.ts, which this Node script cannot import: it is typed for
 * workerd): 1 MiB per JSON body, 4 MiB for a loop's creation and a report. A request one byte over must
 * be 413, so a cap raised there without this file shows here as a status the API does not define.
 */
const MAX_JSON_BODY_BYTES = 1024 * 1024;
const MAX_TEST_SET_BODY_BYTES = 4 * 1024 * 1024;

// ---- the loops' plan -------------------------------------------------------------------------------

const TEST_IDS = Array.from({ length: 6 }, (_, index) => `suite/load.test.ts > case ${index}`);
const T0_FAILING = 4;
const GATE = "unit";

function testsWith(failing: number): FullTests {
  return { passing: TEST_IDS.slice(failing), failing: TEST_IDS.slice(0, failing) };
}
function observationWith(failing: number): FullObservation {
  return {
    gates: [{ name: GATE, exit_code: failing > 0 ? 1 : 0, signal: null, timed_out: false, duration_ms: 40, log: null }],
    tests: testsWith(failing),
  };
}
const BASE = testBaseOf(testsWith(T0_FAILING));

/**
 * Iteration `i` (from 1): an odd one changes nothing the tests see (rejected, no_improvement), an even
 * one fixes one more test (promoted, fewer_failures); the 8th leaves none failing and halts the loop.
 */
const failingAfter = (iteration: number) => T0_FAILING - Math.floor(iteration / 2);

const contract = {
  name: "load",
  mode: "check_fixpoint",
  gates: [{ name: GATE, run: "npm test", tests: { junit: "out/junit.xml" } }],
  agent: { run: "agent --fix-one" },
  stop: { max_iterations: 50, no_progress: 10 },
};

const commitOf = (label: string) => sha256Hex(`commit ${label}`).slice(0, 40);

function createBody(key: string) {
  return { idempotency_key: key, contract, t0: { commit: commitOf(`${key} t0`), observation: observationWith(T0_FAILING) } };
}
function candidateBody(key: string) {
  return {
    idempotency_key: key,
    commit: commitOf(key),
    diff_sha256: sha256Hex(`diff ${key}`),
    empty: false,
    proposer: { kind: "command", command: "agent --fix-one" },
    agent: { exit_code: 0, timed_out: false, duration_ms: 900 },
  };
}
function reportBody(fencingToken: number, failing: number, comparedTo: string | undefined) {
  const full = observationWith(failing);
  return {
    fencing_token: fencingToken,
    observation: { ...full, tests: compactTests(full.tests, BASE), ...(comparedTo ? { compared_to: comparedTo } : {}) },
  };
}

// ---- HTTP, timed -----------------------------------------------------------------------------------

type Kind = "create" | "propose" | "lease" | "report" | "malformed";

interface Sample {
  kind: Kind;
  ms: number;
  status: number;
  /**
   * Whether the worker answered: any status under 500, or a 5xx in its JSON error envelope (DESIGN §8,
   * app.onError). Not the worker's: a connection error, or a 5xx without the envelope (wrangler dev's
   * proxy answers 503 "Your worker restarted mid-request" when its own connection to the worker failed).
   */
  byWorker: boolean;
  /** A report whose answer says the loop halted (its final receipt signed and drained before the answer). */
  halting?: boolean;
}

/** Whether a body is the worker's JSON error envelope. */
function isEnvelope(text: string): boolean {
  try {
    return typeof (JSON.parse(text) as { error?: { code?: unknown } }).error?.code === "string";
  } catch {
    return false;
  }
}

/** A counting semaphore: at most MAX_IN_FLIGHT requests on the wire at once. */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];
  constructor(count: number) {
    this.free = count;
  }
  async take(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }
  give(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free++;
  }
}

class Http {
  readonly samples: Sample[] = [];
  /** The first few 5xx answers, as sent: what a bug report needs. */
  readonly serverErrors: string[] = [];
  private readonly slots = new Slots(MAX_IN_FLIGHT);
  constructor(readonly url: string) {}

  /** Sends one request and reads its whole answer; status 0 is a connection error. Timed from when it leaves the client's queue. */
  async send(
    kind: Kind,
    method: string,
    route: string,
    body?: string | Buffer | ReadableStream<Uint8Array>,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; text: string; sample: Sample }> {
    await this.slots.take();
    const started = performance.now();
    let status = 0;
    let text = "";
    const sample: Sample = { kind, ms: 0, status: 0, byWorker: false };
    try {
      const init: RequestInit & { duplex?: "half" } = {
        method,
        headers: { authorization: `Bearer ${TEST_OWNER_TOKEN}`, ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
        ...(body === undefined ? {} : { body }),
        ...(body instanceof ReadableStream ? { duplex: "half" } : {}),
      };
      const response = await fetch(`${this.url}${route}`, init);
      text = await response.text();
      status = response.status;
    } catch (error) {
      // undici says "fetch failed"; what failed is its cause (ECONNRESET, "other side closed", …).
      const cause = (error as Error & { cause?: { code?: string; message?: string } }).cause;
      text = `${(error as Error).message}: ${cause?.code ?? ""} ${cause?.message ?? ""}`.trim();
      if (this.connectionErrors.length < 10)
        this.connectionErrors.push(`${method} ${route} (${kind}) after ${(performance.now() - started).toFixed(0)} ms: ${text}`);
    } finally {
      Object.assign(sample, { ms: performance.now() - started, status, byWorker: status !== 0 && (status < 500 || isEnvelope(text)) });
      this.samples.push(sample);
      if (status >= 500 && this.serverErrors.length < 10) this.serverErrors.push(`${method} ${route} → ${status} ${text.slice(0, 300)}`);
      this.slots.give();
    }
    return { status, text, sample };
  }

  /**
   * A body over the cap with its Content-Length, on a connection of its own that is closed afterwards.
   * workerd answers 413 before reading such a body and then resets the connection (the unread bytes make
   * the kernel send RST): a pooled connection would pass that reset on to whichever request fetch sent on
   * it next, and the reset may also come before the 413 is read (counted as "reset before the 413").
   */
  async sendAlone(kind: Kind, method: string, route: string, body: Buffer): Promise<{ status: number; text: string }> {
    await this.slots.take();
    const started = performance.now();
    const target = new URL(`${this.url}${route}`);
    const answer = await new Promise<{ status: number; text: string }>((resolve) => {
      const request = nodeHttp.request(
        {
          host: target.hostname,
          port: target.port,
          path: target.pathname,
          method,
          agent: false,
          headers: { authorization: `Bearer ${TEST_OWNER_TOKEN}`, "content-type": "application/json", "content-length": body.length, connection: "close" },
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => resolve({ status: response.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
          response.on("error", (error) => resolve({ status: 0, text: `${(error as NodeJS.ErrnoException).code ?? error.message}` }));
        },
      );
      request.on("error", (error) => resolve({ status: 0, text: `${(error as NodeJS.ErrnoException).code ?? error.message}` }));
      request.end(body);
    });
    this.samples.push({
      kind,
      ms: performance.now() - started,
      status: answer.status,
      byWorker: answer.status !== 0 && (answer.status < 500 || isEnvelope(answer.text)),
    });
    this.slots.give();
    return answer;
  }

  /**
   * A valid request, sent again (at most 3 times) after a connection error or a 503, as a runner's
   * client does: wrangler dev's proxy answers 503 "Your worker restarted mid-request" for a request it
   * could not forward, and a pooled keep-alive connection may be closed by the server as it is reused.
   * Every attempt is a sample (a 503 counts as a 5xx, a connection error as one); each request of the
   * cycle is idempotent (creation and proposal by key, a lease by runner id, a report by lease and body).
   */
  async json(kind: Kind, method: string, route: string, body: unknown): Promise<{ status: number; text: string; sample: Sample }> {
    for (let attempt = 1; ; attempt++) {
      const answer = await this.send(kind, method, route, JSON.stringify(body));
      if ((answer.status !== 503 && answer.status !== 0) || attempt === 3 || kind === "malformed") return answer;
      this.retried++;
    }
  }

  /** The first few connection errors, with undici's cause. */
  readonly connectionErrors: string[] = [];

  /** Valid requests sent again after a 503 or a connection error. */
  retried = 0;
}

/** `body` as JSON padded with spaces before its closing brace to exactly `size` bytes: valid but for its size. */
function padded(body: object, size: number): Buffer {
  const json = Buffer.from(JSON.stringify(body));
  const bytes = Buffer.alloc(size, 0x20);
  json.copy(bytes, 0, 0, json.length - 1);
  bytes[size - 1] = 0x7d;
  return bytes;
}

/** The same bytes streamed in 64 KiB chunks, so the request carries no Content-Length. */
function chunked(bytes: Buffer): ReadableStream<Uint8Array> {
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.length) return controller.close();
      controller.enqueue(new Uint8Array(bytes.subarray(offset, offset + 65_536)));
      offset += 65_536;
    },
  });
}

// ---- malformed and oversized requests --------------------------------------------------------------

/** What a malformed request may use: its loop, and the lease in hand. */
interface Context {
  loopId: string;
  leaseId: string;
  fencingToken: number;
  comparedTo: string | undefined;
  failing: number;
  /** A key never used by a valid request of this run. */
  key: string;
}

interface Malformed {
  name: string;
  /** The status the API defines for it (DESIGN §8, worker/src/http/http-errors.ts). */
  status: number;
  code: string;
  /** A body over the cap with its Content-Length: workerd may reset the connection before the 413 is read. */
  mayReset?: true;
  send(http: Http, context: Context): Promise<{ status: number; text: string }>;
}

const MALFORMED: Malformed[] = [
  {
    name: "bad JSON (a proposal cut short)",
    status: 400,
    code: "invalid_json",
    send: (http, c) => http.send("malformed", "POST", `/v1/loops/${c.loopId}/candidates`, JSON.stringify(candidateBody(c.key)).slice(0, -1)),
  },
  {
    name: "a key the schema does not have (a report claiming its verdict)",
    status: 400,
    code: "invalid_request",
    send: (http, c) =>
      http.json("malformed", "POST", `/v1/leases/${c.leaseId}/report`, { ...reportBody(c.fencingToken, 0, c.comparedTo), verdict: "promoted" }),
  },
  {
    name: "a value of the wrong type (fencing token as a string)",
    status: 400,
    code: "invalid_request",
    send: (http, c) =>
      http.json("malformed", "POST", `/v1/leases/${c.leaseId}/report`, {
        ...reportBody(c.fencingToken, 0, c.comparedTo),
        fencing_token: String(c.fencingToken),
      }),
  },
  {
    name: "a creation the schema refuses (t0.commit a number)",
    status: 400,
    code: "invalid_request",
    send: (http, c) => {
      const body = createBody(c.key);
      return http.json("malformed", "POST", "/v1/loops", { ...body, t0: { ...body.t0, commit: 42 } });
    },
  },
  {
    name: "an unknown loop id",
    status: 404,
    code: "not_found",
    send: (http, c) => http.json("malformed", "POST", `/v1/loops/lp_${sha256Hex(c.key).slice(0, 24)}/candidates`, candidateBody(c.key)),
  },
  {
    name: "an unknown lease of the loop",
    status: 404,
    code: "lease_not_found",
    send: (http, c) =>
      http.json("malformed", "POST", `/v1/leases/${c.loopId}-L${c.fencingToken + 1_000}/report`, reportBody(c.fencingToken + 1_000, 0, c.comparedTo)),
  },
  {
    name: "a bad fencing token for the lease in hand",
    status: 409,
    code: "stale_lease",
    send: (http, c) => http.json("malformed", "POST", `/v1/leases/${c.leaseId}/report`, reportBody(c.fencingToken + 1, 0, c.comparedTo)),
  },
  {
    name: "tests as a difference from another base",
    status: 422,
    code: "invalid_observation",
    send: (http, c) => {
      const body = reportBody(c.fencingToken, 0, c.comparedTo);
      return http.json("malformed", "POST", `/v1/leases/${c.leaseId}/report`, {
        ...body,
        observation: { ...body.observation, tests: { ...body.observation.tests, base: sha256Hex(c.key) } },
      });
    },
  },
  {
    name: "a gate log that was never stored",
    status: 422,
    code: "artifact_missing",
    send: (http, c) => {
      const body = reportBody(c.fencingToken, 0, c.comparedTo);
      const gates = body.observation.gates.map((gate) => ({
        ...gate,
        log: { sha256: sha256Hex(c.key), size: 10, name: "unit.log", content_type: "text/plain; charset=utf-8" },
      }));
      return http.json("malformed", "POST", `/v1/leases/${c.leaseId}/report`, { ...body, observation: { ...body.observation, gates } });
    },
  },
  {
    name: `a report one byte over ${MAX_TEST_SET_BODY_BYTES} bytes, with Content-Length`,
    status: 413,
    code: "body_too_large",
    mayReset: true,
    send: (http, c) =>
      http.sendAlone("malformed", "POST", `/v1/leases/${c.leaseId}/report`, padded(reportBody(c.fencingToken, 0, c.comparedTo), MAX_TEST_SET_BODY_BYTES + 1)),
  },
  {
    name: `a proposal one byte over ${MAX_JSON_BODY_BYTES} bytes, streamed without Content-Length`,
    status: 413,
    code: "body_too_large",
    send: (http, c) => http.send("malformed", "POST", `/v1/loops/${c.loopId}/candidates`, chunked(padded(candidateBody(c.key), MAX_JSON_BODY_BYTES + 1))),
  },
  {
    name: "gzip-encoded bytes that are not gzip",
    status: 400,
    code: "invalid_encoding",
    send: (http, c) => http.send("malformed", "POST", `/v1/loops/${c.loopId}/candidates`, JSON.stringify(candidateBody(c.key)), { "content-encoding": "gzip" }),
  },
  {
    name: "a token that is no token",
    status: 401,
    code: "unauthenticated",
    send: (http, c) =>
      http.send("malformed", "POST", `/v1/loops/${c.loopId}/candidates`, JSON.stringify(candidateBody(c.key)), { authorization: "Bearer lwt_0000" }),
  },
];

// ---- one loop's client -----------------------------------------------------------------------------

/** What a loop's client sent and was told: what its event log must hold, exactly. */
interface Told {
  loopId: string;
  proposed: string[];
  leases: number;
  verdicts: { candidate_id: string; decision: string; reason: string }[];
  halted: boolean;
  /** Idempotency keys of malformed creations: no loop may exist for any. */
  malformedCreations: string[];
  /** Why the client stopped before its loop halted or the deadline came (a valid request refused). */
  failure: string | null;
}

interface MalformedOutcome {
  name: string;
  expected: number;
  expectedCode: string;
  mayReset: boolean;
  status: number;
  code: string;
  /** Not answered by the worker (a connection error, a proxy's 503): nothing to judge it by but the check that nothing was stored. */
  lost: boolean;
}

/** A lease as the coordinator answers it (alone, or inside a proposal's answer). */
type LeaseAnswer = { lease_id: string; fencing_token: number; job: { compare_to: { commit: string } | null } };

async function driveLoop(http: Http, label: string, deadline: number, random: () => number, outcomes: MalformedOutcome[]): Promise<Told> {
  const created = await http.json("create", "POST", "/v1/loops", createBody(`${label}-loop`));
  // 200: a creation sent again after a connection error, which the first attempt had made.
  if (created.status !== 201 && created.status !== 200) throw new Error(`creating ${label} answered ${created.status}: ${created.text.slice(0, 300)}`);
  const loopId = (JSON.parse(created.text) as { loop: { loop_id: string } }).loop.loop_id;
  const told: Told = { loopId, proposed: [], leases: 0, verdicts: [], halted: false, malformedCreations: [], failure: null };
  const fail = (what: string, answer: { status: number; text: string }) => {
    told.failure = `${what} answered ${answer.status}: ${answer.text.slice(0, 300)}`;
    return told;
  };
  let malformedCount = 0;
  for (let iteration = 1; iteration <= ITERATIONS && !told.halted && performance.now() < deadline; iteration++) {
    const key = `${label}-c${iteration}`;
    const runner = { runner_id: `${label}-runner` };
    const proposed = await http.json("propose", "POST", `/v1/loops/${loopId}/candidates`, {
      ...candidateBody(key),
      ...(SEPARATE_LEASE ? {} : { lease: runner }),
    });
    if (proposed.status !== 201) return fail(`proposing ${key}`, proposed);
    const answer = JSON.parse(proposed.text) as { candidate: { candidate_id: string }; lease?: LeaseAnswer | null };
    told.proposed.push(answer.candidate.candidate_id);
    let lease = answer.lease ?? null;
    if (SEPARATE_LEASE) {
      const leased = await http.json("lease", "POST", `/v1/loops/${loopId}/leases`, runner);
      if (leased.status !== 200) return fail(`leasing in ${label}`, leased);
      lease = JSON.parse(leased.text) as LeaseAnswer;
    }
    if (!lease) return fail(`proposing ${key} with a lease`, { status: proposed.status, text: `no lease in the answer: ${proposed.text}` });
    told.leases++;
    // The malformed requests that follow this iteration's valid ones (one roll after each) are sent while the lease is in hand.
    const context: Context = {
      loopId,
      leaseId: lease.lease_id,
      fencingToken: lease.fencing_token,
      comparedTo: lease.job.compare_to?.commit,
      failing: failingAfter(iteration),
      key: "",
    };
    for (let roll = 0; roll < REQUESTS_PER_DECISION; roll++) {
      if (random() >= MALFORMED_AFTER) continue;
      const malformed = MALFORMED[Math.floor(random() * MALFORMED.length)] ?? MALFORMED[0];
      if (!malformed) continue;
      const bad = { ...context, key: `${label}-bad-${++malformedCount}` };
      if (malformed.code === "invalid_request" && malformed.name.startsWith("a creation")) told.malformedCreations.push(bad.key);
      const answer = await malformed.send(http, bad);
      let code = "";
      try {
        code = (JSON.parse(answer.text) as { error?: { code?: string } }).error?.code ?? "";
      } catch {
        code = answer.status === 0 ? `connection error: ${answer.text}` : "(not the JSON envelope)";
      }
      outcomes.push({
        name: malformed.name,
        expected: malformed.status,
        expectedCode: malformed.code,
        mayReset: malformed.mayReset === true,
        status: answer.status,
        code,
        lost: answer.status === 0 || (answer.status >= 500 && !isEnvelope(answer.text)),
      });
    }
    const reported = await http.json(
      "report",
      "POST",
      `/v1/leases/${lease.lease_id}/report`,
      reportBody(lease.fencing_token, context.failing, context.comparedTo),
    );
    if (reported.status !== 200) return fail(`reporting in ${label}`, reported);
    const judged = JSON.parse(reported.text) as { verdict: { candidate_id: string; decision: string; reason?: string }; loop: { status: string } };
    told.verdicts.push({ candidate_id: judged.verdict.candidate_id, decision: judged.verdict.decision, reason: judged.verdict.reason ?? "" });
    told.halted = judged.loop.status === "halted";
    reported.sample.halting = told.halted;
  }
  return told;
}

// ---- the check: nothing malformed stored ------------------------------------------------------------

/** Every stored event of a loop, page by page. */
async function eventsOf(url: string, loopId: string): Promise<Record<string, unknown>[]> {
  const events: Record<string, unknown>[] = [];
  for (;;) {
    const response = await fetch(`${url}/v1/loops/${loopId}/events?after=${events.length}&limit=1000`, {
      headers: { authorization: `Bearer ${TEST_OWNER_TOKEN}` },
    });
    if (response.status !== 200) throw new Error(`events of ${loopId} answered ${response.status}`);
    const text = await response.text();
    events.push(
      ...text
        .split("\n")
        .filter((line) => line.length > 0)
        .map((line) => JSON.parse(line) as Record<string, unknown>),
    );
    if (response.headers.get("loopwarden-more") !== "true") return events;
  }
}

/** Differences between a loop's log and what its client sent and was told (empty: exactly the valid requests' events). */
async function differences(url: string, told: Told): Promise<string[]> {
  const events = await eventsOf(url, told.loopId);
  const problems: string[] = [];
  const chain = verifyChain(events);
  if (!chain.ok) problems.push(`chain: ${chain.message}`);
  for (const event of events) {
    const parsed = LoopEvent.safeParse(event);
    if (!parsed.success) problems.push(`event ${String(event.seq)} is not a loop event`);
  }
  const ofType = (type: string) => events.filter((event) => event.type === type).map((event) => event.data as Record<string, unknown>);
  const count = (type: string, expected: number) => {
    const found = ofType(type).length;
    if (found !== expected) problems.push(`${type}: ${found} stored, ${expected} expected`);
  };
  count("loop_created", 1);
  count("candidate_proposed", told.proposed.length);
  count("lease_granted", told.leases);
  count("observation_reported", told.verdicts.length);
  count("verdict", told.verdicts.length);
  count("halted", told.halted ? 1 : 0);
  const receipts = ofType("receipt_issued").length;
  if (receipts > (told.halted ? 1 : 0)) problems.push(`receipt_issued: ${receipts} stored`);
  const known = new Set(["loop_created", "candidate_proposed", "lease_granted", "observation_reported", "verdict", "halted", "receipt_issued"]);
  for (const event of events) if (!known.has(String(event.type))) problems.push(`an unexpected ${String(event.type)} event`);
  const stored = ofType("verdict").map((data) => `${String(data.candidate_id)} ${String(data.decision)} ${String(data.reason)}`);
  const expected = told.verdicts.map((verdict) => `${verdict.candidate_id} ${verdict.decision} ${verdict.reason}`);
  if (stored.join(",") !== expected.join(",")) problems.push(`verdicts stored [${stored.join(", ")}], told [${expected.join(", ")}]`);
  const proposedIds = ofType("candidate_proposed").map((data) => String(data.candidate_id));
  if (proposedIds.join(",") !== told.proposed.join(",")) problems.push(`candidates stored [${proposedIds.join(", ")}], told [${told.proposed.join(", ")}]`);
  for (const key of told.malformedCreations) {
    const loopId = `lp_${sha256Hex(`loopwarden/loop\n${key}`).slice(0, 24)}`;
    const response = await fetch(`${url}/v1/loops/${loopId}`, { headers: { authorization: `Bearer ${TEST_OWNER_TOKEN}` } });
    await response.arrayBuffer();
    if (response.status !== 404) problems.push(`the refused creation ${key} answers ${response.status} at ${loopId}`);
  }
  return problems;
}

// ---- a run -----------------------------------------------------------------------------------------

const at = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
const quantiles = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return { p50: at(sorted, 0.5), p99: at(sorted, 0.99) };
};

interface RunResult {
  host: string;
  /** The machine's 1-minute load average as the run started: what else was running on its 2 cores. */
  load: number;
  loops: number;
  wallMs: number;
  /** CPU time the host's processes (the coordinator, its workerd; wrangler's too) used while the loops ran; null when unknown. */
  hostCpuMs: number | null;
  /** CPU time this client process used meanwhile (it shares the cores). */
  clientCpuMs: number;
  decisions: number;
  halted: number;
  samples: Sample[];
  outcomes: MalformedOutcome[];
  problems: string[];
  serverErrors: string[];
  retried: number;
  connectionErrors: string[];
  unfinished: number;
}

/**
 * CPU time (user + system, ms) used so far by a process and its live descendants, from /proc: what the
 * host spent, which a busy machine's other work does not inflate as it does wall time. Null off Linux.
 */
function treeCpuMs(pid: number): number | null {
  if (pid === 0 || !existsSync(`/proc/${pid}/stat`)) return null;
  const ticks = 100; // USER_HZ: clock ticks per second in /proc/<pid>/stat on Linux
  let total = 0;
  const visit = (id: number) => {
    const stat = readFileSync(`/proc/${id}/stat`, "utf8");
    // pid (comm) state …: fields after the comm's closing parenthesis; utime and stime are the 12th and 13th.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    total += ((Number(fields[11]) + Number(fields[12])) / ticks) * 1000;
    for (const task of readdirSync(`/proc/${id}/task`)) {
      const children = readFileSync(`/proc/${id}/task/${task}/children`, "utf8").trim();
      for (const child of children ? children.split(" ") : []) {
        if (existsSync(`/proc/${child}/stat`)) visit(Number(child));
      }
    }
  };
  try {
    visit(pid);
  } catch {
    return null; // a process that ended while it was read: no figure rather than a wrong one
  }
  return total;
}

async function runLoad(host: string, url: string, pid: number, loops: number): Promise<RunResult> {
  const http = new Http(url);
  const outcomes: MalformedOutcome[] = [];
  const run = `load-${loops}-${Date.now().toString(36)}`;
  const load = os.loadavg()[0] ?? Number.NaN;
  const hostCpu = treeCpuMs(pid);
  const clientCpu = process.cpuUsage();
  const started = performance.now();
  const deadline = started + DEADLINE_MS;
  const settled = await Promise.allSettled(
    Array.from({ length: loops }, (_, index) => driveLoop(http, `${run}-${index}`, deadline, mulberry32(SEED * 1_000 + index), outcomes)),
  );
  const wallMs = performance.now() - started;
  const hostCpuAfter = treeCpuMs(pid);
  const clientUsed = process.cpuUsage(clientCpu);
  const told = settled.flatMap((result) => (result.status === "fulfilled" ? [result.value] : []));
  const problems = settled.flatMap((result) => (result.status === "rejected" ? [`a client failed: ${(result.reason as Error).message}`] : []));
  for (const loop of told) if (loop.failure) problems.push(`${loop.loopId}: the client stopped: ${loop.failure}`);
  // The check reads every log after the load, one loop at a time.
  for (const loop of told) for (const problem of await differences(url, loop)) problems.push(`${loop.loopId}: ${problem}`);
  return {
    host,
    load,
    loops,
    wallMs,
    hostCpuMs: hostCpu === null || hostCpuAfter === null ? null : hostCpuAfter - hostCpu,
    clientCpuMs: (clientUsed.user + clientUsed.system) / 1000,
    decisions: told.reduce((total, loop) => total + loop.verdicts.length, 0),
    halted: told.filter((loop) => loop.halted).length,
    samples: http.samples,
    outcomes,
    problems,
    serverErrors: http.serverErrors,
    retried: http.retried,
    connectionErrors: http.connectionErrors,
    unfinished: told.filter((loop) => !loop.halted).length,
  };
}

/** FLOOR_REQUESTS sequential requests for a route no loop, D1 or R2 serves (Hono's 404): the round trip to the worker and back. */
async function floorOf(url: string): Promise<{ p50: number; p99: number }> {
  const times: number[] = [];
  for (let index = 0; index < FLOOR_REQUESTS + 20; index++) {
    const started = performance.now();
    const response = await fetch(`${url}/load-floor`);
    await response.arrayBuffer();
    if (index >= 20) times.push(performance.now() - started);
  }
  return quantiles(times);
}

/** The same route, FLOOR_REQUESTS × 5 requests with MAX_IN_FLIGHT in flight: what each host forwards per second at most. */
async function busyFloorOf(url: string): Promise<{ perSecond: number; p50: number; p99: number }> {
  const times: number[] = [];
  let next = 0;
  const total = FLOOR_REQUESTS * 5;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: MAX_IN_FLIGHT }, async () => {
      while (next++ < total) {
        const sent = performance.now();
        const response = await fetch(`${url}/load-floor`);
        await response.arrayBuffer();
        times.push(performance.now() - sent);
      }
    }),
  );
  return { perSecond: total / ((performance.now() - started) / 1000), ...quantiles(times) };
}

// ---- the report -----------------------------------------------------------------------------------

const lines: string[] = [];
const say = (line = "") => {
  lines.push(line);
  console.log(line);
};
const ms = (value: number) => (value < 10 ? `${value.toFixed(1)} ms` : `${value.toFixed(0)} ms`);

/** A malformed request answered otherwise than the API defines: another status, or not its error code in the JSON envelope. */
const isWrong = (outcome: MalformedOutcome) =>
  !isReset(outcome) && !isLost(outcome) && (outcome.status !== outcome.expected || outcome.code !== outcome.expectedCode);
/** A malformed request the worker did not answer (not a reset the oversized kinds may meet): see MalformedOutcome.lost. */
const isLost = (outcome: MalformedOutcome) => !isReset(outcome) && outcome.lost;
/** An oversized body refused by a connection reset before its 413 was read (see Http.sendAlone). */
const isReset = (outcome: MalformedOutcome) => outcome.mayReset && outcome.status === 0;

function table(result: RunResult): void {
  const valid = result.samples.filter((sample) => sample.kind !== "malformed");
  const reports = result.samples.filter((sample) => sample.kind === "report");
  const malformed = result.outcomes;
  const refused = malformed.filter((outcome) => outcome.status >= 400 && outcome.status < 500).length;
  const malformed5xx = malformed.filter((outcome) => outcome.status >= 500 && !outcome.lost).length;
  const resets = malformed.filter(isReset).length;
  const lost = malformed.filter(isLost).length;
  const valid5xx = valid.filter((sample) => sample.status >= 500 && sample.byWorker).length;
  const validProxy5xx = valid.filter((sample) => sample.status >= 500 && !sample.byWorker).length;
  const dropped = result.samples.filter((sample) => sample.status === 0).length - resets;
  const wrong = malformed.filter(isWrong).length;
  const all = quantiles(result.samples.map((sample) => sample.ms));
  const report = quantiles(reports.map((sample) => sample.ms));
  const validQ = quantiles(valid.map((sample) => sample.ms));
  say(
    `| ${result.host} | ${result.loops} | ${result.load.toFixed(1)} | ${result.decisions} (${result.halted} loops halted) | ${(result.wallMs / 1000).toFixed(1)} s | **${(result.decisions / (result.wallMs / 1000)).toFixed(0)}** | ${ms(report.p50)} / ${ms(report.p99)} | ${ms(validQ.p50)} / ${ms(validQ.p99)} | ${ms(all.p50)} / ${ms(all.p99)} | ${result.samples.length} | ${malformed.length} / ${refused} / ${resets} / ${lost} / ${malformed5xx} | ${wrong} | ${valid5xx} / ${validProxy5xx} | ${dropped} (${result.retried} requests sent again) | ${result.problems.length === 0 ? "**0**" : `**${result.problems.length} problems**`} |`,
  );
}

const results: RunResult[] = [];
const floors = new Map<string, { alone: { p50: number; p99: number }; busy: { perSecond: number; p50: number; p99: number } }>();
const stopped: string[] = [];

const MINIFLARE = "Miniflare (`loopwarden serve`)";
const WRANGLER = "wrangler dev";

interface Host {
  name: string;
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** Starts a host and measures its floor. */
async function startHost(name: string, start: () => Promise<{ url: string; pid: number; stop(): Promise<void> }>): Promise<Host> {
  const launched = performance.now();
  const coordinator = await start();
  console.error(`${name}: pid ${coordinator.pid} at ${coordinator.url}, started in ${((performance.now() - launched) / 1000).toFixed(1)} s`);
  return { name, ...coordinator, stop: () => coordinator.stop() };
}

process.env.LOOPWARDEN_OWNER_TOKEN = TEST_OWNER_TOKEN;
const work = mkdtempSync(path.join(os.tmpdir(), "lw-bench-load-"));
const benchStarted = performance.now();
const hosts: Host[] = [];
try {
  // Both hosts run at once, and each load runs on one host after the other, N by N: the other work on
  // this machine changes over minutes, so the two hosts' figures of one N are taken close together.
  if (given) hosts.push({ name: `the coordinator at ${given}`, url: given, pid: 0, stop: async () => undefined });
  else if (only !== "wrangler") hosts.push(await startHost(MINIFLARE, () => startCoordinator(path.join(work, "serve-state"))));
  if (only !== "miniflare" && !given) {
    const [persistTo, logDir] = [path.join(work, "wrangler-state"), path.join(work, "wrangler-logs")];
    applyWranglerMigrations(persistTo, logDir);
    hosts.push(await startHost(WRANGLER, () => startWranglerDev(persistTo, logDir, { script: BUNDLE_FILE })));
  }
  for (const host of hosts) floors.set(host.name, { alone: await floorOf(host.url), busy: await busyFloorOf(host.url) });
  for (const loops of SIZES) {
    for (const host of hosts) {
      console.error(`${host.name}: ${loops} loops…`);
      const result = await runLoad(host.name, host.url, host.pid, loops);
      results.push(result);
      for (const line of [...result.serverErrors, ...result.connectionErrors, ...result.problems.slice(0, 20)]) console.error(`  ${line}`);
    }
  }
} finally {
  for (const host of hosts) {
    await host.stop();
    if (host.pid !== 0) stopped.push(`${host.name} (pid ${host.pid})`);
  }
  rmSync(work, { recursive: true, force: true });
}
const benchSeconds = (performance.now() - benchStarted) / 1000;

say("# Load: many loops at once, with malformed and oversized requests");
say();
say(
  `\`npm run bench:load\` (\`npm run build:worker && npm run build:cli && tsx bench/load.ts\`), ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? "unknown"}), ${(os.totalmem() / 1024 ** 3).toFixed(0)} GiB; the whole bench took ${benchSeconds.toFixed(0)} s.`,
);
say();
say(
  `Each of N loops (check_fixpoint, one gate, ${TEST_IDS.length} tests, ${T0_FAILING} failing at t0) has its own async client doing what a runner does over HTTP: ${SEPARATE_LEASE ? "propose a candidate, lease it (its own request, as a `loopwarden work` runner leases a job another client proposed)" : "propose a candidate and lease it in the same request, as `loopwarden run` does"}, report the observation as a difference from t0's collected set: ${REQUESTS_PER_DECISION} requests a decision. Odd iterations change nothing the tests see (rejected, no_improvement), even ones fix one test (promoted, fewer_failures), so every loop halts on its ${ITERATIONS}th decision (success_condition_met, then its final receipt is signed). A decision is a report the coordinator judged. All N clients run at once, with at most ${MAX_IN_FLIGHT} requests in flight (a request's time is counted from when it leaves the client's queue); no iteration starts after ${DEADLINE_MS / 1000} s. After each valid request, one in nine times, a malformed or oversized request follows (about 10% of all requests; each loop's mix is seeded by its index, so both hosts get the same one), sent while the loop's lease is in hand: ${MALFORMED.map((kind) => `${kind.name} → ${kind.status}`).join("; ")}.`,
);
say();
say(
  "Both hosts run the same built worker, dist/worker/index.js: `loopwarden serve` runs it in workerd through Miniflare's API in its own process, nothing in front of it (the local coordinator); `wrangler dev dist/worker/index.js --no-bundle` runs it in workerd behind wrangler's proxy. Both coordinators start first (fresh state each) and stay up; then N = 50 runs on one and then the other, then N = 200 likewise, so the two hosts' figures for one N are taken close together.",
);
say();
say(
  "| host | loops | load avg | decisions | wall | decisions/s | report p50 / p99 | valid requests p50 / p99 | all requests p50 / p99 | requests | malformed sent / refused 4xx / reset before the 413 / not answered by the worker / 5xx from the worker | malformed answered otherwise than defined | valid requests answered 5xx by the worker / by the proxy | connection errors | malformed stored |",
);
say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const result of results) table(result);
say();
const problems = results.flatMap((result) => result.problems.map((problem) => `${result.host}, ${result.loops} loops: ${problem}`));
const wrongCounts = new Map<string, number>();
for (const result of results) {
  for (const outcome of result.outcomes.filter(isWrong)) {
    const line = `${result.host}, ${result.loops} loops: ${outcome.name} → ${outcome.status} ${outcome.code} (defined: ${outcome.expected} ${outcome.expectedCode})`;
    wrongCounts.set(line, (wrongCounts.get(line) ?? 0) + 1);
  }
}
const wrong = [...wrongCounts].map(([line, count]) => `${line}, ${count}×`);
say(
  `"Malformed stored" is the check after each run: every loop's event log (GET /v1/loops/:id/events) holds exactly one loop_created, the candidate_proposed events of the proposals its client made (by candidate id), its lease_granted events, one observation_reported and one verdict per decision its client was told (by candidate, decision and reason), halted and at most one receipt_issued when it was told the loop halted, and nothing else; verifyChain (shared/engine) passes on every log; and no loop exists for a refused creation. ${problems.length === 0 && wrong.length === 0 ? "Every check passed on every run." : `Problems: ${[...problems, ...wrong].slice(0, 20).join("; ")}`}`,
);
say();
say(
  "\"Load avg\" is the machine's 1-minute load average as the run started (other work shares its cores). A valid request answered 503 or lost to a connection error is sent again, up to 3 times, as the runner's client does; every attempt is counted in the latencies and in the 5xx and connection-error columns. A 5xx is the worker's when it carries the worker's JSON error envelope (every error the worker answers does, DESIGN §8); a 503 without it is wrangler dev's proxy saying its own connection to the worker failed (see the notes). A malformed request that no answer of the worker's reached (a connection error, the proxy's 503) is \"not answered by the worker\": nothing judges it but the check that nothing of it was stored.",
);
say();
say("Round trip by request kind (p50 / p99, count):");
say();
// The halting report apart (one report in eight here): it also signs the final receipt and drains the
// outbox to D1 before it answers, so its round trip is not the other reports'.
const COLUMNS: { name: string; of: (sample: Sample) => boolean }[] = [
  ...(["create", "propose", "lease", "report"] as const).map((kind) => ({ name: kind, of: (sample: Sample) => sample.kind === kind })),
  { name: "report that halts", of: (sample) => sample.kind === "report" && sample.halting === true },
  { name: "other reports", of: (sample) => sample.kind === "report" && sample.halting !== true },
  { name: "malformed", of: (sample) => sample.kind === "malformed" },
];
say(`| host | loops | ${COLUMNS.map((column) => column.name).join(" | ")} |`);
say(`|---|---:|${COLUMNS.map(() => "---:").join("|")}|`);
for (const result of results) {
  const cells = COLUMNS.map((column) => {
    const times = result.samples.filter(column.of).map((sample) => sample.ms);
    const { p50, p99 } = quantiles(times);
    return times.length === 0 ? "—" : `${ms(p50)} / ${ms(p99)} (${times.length})`;
  });
  say(`| ${result.host} | ${result.loops} | ${cells.join(" | ")} |`);
}
say();
say(
  "CPU time per decision, from /proc while the loops ran: the host's processes (the coordinator and its workerd; for wrangler dev, wrangler, its proxy and the worker's workerd) and this client, which shares the cores. Unlike wall time and latency, it is what the host spent, whatever else the machine ran.",
);
say();
say("| host | loops | host CPU per decision | client CPU per decision | host CPU share of the wall time |");
say("|---|---:|---:|---:|---:|");
for (const result of results) {
  const per = (cpu: number) => ms(cpu / Math.max(1, result.decisions));
  const host = result.hostCpuMs === null ? "—" : per(result.hostCpuMs);
  const share = result.hostCpuMs === null ? "—" : `${((result.hostCpuMs / result.wallMs) * 100).toFixed(0)}% of one core`;
  say(`| ${result.host} | ${result.loops} | ${host} | ${per(result.clientCpuMs)} | ${share} |`);
}
say();
say("## Worker and proxy");
say();
say(
  `Round trip of one request the worker answers without a Durable Object, D1 or R2 (Hono's 404): ${FLOOR_REQUESTS} in a row with nothing else running, then ${FLOOR_REQUESTS * 5} with ${MAX_IN_FLIGHT} in flight. What each host adds to every request, and how many it can pass per second at most.`,
);
say();
say(`| host | one at a time p50 / p99 | ${MAX_IN_FLIGHT} in flight: requests/s | p50 / p99 |`);
say("|---|---:|---:|---:|");
for (const [host, floor] of floors)
  say(`| ${host} | ${ms(floor.alone.p50)} / ${ms(floor.alone.p99)} | ${floor.busy.perSecond.toFixed(0)} | ${ms(floor.busy.p50)} / ${ms(floor.busy.p99)} |`);
say();
const byHost = (host: string, loops: number) => results.find((result) => result.host.startsWith(host) && result.loops === loops);
for (const loops of SIZES) {
  const miniflare = byHost("Miniflare", loops);
  const wrangler = byHost("wrangler", loops);
  if (!miniflare || !wrangler) continue;
  const rate = (result: RunResult) => result.decisions / (result.wallMs / 1000);
  const report = (result: RunResult) => quantiles(result.samples.filter((sample) => sample.kind === "report").map((sample) => sample.ms)).p50;
  const added = report(wrangler) - report(miniflare);
  say(
    `- ${loops} loops: the worker alone (Miniflare) made ${rate(miniflare).toFixed(1)} decisions/s; behind wrangler dev's proxy, ${rate(wrangler).toFixed(1)} (${((rate(wrangler) / rate(miniflare)) * 100).toFixed(0)}%). Report p50 ${ms(report(miniflare))} → ${ms(report(wrangler))}: ${added > 0 ? `the proxy's part is ${ms(added)} of ${ms(report(wrangler))} (${((added / report(wrangler)) * 100).toFixed(0)}%)` : "no cost of the proxy shows under this load (the difference is within the noise of a shared machine)"}.`,
  );
}
// Issue 30, item 3: decisions counted as three requests each (propose, lease, report; the issue's yardstick,
// whatever the cycle sends) against the worker's own trivial-request rate, both measured in this run on this
// machine: at least 40%, with report p99 under 500 ms.
for (const loops of SIZES) {
  const miniflare = byHost("Miniflare", loops);
  const floor = floors.get(MINIFLARE)?.busy.perSecond;
  if (!miniflare || !floor) continue;
  const decisionsPerSecond = miniflare.decisions / (miniflare.wallMs / 1000);
  const requests = decisionsPerSecond * 3;
  const reportP99 = quantiles(miniflare.samples.filter((sample) => sample.kind === "report").map((sample) => sample.ms)).p99;
  say(
    `- ${loops} loops, the worker alone: decisions × 3 requests = ${requests.toFixed(0)} requests/s, ${((requests / floor) * 100).toFixed(0)}% of its ${floor.toFixed(0)} trivial requests/s, report p99 ${ms(reportP99)} (goal, issue 30: at least 40%, report p99 under 500 ms: ${requests / floor >= 0.4 && reportP99 < 500 ? "met" : "not met"}). The cycle sent ${REQUESTS_PER_DECISION} valid requests a decision, ${(decisionsPerSecond * REQUESTS_PER_DECISION).toFixed(0)} requests/s.`,
  );
}
const busy = [...floors.values()].map((floor) => floor.busy.perSecond);
if (busy.length === 2) {
  say(
    `- Without a loop behind it, the proxy passes ${(busy[1] ?? 0).toFixed(0)} requests/s with ${MAX_IN_FLIGHT} in flight, next to ${(busy[0] ?? 0).toFixed(0)} for the worker alone, and adds ${ms(Math.max(0, (floors.get(WRANGLER)?.alone.p50 ?? 0) - (floors.get(MINIFLARE)?.alone.p50 ?? 0)))} to a lone request: under the loops' load, what it costs is the CPU it takes on the cores the worker and the client share (each request and its body cross it twice), rather than a rate it cannot exceed.`,
  );
}
say();
say("## Expectations and notes");
say();
say(
  "- Goal (issue 14, item 6): under load, every malformed or oversized request is a 4xx with the JSON error envelope, never a 5xx, and nothing of it is stored; the figures say what one local coordinator sustains on this machine. No figure is a pass mark here: the correctness columns are (5xx 0, wrong status 0, malformed stored 0).",
);
say(
  "- Expectation: one loop's requests are serialised in its Durable Object, but loops do not contend for a lock, so decisions/s should hold from 50 to 200 loops while latency grows with the queue (every Durable Object and the worker share one workerd process here; deployed, they spread over Cloudflare's machines).",
);
const rateOf = (host: string, loops: number) => {
  const result = byHost(host, loops);
  return result ? (result.decisions / (result.wallMs / 1000)).toFixed(1) : "—";
};
if (SIZES.length >= 2) {
  const [small, large] = [SIZES[0] ?? 0, SIZES[SIZES.length - 1] ?? 0];
  say(
    `- Observed: ${small} → ${large} loops, ${rateOf("Miniflare", small)} → ${rateOf("Miniflare", large)} decisions/s on Miniflare and ${rateOf("wrangler", small)} → ${rateOf("wrangler", large)} behind wrangler dev; every loop ran to its halt within the deadline unless the table says otherwise.`,
  );
}
say(
  `- This is a ${os.cpus().length}-core machine shared with other work; the client (this Node process, ${MAX_IN_FLIGHT} requests in flight, gzip and JSON work for the oversized bodies) runs on the same cores as workerd and, for wrangler dev, its proxy; so the figures are a floor of what the worker does, not a capacity figure for a deployment.`,
);
say(
  '- The oversized bodies (4 MiB + 1 on the report route, 1 MiB + 1 streamed on the others) are refused when the limit is crossed: with a Content-Length at once, without one after the limit\'s bytes were read; their round trip is in the malformed latency and in "all requests".',
);
say(
  "- Over-cap bodies with a Content-Length: the worker answers 413 from the Content-Length alone, before the body is read, and workerd then closes the connection with the body unread, which the kernel turns into a reset (RST). On a pooled keep-alive connection that reset fell on whichever request fetch sent next (a valid one, answered ECONNRESET, in an earlier version of this bench), and it may come before the 413 is read; so these requests go on a connection of their own, and a reset before the 413 is counted as a refusal (nothing is stored either way). Streamed bodies (no Content-Length) are read up to the cap and answered 413 without a reset. The worker cannot prevent it: a `Connection: close` it sets is dropped by workerd (tried). Deployed, Cloudflare's front end, not workerd, holds the client's connection.",
);
say(
  "- wrangler dev's proxy (wrangler's ProxyWorker, in a workerd of its own, forwarding each request to the worker over a pooled local connection) answers 503 \"Your worker restarted mid-request\" itself whenever that forward fails on the network: the worker did not restart, and the request may never have reached it. One way is the reset of the note above, met on the proxy's pooled connection after it forwards a 413 answered early (reproduced one request at a time with a 1 MiB + 1 proposal sent with its Content-Length, then a valid report). It is not the only one: with the oversized requests left out (a scratch copy of this bench, 200 loops, load average 8.8) the proxy still answered 2 valid requests so, and on a busy machine it answered 72 in one 200-loop run (load average 6.9), most of them creations in the run's first seconds, while the worker's runtime logged `disconnected: ::read(fd, buffer, maxBytes): Connection reset by peer` and `stream disconnected prematurely` (`wrangler dev --log-level debug`). The local coordinator, with no proxy, meets the same on a busy machine as connection errors (\"other side closed\", ECONNRESET, 2-3 s after the request was sent, in a stall of the worker: 4 of 5,569 requests at load average 4.6, 17 at 7.2). Both are retried, as the runner's client does (each request of the cycle is idempotent), and every loop still ran with exactly its events; they are counted in the tables (5xx by the proxy, connection errors) and do not fail the run. The exit code is 1 when a check of what was stored fails, a malformed request the worker answered was answered otherwise than defined, the worker answered a 5xx in its own envelope, or a valid request was lost after its 3 attempts (its client stops: a problem). wrangler dev also does not apply D1 migrations: the bench runs `wrangler d1 migrations apply DB --local` first (without it, every route that reads D1 answers 500).",
);
const miniflare5xx = results
  .filter((result) => result.host.startsWith("Miniflare"))
  .flatMap((result) => result.samples.filter((sample) => sample.status >= 500));
if (results.some((result) => result.host.startsWith("Miniflare"))) {
  say(`- The local coordinator (Miniflare, no proxy) answered ${miniflare5xx.length === 0 ? "no 5xx at all" : `${miniflare5xx.length} 5xx`} in this run.`);
}
say(`- Every process started was stopped by its pid: ${stopped.join(", ")}.`);

if (!TRIAL) {
  writeFileSync(path.join(root, "bench", "results", "load.md"), `${lines.join("\n")}\n`);
  console.log("\nwritten to bench/results/load.md");
}
// The exit says whether the worker did what the API defines: what was stored, what it answered the
// malformed requests, no 5xx of its own. What was lost on the way to it (a connection error, wrangler dev's
// proxy's 503) is counted above and retried as the runner's client does; a valid request lost for good
// stops its client, which is a problem.
const workerErrors = results.flatMap((result) => result.samples.filter((sample) => sample.status >= 500 && sample.byWorker));
if (problems.length > 0 || wrong.length > 0 || workerErrors.length > 0) process.exitCode = 1;
