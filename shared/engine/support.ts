import type { Contract } from "../wire/contract.js";

/**
 * Contract features this engine cannot enforce yet, each as `path: why`. A loop is never created from a
 * contract that asks for more than the engine does: a guard that is not checked would be worse than
 * no guard, because the user would trust it.
 */
export function unsupportedFeatures(contract: Contract): string[] {
  const later = (path: string, what: string) => `${path}: ${what} is not enforced by this version yet (see the README roadmap); remove it to run`;
  const found: string[] = [];
  if (contract.artifacts) found.push(later("artifacts", "uploading artifacts by glob"));
  return found;
}
