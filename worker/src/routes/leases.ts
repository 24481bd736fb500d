import { Hono, type Context } from "hono";
import { canonicalJson } from "#shared/canonical-json.js";
import { isBaselineLeaseId } from "#shared/engine/index.js";
import { sha256Hex } from "#shared/hash.js";
import {
  BaselineReportRequest,
  HeartbeatRequest,
  ReleaseRequest,
  ReportRequest,
  type BaselineReportResponse,
  type InlineEvidence,
  type ReleaseResponse,
  type ReportResponse,
} from "#shared/wire/api.js";
import type { Observation } from "#shared/wire/observation.js";
import { unverifiedIn } from "../artifacts/artifact-store.js";
import { storeInlineEvidence } from "../artifacts/inline-evidence.js";
import { ApiError, refusalError } from "../http/http-errors.js";
import type { AuthEnv } from "../http/auth.js";
import { eventsAfterOf, loopIdOfLease, openLoop } from "../http/loop-access.js";
import { readJson } from "../http/validate.js";

/** Lease routes of DESIGN §8, mounted at `/v1/leases`. */
export const leaseRoutes = new Hono<AuthEnv>();

leaseRoutes.post("/:leaseId/heartbeat", async (c) => {
  const leaseId = c.req.param("leaseId");
  const { stub, caller } = await openLoop(c, loopIdOfLease(leaseId), "evaluate");
  const body = await readJson(c, HeartbeatRequest);
  const answer = await stub.heartbeat({ caller, lease_id: leaseId, fencing_token: body.fencing_token });
  if (!answer.ok) throw refusalError(answer);
  return c.json(answer.lease);
});

// A runner that stops, or cannot finish the job on its side, gives the lease back: the job is queued at
// once instead of when the lease runs out. Idempotent; only the current holder's token releases.
leaseRoutes.post("/:leaseId/release", async (c) => {
  const leaseId = c.req.param("leaseId");
  const { stub, caller } = await openLoop(c, loopIdOfLease(leaseId), "evaluate");
  const body = await readJson(c, ReleaseRequest);
  const answer = await stub.release({ caller, lease_id: leaseId, fencing_token: body.fencing_token });
  if (!answer.ok) throw refusalError(answer);
  const response: ReleaseResponse = { lease_id: leaseId, candidate_id: answer.candidate_id, replayed: answer.replayed };
  return c.json(response);
});

/**
 * Evidence first: every log and file an observation cites must be recorded — stored and verified, with
 * its declared size — before it is decided. Checked here, outside the LoopObject, so storage latency
 * never sits inside a decision (DESIGN §4.5); one D1 query, not a request per file. What D1 does not
 * have but storage does (a presigned upload in S3 mode, which the runner never confirms) is verified and
 * recorded now. Small files may come with the report instead of before it (`evidence`): checked, stored
 * and recorded first, as an upload is — and only for the lease's holder (DESIGN §11), asked before the
 * bytes are written.
 */
async function recordEvidence(
  c: Context<AuthEnv>,
  opened: Awaited<ReturnType<typeof openLoop>>,
  leaseId: string,
  body: { observation: Pick<Observation, "gates" | "artifacts">; evidence?: InlineEvidence[] | undefined },
): Promise<void> {
  const { stub, caller, loopId, teamId } = opened;
  const cited = citedBy(body.observation);
  if (body.evidence) {
    const allowed = await stub.mayUseLease({ caller, lease_id: leaseId });
    if (!allowed.ok) throw refusalError(allowed);
    await storeInlineEvidence(c.env, { loopId, teamId }, body.evidence, cited);
  }
  const inline = new Set(body.evidence?.map((file) => file.sha256));
  await requireStored(
    c.env,
    { loopId, teamId },
    cited.filter((ref) => !inline.has(ref.sha256)),
  );
}

/** Every log and file an observation cites as a gate's log or an artifact, named for an error. */
function citedBy(observation: Pick<Observation, "gates" | "artifacts">) {
  return [
    ...observation.gates.flatMap((gate) => (gate.log ? [{ what: `the log of gate "${gate.name}"`, ...gate.log }] : [])),
    ...(observation.artifacts ?? []).map((ref) => ({ what: `artifact "${ref.name}"`, ...ref })),
  ];
}

async function requireStored(env: Env, loop: { loopId: string; teamId: string }, cited: ReturnType<typeof citedBy>): Promise<void> {
  const [missing] = await unverifiedIn(env, loop, cited);
  if (missing) throw new ApiError(422, "artifact_missing", `${missing.what} (${missing.sha256}) is not stored; upload it first`);
}

/** An observation outside a lease (a recheck): everything it cites must have been uploaded and recorded first. */
export async function requireStoredEvidence(
  env: Env,
  opened: { loopId: string; teamId: string },
  observation: Pick<Observation, "gates" | "artifacts">,
): Promise<void> {
  await requireStored(env, opened, citedBy(observation));
}

leaseRoutes.post("/:leaseId/report", async (c) => {
  const leaseId = c.req.param("leaseId");
  const opened = await openLoop(c, loopIdOfLease(leaseId), "evaluate");
  const { stub, caller } = opened;
  const eventsAfter = eventsAfterOf(c);
  const body = await readJson(c, ReportRequest);
  await recordEvidence(c, opened, leaseId, body);
  const answer = await stub.report({
    caller,
    lease_id: leaseId,
    fencing_token: body.fencing_token,
    observation: body.observation,
    request_hash: sha256Hex(canonicalJson(body)),
    ...(eventsAfter === undefined ? {} : { events_after: eventsAfter }),
  });
  if (!answer.ok) throw refusalError(answer);
  const response: ReportResponse = { verdict: answer.verdict, loop: answer.loop, ...(answer.events ? { events: answer.events } : {}) };
  return c.json(response);
});

// t0 measured on a baseline lease (a loop created with `t0_commit`): the loop is created from it.
leaseRoutes.post("/:leaseId/baseline", async (c) => {
  const leaseId = c.req.param("leaseId");
  const opened = await openLoop(c, loopIdOfLease(leaseId), "evaluate");
  // A candidate's lease reports to /report: refused here before its evidence could be stored.
  if (!isBaselineLeaseId(leaseId))
    throw new ApiError(404, "lease_not_found", `${leaseId} is not a baseline lease; a candidate's lease reports to /v1/leases/:leaseId/report`);
  const body = await readJson(c, BaselineReportRequest);
  await recordEvidence(c, opened, leaseId, body);
  const answer = await opened.stub.reportBaseline({
    caller: opened.caller,
    lease_id: leaseId,
    fencing_token: body.fencing_token,
    observation: body.observation,
    doctor: body.doctor,
    request_hash: sha256Hex(canonicalJson(body)),
  });
  if (!answer.ok) throw refusalError(answer);
  const response: BaselineReportResponse = { loop: answer.loop, created: answer.created };
  return c.json(response, answer.created ? 201 : 200);
});
