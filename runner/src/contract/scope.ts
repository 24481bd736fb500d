import { inScope } from "#shared/engine/scope.js";
import { formatList } from "#shared/format-list.js";
import type { Contract } from "#shared/wire/contract.js";

// What the runner says about a contract's scope (DESIGN §6.4): the engine checks it, the runner only
// tells the user what it admits before a loop runs on it.

/** What the contract's scope admits, in one line for `run`; without a scope, that only the protected set guards the check. */
export function scopeLine(contract: Contract): string {
  if (!contract.scope) {
    return "no scope: only the default protected set guards the check, so a change to any other file (a dotfile, a tool's configuration) can be kept; write scope: in loop.yaml (loopwarden init infers one) or pass --scope";
  }
  return `scope: ${formatList(contract.scope)} (a candidate that changes any other path is blocked_path_modified)`;
}

/** How the scope meets the repository's tracked files: how many it admits, and the globs that admit none. */
export function scopeCoverage(scope: readonly string[], tracked: readonly string[]): { admitted: number; unmatched: string[] } {
  const admitted = tracked.filter((file) => inScope(scope, file)).length;
  const unmatched = scope.map((glob) => [glob]).filter((glob) => !tracked.some((file) => inScope(glob, file)));
  return { admitted, unmatched: unmatched.flat() };
}
