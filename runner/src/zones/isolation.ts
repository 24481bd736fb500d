import os from "node:os";
import path from "node:path";
import type { ExecConfinement } from "#shared/wire/confinement.js";
import type { Contract } from "#shared/wire/contract.js";
import { clonesRoot } from "../evaluation/clone.js";
import { defaultStateDir } from "../paths.js";
import { expandHome, hideFromZones, requireSandbox, sandboxSupport, toolchainMounts, type ZoneSpec } from "./sandbox.js";

// Whether this run's zones are confined (DESIGN §6.7): the contract's `isolation` (confined unless it
// says `none`), or `--unconfined` for this run. Confined is the default, and a confined run where no zone
// can be built is refused before anything runs: fail closed, never a silent fallback.

let unconfinedByFlag = false;

/** `--unconfined`: this run's zones are not built, whatever the contract says; the log and receipt record it. */
export function runUnconfined(): void {
  unconfinedByFlag = true;
}

/** Whether the zones of a loop with this contract are confined in this run. */
export function isConfined(contract: Pick<Contract, "isolation">): boolean {
  return !unconfinedByFlag && contract.isolation !== "none";
}

/** Where agent workspaces are made: beside the evaluation clones, in the system's temporary directory. */
export function workspacesRoot(): string {
  return path.join(os.tmpdir(), "loopwarden-agent");
}

// Whatever the run, no zone sees the other zone's directories or the coordinator's default state.
hideFromZones(workspacesRoot());
hideFromZones(clonesRoot());
hideFromZones(defaultStateDir());

/**
 * Refuses, before the loop starts, a confined contract on a machine that cannot confine (with the reason
 * and the remedy), and answers a line to print when the run is unconfined — said plainly, every time.
 */
export async function preflightZones(contract: Pick<Contract, "isolation">): Promise<string | null> {
  if (isConfined(contract)) {
    await requireSandbox();
    return null;
  }
  const why = unconfinedByFlag ? "--unconfined" : "isolation: none";
  const support = await sandboxSupport();
  return (
    `UNCONFINED (${why}): the agent and the gates run as you, with your files, processes and network; ` +
    `the receipt records that its verdicts were reached unconfined${support.available ? "" : ` (this machine could not confine them anyway: ${support.reason})`}`
  );
}

/** How an evaluation's commands are confined under `contract` in this run: what its observation records. */
export function execConfinement(contract: Contract): ExecConfinement {
  return { mechanism: isConfined(contract) ? "bwrap" : "none", network: contract.exec?.network ?? "host" };
}

/**
 * The exec zone of an evaluation in `clone` (DESIGN §6.7): the clone writable, the repository's object
 * store (which the clone borrows) and the toolchains readable, everything else of the runner's hidden;
 * undefined when the run is unconfined.
 */
export function execZone(clone: { dir: string; objects?: string | undefined }, contract: Contract, network?: "none" | "host"): ZoneSpec | undefined {
  if (!isConfined(contract)) return undefined;
  return {
    writable: [clone.dir],
    readable: [...toolchainMounts(), ...(contract.exec?.mounts ?? []).map(expandHome), ...(clone.objects ? [clone.objects] : [])],
    network: network ?? contract.exec?.network ?? "host",
    cwd: clone.dir,
  };
}
