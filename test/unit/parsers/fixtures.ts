import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import { ParseError } from "../../../runner/src/evaluation/parsers/index.js";

/** Reads a file under test/fixtures/ (see its README for the tool that produced each one). */
export function readFixture(relative: string): string {
  return readFileSync(fileURLToPath(new URL(`../../fixtures/${relative}`, import.meta.url)), "utf8");
}

/** Runs `read`, expects it to throw a ParseError, and returns it for the caller to inspect. */
export function parseErrorOf(read: () => unknown): ParseError {
  let thrown: unknown;
  try {
    read();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(ParseError);
  return thrown as ParseError;
}
