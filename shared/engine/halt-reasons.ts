// The halt reasons, their exit classes and meanings are defined in wire/halt-reasons.ts: wire's `Halt`
// schema needs them, and wire does not import the engine. Re-exported here, where the engine's callers
// import them from.
export * from "../wire/halt-reasons.js";
