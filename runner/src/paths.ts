import { homedir, platform } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The loopwarden package root (where wrangler.toml and the worker live). */
export const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

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
