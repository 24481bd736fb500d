import { describe, expect, it } from "vitest";
import { isRuntimeNoise } from "../support/runtime-noise.js";

// The worker tests' output filter (test/support/runtime-noise.ts) drops only the runtime lines it names:
// an error of the code under test, and its stack, still show.

/** What survives of `lines`, filtered in order as the stream filter does. */
function kept(lines: string[]): string[] {
  let afterNoise = false;
  return lines.filter((line) => {
    afterNoise = isRuntimeNoise(line, afterNoise);
    return !afterNoise;
  });
}

describe("runtime noise filter", () => {
  it("drops a refused body's pipe exception, its native stack and the lost connection", () => {
    expect(
      kept([
        "exception = kj/async-io.c++:1713: disconnected: fixed-length pipe ended prematurely",
        "stack: /x/workerd@51de6ea /x/workerd@51de8b9",
        "uncaught exception; source = Uncaught (in promise); stack = Error: Network connection lost.",
        "exception = workerd/api/web-socket.c++:821: disconnected: WebSocket peer disconnected",
        "exception = workerd/api/streams/internal.c++:2349: disconnected: pump canceled",
        "stack: /x/workerd@3158c13 /x/workerd@2f2d500",
      ]),
    ).toEqual([]);
  });

  it("keeps any other exception and the stack that follows it", () => {
    const lines = [
      "uncaught exception; source = Uncaught (in promise); stack = TypeError: cannot read properties of undefined",
      "stack: /x/workerd@51de6ea /x/workerd@51de8b9",
      "exception = kj/async-io.c++:1713: disconnected: something else",
      "stack: /x/workerd@51de6ea",
    ];
    expect(kept(lines)).toEqual(lines);
  });
});
