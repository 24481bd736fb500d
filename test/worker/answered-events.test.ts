import { describe, expect, it } from "vitest";
import { ProposeCandidateResponse, ReportResponse } from "#shared/wire/api.js";
import { EVENTS_IN_ANSWER } from "../../worker/src/loop/loop-event-store.js";
import { TEST_IDS, call, candidateBody, createLoop, logOf, ndjson, observationOf, postJson } from "./fixtures.js";

// A proposal or a report sent with `?events_after=N` (the last event its runner has folded) is answered
// with the log's events after N, exactly as `GET …/events?after=N` serves them: the runner's fold keeps
// up without reading the log every iteration.

const [A, C] = [TEST_IDS[0], TEST_IDS[2]];

/** The log's lines after `after`, as the events route serves them. */
async function served(loopId: string, after: number): Promise<string[]> {
  const response = await call(`/v1/loops/${loopId}/events?after=${after}`);
  return (await ndjson(response)).split("\n").filter(Boolean);
}

async function errorCode(response: Response): Promise<string> {
  return ((await response.json()) as { error: { code: string } }).error.code;
}

describe("answers that carry the log's events", () => {
  it("a proposal that asks for its lease, then its report: each answer carries the events after the ones folded, as served", async () => {
    const loop = await createLoop("answered", [A, C]);
    const folded = loop.head.seq;
    const proposed = await postJson(`/v1/loops/${loop.loop_id}/candidates?events_after=${folded}`, {
      ...candidateBody("answered"),
      lease: { runner_id: "runner-answered", labels: {} },
    });
    expect(proposed.status).toBe(201);
    const proposal = ProposeCandidateResponse.parse(await proposed.json());
    // The proposal and the lease it asked for.
    expect(proposal.events?.map((line) => (JSON.parse(line) as { type: string }).type)).toEqual(["candidate_proposed", "lease_granted"]);
    expect(proposal.events).toEqual(await served(loop.loop_id, folded));
    const lease = proposal.lease;
    if (!lease) throw new Error("no lease");

    const after = folded + (proposal.events?.length ?? 0);
    const reported = await postJson(`/v1/leases/${lease.lease_id}/report?events_after=${after}`, {
      fencing_token: lease.fencing_token,
      observation: observationOf([C]),
    });
    expect(reported.status).toBe(200);
    const report = ReportResponse.parse(await reported.json());
    expect(report.events).toEqual(await served(loop.loop_id, after));
    expect(report.events?.length).toBeGreaterThan(0);
    expect(after + (report.events?.length ?? 0)).toBe(report.loop.head.seq);
  });

  it("carries none when not asked, or when more than an answer holds followed (the runner reads the log then)", async () => {
    const loop = await createLoop("answered-none", [A, C]);
    const plain = ProposeCandidateResponse.parse(await (await postJson(`/v1/loops/${loop.loop_id}/candidates`, candidateBody("answered-none"))).json());
    expect(plain.events).toBeUndefined();
    const many = await createLoop("answered-many", [A, C]);
    for (let index = 0; index < EVENTS_IN_ANSWER; index++) {
      expect((await postJson(`/v1/loops/${many.loop_id}/candidates`, candidateBody(`answered-many-${index}`))).status).toBe(201);
    }
    const from0 = await postJson(`/v1/loops/${many.loop_id}/candidates?events_after=0`, candidateBody("answered-many-last"));
    expect(ProposeCandidateResponse.parse(await from0.json()).events).toBeUndefined();
  });

  it("refuses a malformed events_after with 400 before anything is decided", async () => {
    const loop = await createLoop("answered-bad", [A, C]);
    const before = await logOf(loop.loop_id);
    for (const bad of ["-1", "x", "1.5"]) {
      const refused = await postJson(`/v1/loops/${loop.loop_id}/candidates?events_after=${bad}`, candidateBody(`answered-bad-${bad}`));
      expect([refused.status, await errorCode(refused)]).toEqual([400, "invalid_parameter"]);
    }
    expect(await logOf(loop.loop_id)).toEqual(before);
  });
});
