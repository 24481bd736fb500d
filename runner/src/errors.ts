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

/**
 * A job this checkout can never run, however often it is leased here: the job's contract hash is not
 * this checkout's (invariant 4), or the checkout lacks a commit the job needs and there is no bundle to
 * fetch it from (or the bundle builds on a t0 it lacks). `work` refuses the job's loop rather than lease
 * the same job again and again; elsewhere it is an ordinary user error.
 */
export class JobRefused extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "JobRefused";
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

/**
 * The loop halted while this runner was in the middle of an iteration — another runner's report, a
 * person's `cancel` — so its candidate can no longer be judged. `run` reports the halt as its outcome;
 * elsewhere (`step`) it is said in one line, as any user error.
 */
export class LoopHaltedMeanwhile extends UserError {
  constructor(message: string) {
    super(message);
    this.name = "LoopHaltedMeanwhile";
  }
}

/** Whether an error says the loop halted meanwhile: a 409 `loop_halted` answer, or a wait that found the halt. */
export function isHaltedMeanwhile(error: unknown): boolean {
  return error instanceof LoopHaltedMeanwhile || (error instanceof CoordinatorError && error.status === 409 && error.code === "loop_halted");
}
