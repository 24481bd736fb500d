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
