import type { LoopState } from "#shared/engine/index.js";
import type { LoopSummary } from "#shared/wire/api.js";
import type { Labels } from "#shared/wire/contract.js";
import type { Client } from "../coordinator/client.js";
import type { Connection } from "../coordinator/connect.js";
import type { LoadedContract } from "../contract/contract-file.js";
import type { OutputMode } from "../output.js";
import type { WorkspaceState } from "./workspace.js";

// The session's shape, apart from session.ts (which opens one and drives it): the modules session.ts
// calls (lease-job.ts, candidate-commits.ts) take a session too, and importing it from session.ts would
// make each a cycle.

/** An open loop in a repository, connected to its coordinator. */
export interface Session {
  repo: string;
  /** The contract's source as `.loopwarden/state.json` records the loop under it (`contractSourceOf`). */
  source: string;
  loaded: LoadedContract;
  connection: Connection;
  client: Client;
  mode: OutputMode;
  workspace: WorkspaceState;
  loop: LoopSummary;
  /** True when an existing loop was picked up rather than created. */
  resumed: boolean;
  /** What this runner offers a contract's `evaluate.labels` (`--labels`): it evaluates its own candidates only when they match. */
  labels: Labels;
  /** The loop's state as last folded, and the last event folded into it: later reads fetch only what follows. */
  folded?: { seq: number; state: LoopState } | undefined;
  /** The working tree's return to the best commit after a rejection, when `decideCandidate` left it running. */
  restoring?: Promise<void> | undefined;
}
