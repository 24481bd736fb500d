import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { runCommand } from "../../../runner/src/process/exec.js";
import { probeSandbox, type ZoneSpec } from "../../../runner/src/zones/sandbox.js";
import { coolZones, warmZone, warmZoneCount } from "../../../runner/src/zones/warm-zones.js";
import { processesWith } from "../../support/zone-markers.js";

// Zones started ahead of their command (issue 30), on this machine's real bubblewrap: a command that
// takes a warm zone must see exactly what it would have seen in a zone started for it, and a zone never
// taken must never outlive its directory or the runner.

const support = await probeSandbox();
const tmp = mkdtempSync(path.join(os.tmpdir(), "lw-warm-zones-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => coolZones());

let dirs = 0;
/** A zone's own directory, whose name marks its processes (`processesWith`). */
function zoneDir(): string {
  const dir = path.join(tmp, `zone-${process.pid}-${dirs++}`);
  mkdirSync(dir);
  return dir;
}
const specOf = (dir: string, network: ZoneSpec["network"] = "none"): ZoneSpec => ({ writable: [dir], network, cwd: dir });

/** Waits until `check` holds, for at most `ms` (a process's exit is seen by the kernel, then by pgrep). */
async function until(check: () => boolean, ms = 5_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

// Everything a command can tell of how it was started: its variables (one with quotes, a newline, `$`
// and backquotes), its arguments, its directory, its pid in the zone's namespace, its standard input.
const PROBE = 'env | sort; echo "args=$0 $# cwd=$(pwd) pid=$$"; ls -l /proc/self/fd/0 | sed "s/.*-> //"; exit 3';
const ENV = { PATH: process.env.PATH ?? "/usr/bin:/bin", LOOPWARDEN_PROBE: 'it\'s "quoted"\n$HOME `id` \\ end', EMPTY: "" };

describe.skipIf(!support.available)("a zone started ahead (bubblewrap on this machine)", () => {
  it("runs its command exactly as a zone started for it would: variables, arguments, directory, pid, stdin, exit", async () => {
    const dir = zoneDir();
    const cold = await runCommand(PROBE, { cwd: "/", timeoutMs: 10_000, env: ENV, zone: specOf(dir) });
    await warmZone(specOf(dir));
    expect(warmZoneCount()).toBe(1);
    const warm = await runCommand(PROBE, { cwd: "/", timeoutMs: 10_000, env: ENV, zone: specOf(dir) });
    expect(warmZoneCount()).toBe(0); // taken
    expect(warm.exit_code).toBe(3);
    expect(warm.output.toString()).toBe(cold.output.toString());
    expect(warm.output.toString()).toContain('LOOPWARDEN_PROBE=it\'s "quoted"');
    expect(warm.output.toString()).toContain("/dev/null");
  });

  it("is taken only by a command asking for the very same zone; another is started cold, and the warm one waits", async () => {
    const dir = zoneDir();
    await warmZone(specOf(dir, "none"));
    // The host's network instead of none: another zone.
    const other = await runCommand("echo other", { cwd: dir, timeoutMs: 10_000, env: ENV, zone: specOf(dir, "host") });
    expect(other.output.toString()).toBe("other\n");
    expect(warmZoneCount()).toBe(1);
    // A variable whose name a shell cannot export (which some shells pass on to what they run) leaves
    // the warm zone waiting: such a command gets a zone started for it, with its environment as given.
    const odd = await runCommand("echo odd", { cwd: dir, timeoutMs: 10_000, env: { ...ENV, "ODD-NAME": "kept" }, zone: specOf(dir, "none") });
    expect(odd.output.toString()).toBe("odd\n");
    expect(warmZoneCount()).toBe(1);
    expect(processesWith(dir).length).toBeGreaterThan(0);
  });

  it("an agent in its own zone can neither see a waiting zone nor hand it a command", async () => {
    const gate = zoneDir();
    await warmZone(specOf(gate));
    // The agent looks for the waiting zone's processes and directory, and writes to every stdin it can find.
    // The marker is put together by the shell, so no command line of the agent's own carries it.
    const name = path.basename(gate);
    const cheat = [
      `a=${JSON.stringify(name.slice(0, 4))}; b=${JSON.stringify(name.slice(4))}`,
      'for f in /proc/[0-9]*/cmdline; do case "$(tr "\\0" " " < "$f" 2>/dev/null)" in *"$a$b"*) echo saw-process;; esac; done',
      `ls ${JSON.stringify(path.dirname(gate))} 2>/dev/null | grep -q "$a$b" && echo saw-directory`,
      'for fd in /proc/[0-9]*/fd/0; do echo "echo planted" > "$fd" 2>/dev/null; done',
      "echo looked",
    ].join("; ");
    const agent = await runCommand(cheat, { cwd: "/", timeoutMs: 10_000, env: ENV, zone: specOf(zoneDir()) });
    expect(agent.output.toString()).toBe("looked\n");
    // The waiting zone runs the command it is handed, and only that.
    const taken = await runCommand("echo gate", { cwd: gate, timeoutMs: 10_000, env: ENV, zone: specOf(gate) });
    expect(warmZoneCount()).toBe(0);
    expect(taken.output.toString()).toBe("gate\n");
  });

  it("a timeout still kills everything the command started in a zone it took", async () => {
    const dir = zoneDir();
    await warmZone(specOf(dir));
    const result = await runCommand(`sleep 30 & sleep 31; echo never`, { cwd: dir, timeoutMs: 300, env: ENV, zone: specOf(dir) });
    expect(result.timed_out).toBe(true);
    expect(result.output.toString()).not.toContain("never");
    expect(await until(() => processesWith(dir).length === 0)).toBe(true);
  });

  it("one never taken is let go when its directory goes, and has exited once that is done", async () => {
    const kept = zoneDir();
    const going = zoneDir();
    await warmZone(specOf(kept));
    await warmZone(specOf(going));
    expect(warmZoneCount()).toBe(2);
    // Let go, it has exited (and been reaped) by the time the promise settles.
    await coolZones(going);
    expect(warmZoneCount()).toBe(1);
    expect(processesWith(going)).toEqual([]);
    expect(processesWith(kept).length).toBeGreaterThan(0);
    await coolZones();
    expect(processesWith(kept)).toEqual([]);
  });

  it("does not keep the runner's process alive, and goes with it", async () => {
    const dir = zoneDir();
    const module = path.resolve("runner/src/zones/warm-zones.ts");
    const script = `const { warmZone } = await import(${JSON.stringify(module)}); await warmZone(${JSON.stringify(specOf(dir))}); console.log("warm");`;
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    const exited = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        resolve(null);
      }, 30_000);
      child.on("exit", (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
    expect(out).toBe("warm\n");
    expect(exited).toBe(0);
    expect(await until(() => processesWith(dir).length === 0)).toBe(true);
  }, 40_000);
});
