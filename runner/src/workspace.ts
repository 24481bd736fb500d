import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { z } from "zod";

/** What `.loopwarden/state.json` remembers about the repository's current loop. */
export const WorkspaceState = z.object({
  loop_id: z.string(),
  /** The coordinator the loop lives on: an explicit server URL, or the local state directory. */
  server: z.string().nullable(),
  state_dir: z.string().nullable(),
  branch: z.string(),
  started_from: z.string().nullable(),
  /** The contract hash the loop was created with: a changed contract is a new loop. */
  contract_hash: z.string(),
  /** This checkout's runner identity, kept so a restarted runner gets its own live lease back. */
  runner_id: z.string(),
});
export type WorkspaceState = z.infer<typeof WorkspaceState>;

function stateFile(repo: string): string {
  return path.join(repo, ".loopwarden", "state.json");
}

/** Records the repository's current loop (atomically: write then rename). */
export async function saveWorkspaceState(repo: string, state: WorkspaceState): Promise<void> {
  const file = stateFile(repo);
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(`${file}.tmp`, `${JSON.stringify(state, null, 2)}\n`);
  await rename(`${file}.tmp`, file);
}

/** The repository's current loop, or null when none was started here. */
export async function loadWorkspaceState(repo: string): Promise<WorkspaceState | null> {
  const text = await readFile(stateFile(repo), "utf8").catch(() => null);
  if (text === null) return null;
  const parsed = WorkspaceState.safeParse(JSON.parse(text));
  return parsed.success ? parsed.data : null;
}
