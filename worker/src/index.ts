import { createHash } from "node:crypto";
import { useSha256 } from "#shared/hash.js";
import { app } from "./app.js";

// The engine's hashing (sealing events, naming test sets, request fingerprints) on workerd's native
// SHA-256 (nodejs_compat, wrangler.toml) rather than the portable one: about ten times faster here.
useSha256((input) => createHash("sha256").update(input).digest("hex"));

export { LoopObject } from "./loop/loop-object.js";

export default app satisfies ExportedHandler<Env>;
