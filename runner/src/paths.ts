import { homedir, platform } from "node:os";
import path from "node:path";

// The loopwarden package root is defined beside the worker bundle's build code, which needs it too
// (scripts/lib/package-root.ts); re-exported for the runner.
export { PACKAGE_ROOT } from "../../scripts/lib/package-root.js";

/**
 * The local coordinator's state directory: `--state`, else `LOOPWARDEN_STATE`, else the per-user data
 * directory (XDG on Linux, Application Support on macOS).
 */
export function defaultStateDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.LOOPWARDEN_STATE) return path.resolve(env.LOOPWARDEN_STATE);
  if (platform() === "darwin") return path.join(homedir(), "Library", "Application Support", "loopwarden");
  const dataHome = env.XDG_DATA_HOME || path.join(homedir(), ".local", "share");
  return path.join(dataHome, "loopwarden");
}
