import { describe, expect, it } from "vitest";
import { clopperPearsonLower, monitorLookAlpha, monitorLowerBound } from "#shared/determinism/flake-rate.js";
import { monitorHalt, withSample, type FlakeMonitor } from "#shared/engine/flake-monitor.js";
import { Contract } from "#shared/wire/contract.js";

// The in-loop flake monitor's bound (issue 28): what a user sees is when a loop halts `check_flaky`,
// so these assert the bound's shape and the exact sample at which a known sequence halts.

/** A contract with no `determinism` key: the monitor holds the check to the default 1%. */
const contract = Contract.parse({ name: "fixture", mode: "check_fixpoint", gates: [{ name: "unit", run: "npm test" }], agent: { run: "agent" } });

const EMPTY: FlakeMonitor = { samples: 0, deviations: 0, flips: {}, flips_untracked: 0 };

/** The first sample (from 1) after which the monitor halts, feeding it `samples` samples; null when none does. */
function haltingSample(samples: number, deviates: (sample: number) => boolean): number | null {
  let monitor = EMPTY;
  for (let sample = 1; sample <= samples; sample++) {
    monitor = withSample(monitor, { run: `run ${sample}`, changed: deviates(sample) ? ["gate:unit"] : [] });
    if (monitorHalt(contract, monitor) !== null) return sample;
  }
  return null;
}

describe("the flake monitor's lower bound (DESIGN §6.5)", () => {
  it("is 0 with no deviation, at every look", () => {
    for (const n of [1, 2, 10, 100, 1000]) {
      expect(clopperPearsonLower(0, n)).toBe(0);
      expect(monitorLowerBound(0, n)).toBe(0);
    }
  });

  it("grows with the deviations among the same runs", () => {
    for (const bound of [clopperPearsonLower, monitorLowerBound]) {
      const bounds = Array.from({ length: 51 }, (_, k) => bound(k, 50));
      for (let k = 1; k <= 50; k++) expect(bounds[k]).toBeGreaterThan(bounds[k - 1] ?? Number.NaN);
    }
  });

  it("falls as runs without a deviation accumulate", () => {
    for (const bound of [clopperPearsonLower, monitorLowerBound]) {
      const bounds = Array.from({ length: 500 }, (_, i) => bound(3, i + 3));
      for (let i = 1; i < bounds.length; i++) expect(bounds[i]).toBeLessThan(bounds[i - 1] ?? Number.NaN);
    }
  });

  it("is more conservative than a single look's 95% bound, since each look spends only its share of the 5%", () => {
    for (const n of [1, 2, 5, 20, 100, 1000]) {
      for (const k of [1, Math.ceil(n / 10), Math.ceil(n / 2), n]) {
        expect(monitorLowerBound(k, n)).toBeLessThan(clopperPearsonLower(k, n));
      }
    }
  });

  it("after n deviations in n runs is the look's error to the power 1/n: one deviating first run already shows 3.04%", () => {
    expect(monitorLowerBound(1, 1)).toBeCloseTo(0.3 / Math.PI ** 2, 12);
    for (const n of [1, 2, 3, 10]) expect(monitorLowerBound(n, n)).toBeCloseTo(monitorLookAlpha(n) ** (1 / n), 12);
  });
});

describe("when the monitor halts a loop at the default 1%", () => {
  it("never, without a deviation, however many runs agree", () => {
    expect(haltingSample(1000, () => false)).toBeNull();
  });

  it("at once, when the first run whose outcome was known deviated", () => {
    expect(haltingSample(1, () => true)).toBe(1);
  });

  it("at the 20th sample when every fifth deviates (a 20% flake rate), and not at the 19th", () => {
    let monitor = EMPTY;
    for (let sample = 1; sample <= 19; sample++) {
      monitor = withSample(monitor, { run: `run ${sample}`, changed: sample % 5 === 0 ? ["gate:unit"] : [] });
      expect(monitorHalt(contract, monitor)).toBeNull();
    }
    monitor = withSample(monitor, { run: "run 20", changed: ["gate:unit"] });
    expect(monitor).toMatchObject({ samples: 20, deviations: 4 });
    expect(monitorHalt(contract, monitor)).toMatchObject({ halt_reason: "check_flaky", exit_class: 14 });
    expect(monitorHalt(contract, monitor)?.detail).toMatch(/^4 of 20 run\(s\) .* at least 1\.2%, above determinism\.max_flake_rate 1\.0%/);
    expect(monitorLowerBound(4, 20)).toBeGreaterThan(0.01);
    expect(monitorLowerBound(3, 19)).toBeLessThanOrEqual(0.01);
  });
});
