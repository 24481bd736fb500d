// `npm run build:worker` (also run by `npm ci` as `prepare`): bundles the worker into dist/worker/ the
// way `wrangler deploy --dry-run` does, for the local coordinator to run. Does nothing when the bundle is
// already that of the current sources.
import { BUNDLE_FILE, ensureWorkerBundle } from "./lib/worker-bundle.js";

const built = await ensureWorkerBundle(() => process.stderr.write("building the worker bundle…\n"));
process.stderr.write(`${built ? "built" : "up to date:"} ${BUNDLE_FILE}\n`);
