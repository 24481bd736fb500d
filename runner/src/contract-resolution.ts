import path from "node:path";
import type { Contract } from "../../shared/wire/contract.js";
import { contractDifferences, loadContractFile, validateContract, type LoadedContract } from "./contract-file.js";
import { UserError } from "./errors.js";
import { FLAGS_SOURCE } from "./workspace.js";

// Which contract a run uses (DESIGN §5, §6.6): the contract file or the flags for a new loop; for a
// running loop, always the one it pinned, with flags or file edits that would change it refused.

/** Where the contract comes from: `--check`/`--exec` flags, else a file (default `loop.yaml`). */
export interface ContractOptions {
  contract?: string | undefined;
  check?: string | undefined;
  exec?: string | undefined;
  maxIterations?: number | undefined;
  name?: string | undefined;
  checkTimeout?: string | undefined;
  agentTimeout?: string | undefined;
  /** Start another loop even when one is recorded for this contract (DESIGN §6.6). */
  new?: boolean | undefined;
}

/** Loads the contract: from flags (flag-only mode, DESIGN §5) or from the contract file. */
export async function resolveContract(repo: string, options: ContractOptions): Promise<LoadedContract> {
  const flagOnly = options.check !== undefined || options.exec !== undefined;
  if (!flagOnly) {
    const loaded = await loadContractFile(repo, options.contract ?? "loop.yaml");
    if (options.maxIterations !== undefined) {
      return validateContract(
        { ...loaded.contract, stop: { ...loaded.contract.stop, max_iterations: options.maxIterations } },
        loaded.source,
      );
    }
    return loaded;
  }
  if (!options.check || !options.exec) {
    throw new UserError("flag-only mode needs both --check CMD and --exec CMD (or neither, to use loop.yaml)", 2);
  }
  if (options.contract !== undefined) throw new UserError("use either --contract FILE or --check/--exec, not both", 2);
  return validateContract(
    {
      name: options.name ?? path.basename(repo),
      mode: "check_fixpoint",
      gates: [{ name: "check", run: options.check, ...(options.checkTimeout ? { timeout: options.checkTimeout } : {}) }],
      stop: { max_iterations: options.maxIterations ?? 50, no_progress: 10 },
      agent: { run: options.exec, ...(options.agentTimeout ? { timeout: options.agentTimeout } : {}) },
    },
    "flags",
  );
}

/** The contract flags given, by flag, and the pinned contract with their values put in (flag-only mode's mapping). */
function withContractFlags(pinned: Contract, options: ContractOptions): { flags: string[]; wanted: Contract } {
  const [gate, ...gates] = pinned.gates;
  const flags: [string, unknown][] = [
    ["--check", options.check],
    ["--exec", options.exec],
    ["--max-iterations", options.maxIterations],
    ["--name", options.name],
    ["--check-timeout", options.checkTimeout],
    ["--agent-timeout", options.agentTimeout],
  ];
  const wanted: Contract = {
    ...pinned,
    name: options.name ?? pinned.name,
    gates: gate ? [{ ...gate, run: options.check ?? gate.run, timeout: options.checkTimeout ?? gate.timeout }, ...gates] : pinned.gates,
    stop: { ...pinned.stop, max_iterations: options.maxIterations ?? pinned.stop.max_iterations },
    agent: { ...pinned.agent, run: options.exec ?? pinned.agent.run, timeout: options.agentTimeout ?? pinned.agent.timeout },
  };
  return { flags: flags.filter(([, value]) => value !== undefined).map(([flag]) => flag), wanted };
}

/**
 * The contract a running loop resumes with (DESIGN §6.6): always the one it pinned. Flags that would
 * change it, or a contract file that no longer matches it, are refused with the exact difference; a
 * new loop needs `--new`.
 */
export async function resumedContract(repo: string, source: string, options: ContractOptions, loopId: string, pinned: Contract): Promise<LoadedContract> {
  const refuse = (what: string, differences: string[]) =>
    new UserError(
      `loop ${loopId} (${source === FLAGS_SOURCE ? "flag-only" : source}) is still running, and ${what} would change the contract it pinned:\n` +
        differences.slice(0, 12).map((line) => `  ${line}`).join("\n") +
        "\nresume it with `loopwarden run` and no contract flags, or start another loop with --new",
      2,
    );
  if (source !== FLAGS_SOURCE) {
    // The file as it is now, against the pinned contract (whose limit may have come from --max-iterations).
    const file = (await loadContractFile(repo, source)).contract;
    const fileDifferences = contractDifferences(pinned, { ...file, stop: { ...file.stop, max_iterations: pinned.stop.max_iterations } });
    if (fileDifferences.length > 0) throw refuse(`${source} as it is now`, fileDifferences);
  }
  const { flags, wanted } = withContractFlags(pinned, options);
  const flagDifferences = contractDifferences(pinned, wanted);
  if (flagDifferences.length > 0) throw refuse(flags.join(", "), flagDifferences);
  return validateContract(pinned, source);
}
