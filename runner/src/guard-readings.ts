import { readFile } from "node:fs/promises";
import path from "node:path";
import { parseDocument } from "yaml";
import { sha256Hex } from "../../shared/hash.js";
import { Contract } from "../../shared/wire/contract.js";
import type { GuardReadings } from "../../shared/wire/observation.js";
import { contractHash } from "./contract-file.js";
import { parseLcov } from "./parsers/index.js";
import { protectedFiles } from "./protected-files.js";

// The runner's half of the guards (DESIGN §6.4): it measures, in the evaluated commit's clean clone,
// what the engine compares with t0. Files are read as committed, before any gate runs, so neither an
// agent's working tree nor a gate's side effects can hide a change.

/** sha256 of every protected tracked file (see `protectedFiles`), by path. */
async function hashProtectedFiles(clone: string, contract: Contract, contractFile: string | null): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  for (const file of await protectedFiles(clone, contract, contractFile)) {
    // A tracked symlink or submodule has no readable content here; its path still counts, as empty.
    const bytes = await readFile(path.join(clone, file)).catch(() => Buffer.alloc(0));
    files[file] = sha256Hex(bytes);
  }
  return files;
}

/** The contract file as the candidate has it: its hash, or why there is none (null in flag-only mode). */
async function readContractFile(clone: string, contractFile: string | null): Promise<GuardReadings["contract"]> {
  if (contractFile === null) return null;
  const text = await readFile(path.join(clone, contractFile), "utf8").catch(() => null);
  if (text === null) return { error: "missing" };
  const doc = parseDocument(text, { uniqueKeys: true });
  const parsed = doc.errors.length > 0 ? null : Contract.safeParse(doc.toJSON());
  return parsed?.success ? { hash: contractHash(parsed.data) } : { error: "invalid" };
}

/** The guard readings taken before any gate runs: all but the coverage the gates leave. */
export type GuardReadingsBeforeGates = Omit<GuardReadings, "coverage_percent">;

/** Readings taken right after checkout, before any gate runs. */
export async function readGuardsBeforeGates(clone: string, contract: Contract, contractFile: string | null): Promise<GuardReadingsBeforeGates> {
  return {
    protected_files: await hashProtectedFiles(clone, contract, contractFile),
    contract: await readContractFile(clone, contractFile),
  };
}

/** Line coverage from the contract's lcov file after the gates ran; null when there is none to read. */
export async function readCoverage(clone: string, contract: Contract): Promise<{ percent: number | null; note?: string }> {
  const lcov = contract.guards?.coverage?.lcov;
  if (!lcov) return { percent: null };
  const text = await readFile(path.join(clone, lcov), "utf8").catch(() => null);
  if (text === null) return { percent: null, note: `${lcov}: no coverage report was written` };
  try {
    return { percent: parseLcov(text, lcov).percent };
  } catch (error) {
    return { percent: null, note: (error as Error).message };
  }
}
