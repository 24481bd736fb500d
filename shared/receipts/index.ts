export * from "./confinement.js";
export * from "./dsse.js";
export * from "./keys.js";
export * from "./oracle.js";
export * from "./statement.js";
export * from "./verify.js";
