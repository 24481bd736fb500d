import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../../runner/src/coordinator/free-port.js";
import { isGoneWithin } from "../support/process.js";
import { killListed, survivorsAfter } from "../support/zone-markers.js";
import { ROOT, TEST_OWNER_TOKEN, exitOf, startCli, tempDir } from "../support/cli.js";

// Ready means ready (DESIGN §12): `serve` on a fresh state directory listens before it has applied the
// D1 migrations. Until every one is applied, /healthz and every API and receipt route that reads D1
// answer 503 not_ready (never a 500), so a client that waits for /healthz and then creates a team finds
// the tables there. Serve is stopped by its pid.

/** A status, or "refused" for a request the port did not accept (nothing listens yet). */
type Seen = number | "refused";

async function statusOf(url: string, init: RequestInit = {}): Promise<{ status: Seen; response?: Response }> {
  try {
    const response = await fetch(url, { ...init, signal: AbortSignal.timeout(10_000) });
    return { status: response.status, response };
  } catch {
    return { status: "refused" };
  }
}

const owner = { authorization: `Bearer ${TEST_OWNER_TOKEN}` };
// A team token of the right form that no team holds: its check reads the tokens table.
const unknownTeamToken = { authorization: `Bearer lwt_0123456789abcdef_${"A".repeat(43)}` };
// A receipt id of the right form that no receipt has: its route reads the receipts table.
const RECEIPT = "/r/rc_0123456789abcdef0123456789abcdef";

