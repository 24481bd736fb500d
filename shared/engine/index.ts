export * from "./chain.js";
export * from "./commands.js";
export * from "./decide.js";
export * from "./events.js";
export * from "./guards.js";
export * from "./halt-reasons.js";
export * from "./state.js";
export * from "./support.js";
