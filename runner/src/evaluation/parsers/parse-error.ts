/**
 * A report file that cannot be read as the format it was named as (truncated XML, an HTML error page
 * saved as `junit.xml`, TAP that bailed out...). The message names the file, says what is wrong and what
 * was expected, so the runner can print it as one line: a gate whose report cannot be read must never
 * be mistaken for a gate whose tests all passed.
 */
export class ParseError extends Error {
  /** Builds `<source>[:<line>]: <problem>`; `line` is 1-based, when the problem has one. */
  constructor(
    readonly source: string,
    readonly problem: string,
    readonly line?: number,
  ) {
    super(`${source}${line === undefined ? "" : `:${line}`}: ${problem}`);
    this.name = "ParseError";
  }
}
