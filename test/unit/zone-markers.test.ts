import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { processesWith } from "../support/zone-markers.js";

// The tests' way of finding what is left running (test/support/zone-markers.ts): a check that nothing
// survived is only worth as much as the query behind it.

describe("processesWith", () => {
  it("finds a process by a marker that begins with a dash, as a workerd argument does", async () => {
    const marker = `--socket-addr=entry=127.0.0.1:${process.pid}`;
    const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 30_000)", "--", marker], { stdio: "ignore" });
    try {
      await new Promise((resolve) => child.once("spawn", resolve));
      const found = processesWith(marker);
      expect(found.map((line) => Number(line.split(" ")[0]))).toEqual([child.pid]);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("answers none when nothing carries the marker", () => {
    expect(processesWith(`loopwarden-no-such-process-${process.pid}-${Date.now()}`)).toEqual([]);
  });
});
