import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, api, makeRepo, runCli, sharedCoordinator, tempDir, type CliResult } from "../support/cli.js";
import { verifyIndependently } from "../support/independent-verifier.js";

// Receipts end to end (DESIGN §9): the demo loop converges against a running local coordinator, which
// signs its final receipt; `loopwarden verify` checks it from its URL and from saved files, fails on a
// tampered copy naming what failed, and a verifier written from the specs alone agrees.

// One coordinator serves the file (issue 30: a coordinator's start is about 3 s of CPU): each describe
// block makes a loop of its own in a repository of its own and reads back only that loop's receipt;
// the loop ids a test compares are taken before and after within the test.
const { coordinator } = sharedCoordinator("receipts-coordinator");

describe("a loop's receipt, verified by anyone", () => {
  const tmp = tempDir("receipts");
  const repo = path.join(tmp.dir, "repo");
  const saved = path.join(tmp.dir, "saved");
  let run: CliResult;
  let receiptUrl = "";

  beforeAll(async () => {
    cpSync(path.join(ROOT, "examples", "demo"), repo, { recursive: true });
    makeRepo(repo, {});
    run = await runCli(["--json", "--server", coordinator.url, "run", "--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"], {
      cwd: repo,
    });
    receiptUrl = (JSON.parse(run.stdout) as { receipt_url?: string }).receipt_url ?? "";
  }, 120_000);
  afterAll(() => tmp.cleanup());

  it("the run ends by naming its final receipt's URL", () => {
    expect(run.code, run.stderr).toBe(10);
    expect(receiptUrl).toMatch(new RegExp(`^${coordinator.url}/r/rc_[0-9a-f]{32}$`));
  });

  it("verify checks it from its URL: exit 0, every check passed", async () => {
    const human = await runCli(["verify", receiptUrl], { cwd: tmp.dir });
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toMatch(/^valid: final receipt of loop lp_[0-9a-f]{24} \(success_condition_met\), signed by /m);
    const json = await runCli(["--json", "verify", receiptUrl], { cwd: tmp.dir });
    expect(json.code).toBe(0);
    const result = JSON.parse(json.stdout) as { valid: boolean; halt_reason: string; checks: { check: string; ok: boolean }[] };
    expect(result).toMatchObject({ status: "ok", valid: true, halt_reason: "success_condition_met", errors: [] });
    expect(result.checks.map((check) => [check.check, check.ok])).toEqual(
      ["envelope", "signature", "statement", "chain", "verdicts", "scope", "predicate"].map((check) => [check, true]),
    );
  });

  it("a verifier written from the DSSE, in-toto and RFC 8785 texts alone accepts it", async () => {
    const [envelope, eventsJsonl, keys] = await Promise.all([
      fetch(`${receiptUrl}.json`).then((response) => response.json() as Promise<unknown>),
      fetch(`${receiptUrl}/events.jsonl`).then((response) => response.text()),
      fetch(`${coordinator.url}/.well-known/loopwarden/keys.json`).then((response) => response.json() as Promise<unknown>),
    ]);
    expect(verifyIndependently({ envelope, eventsJsonl, keys })).toMatchObject({ ok: true, failures: [] });
  });

  it("receipt issues an interim one and saves its documents; verify checks the files offline", async () => {
    const issued = await runCli(["--json", "--server", coordinator.url, "receipt", "--save", saved], { cwd: repo });
    expect(issued.code, issued.stderr).toBe(0);
    const answer = JSON.parse(issued.stdout) as { receipt_url: string; receipt_id: string; saved: string[] };
    expect(answer.saved.map((file) => path.basename(file))).toEqual([`${answer.receipt_id}.json`, `${answer.receipt_id}.events.jsonl`, "keys.json"]);
    const [envelope, events, keys] = answer.saved as [string, string, string];
    const offline = await runCli(["verify", envelope, "--events", events, "--key", keys], { cwd: tmp.dir });
    expect(offline.code, offline.stdout + offline.stderr).toBe(0);
    expect(offline.stdout).toContain("valid: interim receipt");
  });

  it("a tampered copy exits 13 and names the first failed check", async () => {
    const issued = JSON.parse(
      (await runCli(["--json", "--server", coordinator.url, "receipt", "--save", path.join(tmp.dir, "tamper")], { cwd: repo })).stdout,
    ) as {
      saved: [string, string, string];
    };
    const [envelope, events, keys] = issued.saved;
    const lines = readFileSync(events, "utf8").trim().split("\n");
    const verdictIndex = lines.findIndex((line) => line.includes('"type":"verdict"'));
    lines[verdictIndex] = (lines[verdictIndex] ?? "").replace('"decision":"rejected"', '"decision":"promoted"');
    const forged = path.join(tmp.dir, "forged.events.jsonl");
    writeFileSync(forged, `${lines.join("\n")}\n`);
    const result = await runCli(["--json", "verify", envelope, "--events", forged, "--key", keys], { cwd: tmp.dir });
    expect(result.code).toBe(13);
    expect(JSON.parse(result.stdout)).toMatchObject({ valid: false, errors: [`chain: event ${verdictIndex + 1} does not match its hash`] });

    const signed = JSON.parse(readFileSync(envelope, "utf8")) as { payload: string };
    const payload = Buffer.from(signed.payload, "base64").toString("utf8").replace('"kind":"interim"', '"kind":"final"');
    const reSigned = path.join(tmp.dir, "edited.json");
    writeFileSync(reSigned, JSON.stringify({ ...signed, payload: Buffer.from(payload).toString("base64") }));
    const edited = await runCli(["verify", reSigned, "--events", events, "--key", keys], { cwd: tmp.dir });
    expect(edited.code).toBe(13);
    expect(edited.stdout).toContain("INVALID: signature: no signature verifies with a published key");
  });

  // reexecute (docs/receipts.md): the live agent loop again from the receipt's t0, compared by outcome.
  const demoFlags = ["--check", "node --test", "--exec", "node agent.mjs", "--max-iterations", "10"];
  const loopIds = async () =>
    (((await (await api(`${coordinator.url}/v1/loops`)).json()) as { loops: { loop_id: string }[] }).loops ?? []).map((loop) => loop.loop_id).sort();
  // Each reexecute gets a temporary directory of its own, to see that its clone is gone when it ends.
  const ownTmp = (name: string) => {
    const dir = path.join(tmp.dir, name);
    mkdirSync(dir);
    return { env: { TMPDIR: dir }, left: () => readdirSync(dir, { recursive: true }).filter((entry) => String(entry).includes("reexecute-")) };
  };

  it("reexecute without --confirm says what it would run, exits 2 and creates nothing", async () => {
    const before = await loopIds();
    const state = readFileSync(path.join(repo, ".loopwarden", "state.json"), "utf8");
    const own = ownTmp("tmp-plan");
    const plan = await runCli(["--server", coordinator.url, "reexecute", receiptUrl, ...demoFlags], { cwd: repo, env: own.env });
    expect(plan.code, plan.stderr).toBe(2);
    expect(plan.stdout + plan.stderr).toContain("agent:          node agent.mjs");
    expect(plan.stdout + plan.stderr).toContain("add --confirm to run it");
    expect(await loopIds()).toEqual(before);
    expect(readFileSync(path.join(repo, ".loopwarden", "state.json"), "utf8")).toBe(state);
    expect(own.left()).toEqual([]);
  });

  it("reexecute --confirm runs the demo's loop again as a new loop and reports a match: the same halt and failing set", async () => {
    const before = await loopIds();
    const own = ownTmp("tmp-rerun");
    const rerun = await runCli(["--json", "--server", coordinator.url, "reexecute", receiptUrl, ...demoFlags, "--confirm"], { cwd: repo, env: own.env });
    expect(rerun.code, rerun.stderr).toBe(0);
    const answer = JSON.parse(rerun.stdout) as {
      match: boolean;
      loop_id: string;
      receipt_url: string;
      original: { loop_id: string; halt_reason: string };
      reexecuted: { halt_reason: string; failing: string[] };
      comparisons: { part: string; match: boolean; counts: boolean }[];
    };
    expect(answer).toMatchObject({
      match: true,
      original: { halt_reason: "success_condition_met" },
      reexecuted: { halt_reason: "success_condition_met", failing: [] },
    });
    expect(answer.comparisons.filter((comparison) => comparison.counts).map((comparison) => [comparison.part, comparison.match])).toEqual([
      ["halt", true],
      ["failing", true],
    ]);
    // A new loop with its own receipt, which verifies; the user's checkout is not where it ran.
    expect(answer.loop_id).not.toBe(answer.original.loop_id);
    expect(await loopIds()).toEqual([...before, answer.loop_id].sort());
    expect((await runCli(["verify", answer.receipt_url], { cwd: tmp.dir })).code).toBe(0);
    expect(own.left()).toEqual([]);
  }, 180_000);

  it("reexecute runs only the receipt's own contract: other flags are refused before anything runs", async () => {
    const before = await loopIds();
    const refused = await runCli(
      ["--server", coordinator.url, "reexecute", receiptUrl, "--check", "node -e 'process.exit(0)'", "--exec", "node agent.mjs", "--confirm"],
      {
        cwd: repo,
      },
    );
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("reexecute runs only a contract of this checkout");
    expect(await loopIds()).toEqual(before);
  });

  it("refuses what is not a receipt as a usage error", async () => {
    expect((await runCli(["verify", `${coordinator.url}/v1/loops`], { cwd: tmp.dir })).code).toBe(2);
    expect((await runCli(["verify", "receipt.json"], { cwd: tmp.dir })).code).toBe(2);
    const missing = await runCli(["verify", `${coordinator.url}/r/rc_${"0".repeat(32)}`], { cwd: tmp.dir });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("no receipt at");
  });
});

