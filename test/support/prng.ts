// A seeded pseudo-random generator for simulations in tests and benches: the same seed always gives the
// same stream, so a measured rate is a fixed number that a test can assert and a reader can reproduce.

/** Uniform numbers in (0, 1) from mulberry32 (a 32-bit state, period 2^32; plenty for simulations). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    // +0.5 keeps the value strictly inside (0, 1), so Box-Muller's log never sees 0.
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
}

/** Standard normal numbers from a uniform source by the Box-Muller transform (both values of each draw used). */
export function gaussian(uniform: () => number): () => number {
  let spare: number | null = null;
  return () => {
    if (spare !== null) {
      const value = spare;
      spare = null;
      return value;
    }
    const radius = Math.sqrt(-2 * Math.log(uniform()));
    const angle = 2 * Math.PI * uniform();
    spare = radius * Math.sin(angle);
    return radius * Math.cos(angle);
  };
}
