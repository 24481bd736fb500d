import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The loopwarden package root (where wrangler.toml and the worker live). Two levels up from here, and
 * equally from the runner's bundled chunks in dist/cli/, where esbuild puts this module's code.
 */
export const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
