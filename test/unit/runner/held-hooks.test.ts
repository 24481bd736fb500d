import { describe, expect, it } from "vitest";
import { heldHooks } from "../../../runner/src/evaluation/evaluation.js";

// An evaluation begun before its job was leased speaks before its label (the candidate's id) is known:
// its lines are held, then printed in order under the job's label once it is adopted, never lost.
describe("heldHooks", () => {
  it("holds every call until bound, replays them in order, then forwards the rest at once", () => {
    const held = heldHooks();
    const gate = { name: "unit", run: "true", timeout: "1m" };
    held.hooks.onNote("first");
    held.hooks.onGateStart(gate);
    const heard: string[] = [];
    const target = { onNote: (text: string) => heard.push(`note ${text}`), onGateStart: (started: typeof gate) => heard.push(`start ${started.name}`) };
    expect(heard).toEqual([]);
    held.bind(target);
    expect(heard).toEqual(["note first", "start unit"]);
    held.hooks.onNote("after");
    expect(heard).toEqual(["note first", "start unit", "note after"]);
  });

  it("drops nothing when the bound hooks lack one kind of call", () => {
    const held = heldHooks();
    held.hooks.onGateStart({ name: "unit", run: "true", timeout: "1m" });
    held.hooks.onNote("kept");
    const heard: string[] = [];
    held.bind({ onNote: (text) => heard.push(text) });
    expect(heard).toEqual(["kept"]);
  });
});
