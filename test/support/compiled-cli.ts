import { buildCli } from "../../scripts/build-cli.js";

// The e2e layer's global setup: the CLI the tests start is the compiled one an installed package runs
// (dist/cli), built afresh from the sources here, so a test never runs a stale bundle. It starts in
// about a third of the time the sources take through tsx (0.26-0.29 s against 0.62-0.80 s for a `run`
// that fails at once), and the e2e tests start it a few hundred times.
export default async function setup(): Promise<void> {
  await buildCli();
}
