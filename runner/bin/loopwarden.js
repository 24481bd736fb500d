#!/usr/bin/env node
// The `loopwarden` binary: runs the TypeScript CLI through tsx's loader, without a build step.
import { register } from "tsx/esm/api";

register();
await import("../src/main.ts");
