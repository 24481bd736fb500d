import { app } from "./app.js";

export { LoopObject } from "./loop-object.js";

export default app satisfies ExportedHandler<Env>;