describe("replay: the receipt's best commit re-run, its fingerprint compared", () => {
  const tmp = tempDir("replay");
  const repo = path.join(tmp.dir, "repo");
  // The check passes once src/value.txt says "fixed" — unless REPLAY_BREAK is set, which stands in for
  // a machine where the recorded result does not hold.
  const flags = ["--check", "node check.mjs", "--exec", "node agent.mjs", "--max-iterations", "5"];
  let url = "";

  beforeAll(async () => {
    makeRepo(repo, {
      "check.mjs": `import { readFileSync } from "node:fs";\nprocess.exit(readFileSync("src/value.txt", "utf8").trim() === "fixed" && !process.env.REPLAY_BREAK ? 0 : 1);\n`,
      "agent.mjs": `import { writeFileSync } from "node:fs";\nwriteFileSync("src/value.txt", "fixed\\n");\n`,
      "src/value.txt": "broken\n",
    });
    const run = await runCli(["--json", "--server", coordinator.url, "run", ...flags], { cwd: repo });
    expect(run.code, run.stderr).toBe(10);
    url = (JSON.parse(run.stdout) as { receipt_url: string }).receipt_url;
  }, 120_000);
  afterAll(() => tmp.cleanup());

  it("matches when the gates give what the receipt records: exit 0", async () => {
    const replay = await runCli(["--json", "replay", url, ...flags], { cwd: repo });
    expect(replay.code, replay.stderr).toBe(0);
    expect(JSON.parse(replay.stdout)).toMatchObject({
      status: "ok",
      match: true,
      comparisons: [
        { part: "gates", match: true },
        { part: "tests", match: true },
      ],
    });
  });

  it("differs when they do not: exit 13, naming the gate", async () => {
    const replay = await runCli(["replay", url, ...flags], { cwd: repo, env: { REPLAY_BREAK: "1" } });
    expect(replay.code).toBe(13);
    expect(replay.stdout).toContain("check exit 0 → 1");
    expect(replay.stdout).toMatch(/^DIFFERS: re-running c1 at [0-9a-f]{10} does not give what the receipt records$/m);
  });

  it("runs only the loop's own contract: other flags are refused before anything runs", async () => {
    const replay = await runCli(["replay", url, "--check", "node -e 'process.exit(0)'", "--exec", "node agent.mjs", "--max-iterations", "5"], { cwd: repo });
    expect(replay.code).toBe(2);
    expect(replay.stderr).toContain("replay runs only a contract of this checkout");
  });

  it("needs the best commit in this repository", async () => {
    const other = makeRepo(path.join(tmp.dir, "other"), { "README.md": "another repository\n" });
    const replay = await runCli(["replay", url, ...flags], { cwd: other });
    expect(replay.code).toBe(1);
    expect(replay.stderr).toMatch(/best commit [0-9a-f]{40} is not in this repository/);
  });
});
