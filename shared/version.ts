/** The loopwarden version, reported by `/healthz`, `--version` and `--json` output (kept equal to package.json by a unit test). */
export const VERSION = "0.1.0";