describe("a fresh local coordinator", () => {
  const tmp = tempDir("ready");
  afterAll(() => tmp.cleanup());

  it("answers /healthz 200 only once its migrations are applied; the first team created then is created, and no request before got a 500", async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const serve = startCli(["--json", "--state", path.join(tmp.dir, "state"), "serve", "--port", String(port)], { cwd: ROOT });
    const pid = serve.pid;
    if (pid === undefined) throw new Error("serve did not start");
    let done = false;
    try {
      // From the start until a while after /healthz has answered 200, requests to routes that read D1
      // (through the token check, and in the route), each recorded with whether it was sent after that.
      let healthy = false;
      const seen: { route: string; status: Seen; code?: string; retryAfter?: string | null; afterHealthy: boolean }[] = [];
      const probe = async (route: string, headers: Record<string, string>) => {
        const afterHealthy = healthy;
        const { status, response } = await statusOf(`${url}${route}`, { headers });
        const body = response ? ((await response.json().catch(() => null)) as { error?: { code?: string } } | null) : null;
        seen.push({
          route,
          status,
          ...(body?.error?.code ? { code: body.error.code } : {}),
          retryAfter: response?.headers.get("retry-after") ?? null,
          afterHealthy,
        });
      };
      const polling = (async () => {
        while (!done) {
          await Promise.all([probe("/v1/teams", owner), probe("/v1/loops", unknownTeamToken), probe(RECEIPT, {})]);
          await new Promise((resolve) => setTimeout(resolve, 3));
        }
      })();

      let health: { status: Seen; response?: Response } = { status: "refused" };
      const notReady: unknown[] = [];
      const deadline = Date.now() + 60_000;
      for (;;) {
        health = await statusOf(`${url}/healthz`);
        if (health.status === 200) break;
        if (health.status === 503) notReady.push({ retryAfter: health.response?.headers.get("retry-after"), body: await health.response?.json() });
        else expect(health.status, "/healthz before it is ready").toBe("refused");
        if (serve.exitCode !== null || Date.now() > deadline) throw new Error(`/healthz never answered 200: ${serve.output()}`);
        await new Promise((resolve) => setTimeout(resolve, 3));
      }
      healthy = true;
      // The moment it is ready: the first team.
      const created = await fetch(`${url}/v1/teams`, {
        method: "POST",
        headers: { ...owner, "content-type": "application/json" },
        body: JSON.stringify({ name: "first-team" }),
      });
      await new Promise((resolve) => setTimeout(resolve, 200));
      done = true;
      await polling;
      expect(created.status, await created.clone().text()).toBe(201);
      expect(await created.json()).toMatchObject({ team: { name: "first-team" } });
      expect(await health.response?.json()).toEqual({ ok: true, version: expect.any(String) });

      // Never a 500: before it is ready nothing listens, or the answer is 503 not_ready with Retry-After;
      // once /healthz has answered 200, each route answers as usual (a team list, an unknown token's 401,
      // an unknown receipt's 404), as may a request sent just before that and answered after.
      const usual: Record<string, number> = { "/v1/teams": 200, "/v1/loops": 401, [RECEIPT]: 404 };
      for (const answer of seen) {
        if (answer.afterHealthy) expect(answer.status, JSON.stringify(answer)).toBe(usual[answer.route]);
        else if (answer.status === 503) expect(answer, JSON.stringify(answer)).toMatchObject({ code: "not_ready", retryAfter: "1" });
        else if (answer.status !== "refused") expect(answer.status, JSON.stringify(answer)).toBe(usual[answer.route]);
      }
      for (const answer of notReady) {
        expect(answer).toMatchObject({ retryAfter: "1", body: { error: { code: "not_ready", message: expect.stringMatching(/migrations/) } } });
      }
    } finally {
      done = true;
      const exited = exitOf(serve);
      if (serve.exitCode === null) process.kill(pid, "SIGTERM");
      await exited;
      expect(await isGoneWithin(pid)).toBe(true);
    }
  });

  it("stopped by a signal while it starts, leaves no runtime behind serving its port", async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const serve = startCli(["--state", path.join(tmp.dir, "interrupted"), "serve", "--port", String(port)], { cwd: ROOT });
    const pid = serve.pid;
    if (pid === undefined) throw new Error("serve did not start");
    const exited = exitOf(serve);
    // The runtime listens before the migrations of a fresh state are applied (/healthz answers 503 until
    // then), and serve listens for signals only once it is up: a Ctrl-C in between used to end serve by
    // the signal's default action and leave workerd running on the port.
    const deadline = Date.now() + 60_000;
    while ((await statusOf(`${url}/healthz`)).status === "refused") {
      if (serve.exitCode !== null || Date.now() > deadline) throw new Error(`serve never listened: ${serve.output()}`);
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
    process.kill(pid, "SIGINT");
    const code = await exited;
    const left = await survivorsAfter(`--socket-addr=entry=127.0.0.1:${port}`);
    killListed(left);
    expect(left).toEqual([]);
    // Ended as a Ctrl-C ends it, whichever moment of the start it came at (never by the signal itself).
    expect([0, 130]).toContain(code);
    expect((await statusOf(`${url}/healthz`)).status).toBe("refused");
  });

  it("stopped by SIGTERM at any moment once it answers, stops its runtime: the signal never finds it without a listener", async () => {
    // Between the end of its start and the moment it waited for a signal, serve once had no listener (it
    // was asking for its login link): a SIGTERM then ended it by the signal's default action and left
    // workerd serving the port. Signals at several moments after the first answer land in every part
    // (one state directory: after the first, each start is workerd from its runtime snapshot).
    for (const after of [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const serve = startCli(["--json", "--state", path.join(tmp.dir, "stopped"), "serve", "--port", String(port)], { cwd: ROOT });
      const pid = serve.pid;
      if (pid === undefined) throw new Error("serve did not start");
      const exited = exitOf(serve);
      const deadline = Date.now() + 60_000;
      while ((await statusOf(`${url}/healthz`)).status !== 200) {
        if (serve.exitCode !== null || Date.now() > deadline) throw new Error(`serve never answered: ${serve.output()}`);
        await new Promise((resolve) => setTimeout(resolve, 3));
      }
      await new Promise((resolve) => setTimeout(resolve, after));
      process.kill(pid, "SIGTERM");
      const code = await exited;
      const left = await survivorsAfter(`--socket-addr=entry=127.0.0.1:${port}`);
      killListed(left);
      expect({ after, left }).toEqual({ after, left: [] });
      // Stopped once up (0), or while its start ended (as the signal would have ended it, its runtime stopped first: 143).
      expect({ after, ended: [0, 143].includes(code ?? -1) }).toEqual({ after, ended: true });
      expect((await statusOf(`${url}/healthz`)).status).toBe("refused");
    }
  });
});
