import { createHash } from "node:crypto";
import { useSha256 } from "#shared/hash.js";
import { app } from "./app.js";

// The engine's hashing (sealing events, naming test sets, request fingerprints) on workerd's native
// SHA-256 (nodejs_compat, wrangler.toml) rather than the portable one: about ten times faster here.
// A string is encoded by the runtime's native TextEncoder: handed to update() as it is, workerd's Node
// Buffer layer encodes it in JavaScript, about three times slower for a 5 MB loop_created (issue 30).
const utf8 = new TextEncoder();
useSha256((input) =>
  createHash("sha256")
    .update(typeof input === "string" ? utf8.encode(input) : input)
    .digest("hex"),
);

export { LoopObject } from "./loop/loop-object.js";

export default app satisfies ExportedHandler<Env>;
