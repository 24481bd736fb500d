import type { ServerOptions } from "./connect.js";
import { UserError } from "../errors.js";
import { repoRoot } from "../process/git.js";
import { contractSourceOf, loadWorkspace } from "../loop/workspace.js";

/**
 * The loop a read-only command (`status`, `watch`) is about: the LOOP argument, else the repository's
 * loop for its contract (`--contract`, else the default: `contractSourceOf`); and where its coordinator
 * is, unless `--server`/`--state` say otherwise.
 */
export async function resolveTarget(
  loopArg: string | undefined,
  options: ServerOptions & { cwd: string; contract?: string | undefined },
): Promise<{ loopId: string; server: ServerOptions }> {
  if (loopArg) return { loopId: loopArg, server: options };
  const repo = await repoRoot(options.cwd);
  const loops = await loadWorkspace(repo);
  const source = contractSourceOf(repo, options, loops);
  const workspace = loops[source];
  if (!workspace) {
    throw new UserError(`no loop was started in this repository${options.contract === undefined ? "" : ` for ${source}`}; pass a loop id`, 2);
  }
  return {
    loopId: workspace.loop_id,
    server: {
      server: options.server ?? workspace.server ?? undefined,
      state: options.state ?? workspace.state_dir ?? undefined,
      token: options.token,
    },
  };
}
