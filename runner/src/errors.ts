/**
 * A mistake the user can fix (bad flag, dirty tree, unreachable server): printed as one line with the
 * fix, no stack trace. `exitCode` 2 is a usage error, 1 a runtime error (DESIGN §7).
 */
export class UserError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2 = 1,
  ) {
    super(message);
    this.name = "UserError";
  }
}

/** What the coordinator answered instead of a result: a 4xx refusal, or a 5xx still there after the retries, with its JSON error envelope. */
export class CoordinatorError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "CoordinatorError";
  }
}
