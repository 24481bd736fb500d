import { existsSync } from "node:fs";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import * as z from "zod";

// What the runner remembers of a repository's loops, in `.loopwarden/state.json`: one loop per contract
// (DESIGN §6.6), keyed by where the contract comes from — its file, relative to the repository, or
// `flags` for a flag-only loop. `run` resumes the loop recorded for its contract whatever its flags.

/** The key of a flag-only loop (no contract file). */
export const FLAGS_SOURCE = "flags";

/** What the runner remembers about one loop of the repository. */
export const WorkspaceState = z.object({
  loop_id: z.string(),
  /** The coordinator the loop lives on: an explicit server URL, or the local state directory. */
  server: z.string().nullable(),
  state_dir: z.string().nullable(),
  /** The branch the loop was started from (the loop's own branch is `loopBranch(loop_id)`). */
  started_from: z.string().nullable(),
  /** This checkout's runner identity, kept so a restarted runner gets its own live lease back. */
  runner_id: z.string(),
  /**
   * The last event of the loop's log whose verdicts this checkout's `run` has shown: a resumed run prints
   * the verdicts after it first (those decided while it was away). Absent in a state written before.
   */
  seen_seq: z.number().int().min(0).optional(),
});
export type WorkspaceState = z.infer<typeof WorkspaceState>;

const WorkspaceFile = z.object({ version: z.literal(2), loops: z.record(z.string(), WorkspaceState) });
type WorkspaceFile = z.infer<typeof WorkspaceFile>;

function stateFile(repo: string): string {
  return path.join(repo, ".loopwarden", "state.json");
}

/**
 * Every loop recorded in the repository, by contract source. A file of the first version (one loop, no
 * source) is read as the loop of the default contract file, `loop.yaml`; one that cannot be read at all
 * is treated as empty, since every loop it named is still on its coordinator.
 */
export async function loadWorkspace(repo: string): Promise<Record<string, WorkspaceState>> {
  const text = await readFile(stateFile(repo), "utf8").catch(() => null);
  if (text === null) return {};
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return {};
  }
  const current = WorkspaceFile.safeParse(json);
  if (current.success) return current.data.loops;
  const first = WorkspaceState.safeParse(json);
  return first.success ? { "loop.yaml": first.data } : {};
}

/** The loop recorded for a contract source, or null. */
export async function loadWorkspaceState(repo: string, source: string): Promise<WorkspaceState | null> {
  return (await loadWorkspace(repo))[source] ?? null;
}

/** Records the loop of a contract source (atomically: write then rename), keeping the others. */
export async function saveWorkspaceState(repo: string, source: string, state: WorkspaceState): Promise<void> {
  const file = stateFile(repo);
  const content: WorkspaceFile = { version: 2, loops: { ...(await loadWorkspace(repo)), [source]: state } };
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(`${file}.tmp`, `${JSON.stringify(content, null, 2)}\n`);
  await rename(`${file}.tmp`, file);
}

/**
 * Which contract — so which recorded loop — a command means (DESIGN §6.6): `flags` with --check or
 * --exec, the --contract file (relative to the repository), else the default contract file when it
 * exists or has a loop, else the flag-only loop when there is one, else the default file (which the
 * command then reports missing).
 */
export function contractSourceOf(
  repo: string,
  options: { contract?: string | undefined; check?: string | undefined; exec?: string | undefined },
  loops: Record<string, WorkspaceState>,
): string {
  if (options.check !== undefined || options.exec !== undefined) return FLAGS_SOURCE;
  if (options.contract !== undefined) return path.relative(repo, path.resolve(repo, options.contract)) || options.contract;
  if (existsSync(path.join(repo, "loop.yaml")) || loops["loop.yaml"]) return "loop.yaml";
  return loops[FLAGS_SOURCE] ? FLAGS_SOURCE : "loop.yaml";
}
