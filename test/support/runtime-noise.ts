// The Workers runtime's own log lines that a passing run of the worker tests produces and that say
// nothing about the code under test. vitest-pool-workers writes workerd's logs to this process's stderr
// and drops a list of such lines itself (its `ignoreMessages`); these are the ones it does not know yet:
// - a request whose streamed body the worker refuses unread (the hostile-input and artifact tests, on
//   purpose) leaves workerd's body pump in the test isolate failing: an "exception = … pipe …" line,
//   its native stack, and "Network connection lost" as an unhandled rejection in that isolate;
// - a stored object's body the worker cancels unread (a damaged artifact is answered 404, never its
//   bytes: the artifact and receipt tests, on purpose): "… streams/internal.c++ …: pump canceled";
// - the pool's WebSocket to each test file's runner object, closed at the file's end (vitest-pool-workers
//   0.16 drops it, and needs Node 22);
// - a Durable Object alarm that ran later than scheduled on a loaded machine, or whose run was replaced by a
//   newer schedule (a test's own alarm run racing the object's).
// Everything else passes through untouched, a native stack too unless it follows a dropped line.
// LOOPWARDEN_TEST_RUNTIME_LOGS=1 shows them all.

const NOISE = [
  /^exception = kj\/async-io\.c\+\+:\d+: disconnected: (fixed-length pipe ended prematurely|read end of pipe was aborted)$/,
  /^uncaught exception; source = Uncaught \(in promise\); stack = Error: Network connection lost\.$/,
  /^exception = workerd\/api\/streams\/internal\.c\+\+:\d+: disconnected: pump canceled$/,
  /^exception = workerd\/api\/web-socket\.c\+\+:\d+: disconnected: WebSocket peer disconnected$/,
  /^NOSENTRY SQLite alarm overdue, running despite AlarmManager mismatch; /,
  /^NOSENTRY SQLite alarm handler canceled with requestScheduledAlarm\./,
];
/** A native stack line (workerd's addresses): noise only after a line that was. */
const NATIVE_STACK = /^stack:( \S+@[0-9a-f]+)+$/;

/** Whether `line` is runtime noise, given whether the line before it was. */
export function isRuntimeNoise(line: string, afterNoise: boolean): boolean {
  return NOISE.some((pattern) => pattern.test(line)) || (afterNoise && NATIVE_STACK.test(line));
}

/** Drops runtime noise from what `stream` is given to write, line by line; other writes are unchanged. */
export function quietRuntimeNoise(stream: NodeJS.WriteStream): void {
  if (process.env.LOOPWARDEN_TEST_RUNTIME_LOGS === "1") return;
  const write = stream.write.bind(stream) as (chunk: unknown, ...rest: unknown[]) => boolean;
  let afterNoise = false;
  stream.write = ((chunk: unknown, ...rest: unknown[]): boolean => {
    if (typeof chunk !== "string" && !(chunk instanceof Uint8Array)) return write(chunk, ...rest);
    const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    const lines = text.split("\n");
    const kept = lines.filter((line, index) => {
      if (line === "" && index === lines.length - 1) return true;
      const noise = isRuntimeNoise(line, afterNoise);
      afterNoise = noise;
      return !noise;
    });
    if (kept.length === lines.length) return write(chunk, ...rest);
    const remaining = kept.join("\n");
    if (remaining === "" || remaining === "\n") {
      // Nothing left to write: a write callback, when given, is still called.
      const callback = rest.find((value): value is () => void => typeof value === "function");
      callback?.();
      return true;
    }
    return write(remaining, ...rest);
  }) as typeof stream.write;
}
