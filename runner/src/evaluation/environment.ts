import path from "node:path";
import { withoutRepoLocatingGitEnv } from "../process/git.js";

// The environments the runner gives the processes it starts. Agents run in the working tree and get
// the user's environment less the runner's own credentials. Gates, metrics and task checks run in a
// clone outside the working tree (DESIGN §6.4) and must not reach back into it: an agent controls the
// working tree's untracked files (node_modules/, .venv/, build output), so a gate that found a binary
// there through PATH, NODE_PATH, PYTHONPATH or VIRTUAL_ENV would be judged by the agent's code.

/**
 * The environment of every process the runner starts: the runner's own credentials are never passed
 * on (invariant 1), and neither are git's repository-locating variables (GIT_DIR, GIT_WORK_TREE, … as
 * set when loopwarden runs from a git hook), so git inside a clone works on the clone.
 */
export function childEnv(extra: Record<string, string> = {}, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...withoutRepoLocatingGitEnv(base), ...extra };
  // Every credential the runner may hold: its token, the local owner token, and storage keys a local
  // coordinator is given. An agent (or a gate it wrote) reaching the coordinator with them could report
  // its own evidence.
  delete env.LOOPWARDEN_TOKEN;
  delete env.LOOPWARDEN_OWNER_TOKEN;
  delete env.LOOPWARDEN_SERVER;
  for (const name of Object.keys(env)) if (name.startsWith("LOOPWARDEN_S3_")) delete env[name];
  // A crash test's fault point is the runner's, never a child's (fault.ts).
  delete env.LOOPWARDEN_FAULT;
  return env;
}

// Variables that hold a list of directories: an entry inside the working tree is dropped, the rest kept.
// Any other variable whose value names a path inside the working tree is dropped whole (VIRTUAL_ENV,
// CONDA_PREFIX, INIT_CWD and npm_config_local_prefix as set by `npx`/`npm run`, PWD, …).
const PATH_LISTS = new Set([
  "PATH",
  "NODE_PATH",
  "PYTHONPATH",
  "GEM_PATH",
  "PERL5LIB",
  "CLASSPATH",
  "LD_LIBRARY_PATH",
  "DYLD_LIBRARY_PATH",
  "MANPATH",
  "GOPATH",
]);

/** Whether `candidate` (an absolute path) is `dir` or inside it. */
export function isWithin(candidate: string, dir: string): boolean {
  const relative = path.relative(dir, candidate);
  return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
}

/**
 * The environment for gates, metrics and task checks run in a clone of a repository whose working tree
 * is at any of `workTrees` (the path as given and its real path): `childEnv`, with every mention of a
 * path inside the working tree removed — entries of PATH-like lists, and any other variable whose
 * value (or one of whose `:`-separated parts) is such a path. Relative entries (`node_modules/.bin`)
 * resolve inside the clone and are kept.
 */
export function cloneEnv(workTrees: readonly string[], base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const inside = (value: string) => path.isAbsolute(value) && workTrees.some((tree) => isWithin(path.resolve(value), tree));
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(childEnv({}, base))) {
    if (value === undefined) continue;
    const parts = value.split(path.delimiter);
    if (PATH_LISTS.has(name)) {
      const kept = parts.filter((part) => !inside(part));
      if (kept.length > 0) env[name] = kept.join(path.delimiter);
    } else if (!parts.some(inside)) {
      env[name] = value;
    }
  }
  return env;
}
