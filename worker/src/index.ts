import { app } from "./app.js";

export { LoopObject } from "./loop/loop-object.js";

export default app satisfies ExportedHandler<Env>;
