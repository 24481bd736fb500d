import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { convergenceHalt, type LoopState } from "#shared/engine/index.js";

// No-convergence halts (DESIGN §6.2) are re-derived by anyone verifying a log, so the halt a log
// recorded must come out the same, word for word. The reference below is the first version: it paired
// every fixed id with every broken one of each attempt — quadratic, and a candidate that fixes and
// breaks thousands of tests made millions of pairs inside the Durable Object's CPU limit. Today's must
// answer exactly what it answered.

type Entry = LoopState["regressions_since_promotion"][number];

function reference(recent: Entry[]): string | null {
  const pairs = new Map<string, { fixed: string; broken: string; count: number }>();
  for (const entry of recent) {
    for (const fixed of entry.fixed) {
      for (const broken of entry.broken) {
        const key = JSON.stringify([fixed, broken]);
        const pair = pairs.get(key) ?? { fixed, broken, count: 0 };
        pair.count++;
        pairs.set(key, pair);
      }
    }
  }
  const asSets = recent.map((entry) => ({ fixed: new Set(entry.fixed), broken: new Set(entry.broken) }));
  for (const pair of pairs.values()) {
    const attempts = asSets.filter((entry) => entry.fixed.has(pair.fixed));
    if (pair.count >= 2 && attempts.every((entry) => entry.broken.has(pair.broken))) {
      return `unsatisfiable_constraints: fixing ${pair.fixed} broke ${pair.broken} in all ${pair.count} attempts since the last promotion: the two look mutually exclusive`;
    }
  }
  const brokenCount = new Map<string, number>();
  for (const entry of recent) for (const id of entry.broken) brokenCount.set(id, (brokenCount.get(id) ?? 0) + 1);
  for (const [id, count] of brokenCount) {
    if (count >= 2) return `oscillation_detected: ${id} passes in the promoted state but failed again in ${count} candidates since`;
  }
  return null;
}

const halted = (recent: Entry[]) => {
  const halt = convergenceHalt({ regressions_since_promotion: recent } as LoopState);
  return halt ? `${halt.halt_reason}: ${halt.detail}` : null;
};

const ids = fc.uniqueArray(fc.constantFrom("a", "b", "c", "d", "e", "f"), { maxLength: 4 }).map((list) => list.sort());
const entry = fc.record({ candidate_id: fc.constantFrom("c1", "c2"), fixed: ids, broken: ids });

describe("no-convergence halts", () => {
  it("are exactly the first version's on any history since a promotion", () => {
    fc.assert(
      fc.property(fc.array(entry, { maxLength: 6 }), (recent) => {
        expect(halted(recent)).toEqual(reference(recent));
      }),
      { numRuns: 2_000 },
    );
  });

  it("name the pair of tests that fight each other", () => {
    const recent = [
      { candidate_id: "c1", fixed: ["a", "b"], broken: ["x", "y"] },
      { candidate_id: "c2", fixed: ["b"], broken: ["y", "z"] },
    ];
    expect(halted(recent)).toBe("unsatisfiable_constraints: fixing b broke y in all 2 attempts since the last promotion: the two look mutually exclusive");
  });
});
