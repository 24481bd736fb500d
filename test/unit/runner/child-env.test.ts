import { describe, expect, it } from "vitest";
import { childEnv } from "../../../runner/src/evaluation/environment.js";

// Invariant 1: an agent never talks to the coordinator with the runner's credentials. Every process the
// runner starts (the agent, gates, the metric) gets its environment without any of them.

describe("childEnv", () => {
  it("passes on no credential the runner holds: its token, the owner token, the server, storage keys", () => {
    const env = childEnv(
      { LOOPWARDEN_ITERATION: "3" },
      {
        PATH: "/usr/bin",
        LOOPWARDEN_TOKEN: "lwt_team",
        LOOPWARDEN_OWNER_TOKEN: "lwo_owner",
        LOOPWARDEN_SERVER: "https://coordinator.example",
        LOOPWARDEN_S3_ACCESS_KEY_ID: "key",
        LOOPWARDEN_S3_SECRET_ACCESS_KEY: "secret",
        LOOPWARDEN_FAULT: "create-saved",
      },
    );
    expect(env).toEqual({ PATH: "/usr/bin", LOOPWARDEN_ITERATION: "3" });
  });
});
