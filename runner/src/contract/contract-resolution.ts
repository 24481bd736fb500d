import path from "node:path";
import type { Contract } from "#shared/wire/contract.js";
import { contractDifferences, loadContractFile, validateContract, type LoadedContract } from "./contract-file.js";
import { UserError } from "../errors.js";
import { FLAGS_SOURCE } from "../loop/workspace.js";

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
  /** The check's test report (flag-only mode): its test ids make every fixed test count (DESIGN §5). */
  junit?: string | undefined;
  tap?: string | undefined;
  /** The scope (flag-only mode): the globs of the paths a candidate may change (DESIGN §6.4). */
  scope?: string[] | undefined;
  /** Start another loop even when one is recorded for this contract (DESIGN §6.6). */
  new?: boolean | undefined;
}

/** Loads the contract: from flags (flag-only mode, DESIGN §5) or from the contract file. */
export async function resolveContract(repo: string, options: ContractOptions): Promise<LoadedContract> {
  const flagOnly = options.check !== undefined || options.exec !== undefined;
  if (!flagOnly) {
    if (options.scope !== undefined) {
      throw new UserError(
        `--scope is for flag-only mode (--check/--exec); with ${options.contract ?? "loop.yaml"}, write the scope there: scope: [${options.scope.join(", ")}]`,
        2,
      );
    }
    const loaded = await loadContractFile(repo, options.contract ?? "loop.yaml");
    // With a contract file, only --max-iterations applies (the other contract flags are flag-only mode's).
    if (options.maxIterations === undefined) return loaded;
    return validateContract(withContractFlags(loaded.contract, { maxIterations: options.maxIterations }), loaded.source);
  }
  if (!options.check || !options.exec) {
    throw new UserError("flag-only mode needs both --check CMD and --exec CMD (or neither, to use loop.yaml)", 2);
  }
  if (options.contract !== undefined) throw new UserError("use either --contract FILE or --check/--exec, not both", 2);
  if (options.junit !== undefined && options.tap !== undefined)
    throw new UserError("the check has one test report: give --junit PATH or --tap PATH, not both", 2);
  const base = validateContract(
    {
      name: options.name ?? path.basename(repo),
      mode: "check_fixpoint",
      gates: [{ name: "check", run: options.check }],
      stop: { max_iterations: 50, no_progress: 10 },
      agent: { run: options.exec },
    },
    "flags",
  );
  return validateContract(withContractFlags(base.contract, options), "flags");
}

/** The contract flags given, by flag. */
function contractFlagsGiven(options: ContractOptions): string[] {
  const flags: [string, unknown][] = [
    ["--check", options.check],
    ["--exec", options.exec],
    ["--max-iterations", options.maxIterations],
    ["--name", options.name],
    ["--check-timeout", options.checkTimeout],
    ["--agent-timeout", options.agentTimeout],
    ["--junit", options.junit],
    ["--tap", options.tap],
    ["--scope", options.scope],
  ];
  return flags.filter(([, value]) => value !== undefined).map(([flag]) => flag);
}

/**
 * A contract with the values the contract flags give put in — the one mapping of flags to keys: --check,
 * --check-timeout and --junit/--tap are the first gate's (`run`, `timeout`, `tests`), --exec and
 * --agent-timeout the agent's, --max-iterations `stop.max_iterations`, --name `name`, --scope `scope`.
 */
function withContractFlags(base: Contract, options: ContractOptions): Contract {
  const [gate, ...gates] = base.gates;
  const report = options.junit !== undefined ? { junit: options.junit } : options.tap !== undefined ? { tap: options.tap } : gate?.tests;
  return {
    ...base,
    name: options.name ?? base.name,
    ...(options.scope !== undefined ? { scope: options.scope } : {}),
    gates: gate
      ? [{ ...gate, run: options.check ?? gate.run, timeout: options.checkTimeout ?? gate.timeout, ...(report ? { tests: report } : {}) }, ...gates]
      : base.gates,
    stop: { ...base.stop, max_iterations: options.maxIterations ?? base.stop.max_iterations },
    agent: { ...base.agent, run: options.exec ?? base.agent.run, timeout: options.agentTimeout ?? base.agent.timeout },
  };
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
        differences
          .slice(0, 12)
          .map((line) => `  ${line}`)
          .join("\n") +
        "\nresume it with `loopwarden run` and no contract flags, or start another loop with --new",
      2,
    );
  if (source !== FLAGS_SOURCE) {
    // The file as it is now, against the pinned contract (whose limit may have come from --max-iterations).
    const file = (await loadContractFile(repo, source)).contract;
    const fileDifferences = contractDifferences(pinned, withContractFlags(file, { maxIterations: pinned.stop.max_iterations }));
    if (fileDifferences.length > 0) throw refuse(`${source} as it is now`, fileDifferences);
  }
  const flagDifferences = contractDifferences(pinned, withContractFlags(pinned, options));
  if (flagDifferences.length > 0) throw refuse(contractFlagsGiven(options).join(", "), flagDifferences);
  return validateContract(pinned, source);
}
