// With LOOPWARDEN_TIMINGS=1 the runner prints, after each iteration, where its time went: each phase's
// wall time, and the process spawns and HTTP requests it made (DESIGN §12: the coordinator's cost per
// iteration next to the work it coordinates). `npm run bench:overhead` reads these lines for its
// per-phase table. Off, every call here is a no-op.

const ENABLED = process.env.LOOPWARDEN_TIMINGS === "1";

interface Tally {
  phases: Map<string, number>;
  spawns: number;
  requests: number;
  started: number;
}

function fresh(): Tally {
  return { phases: new Map(), spawns: 0, requests: 0, started: performance.now() };
}

// The first count begins with the process (performance.now()'s origin), so it includes loading the CLI.
let tally: Tally = { ...fresh(), started: 0 };

/** Counts one process the runner started (git, a gate, the agent…). */
export function countSpawn(): void {
  if (ENABLED) tally.spawns++;
}

/** Counts one HTTP request to the coordinator or storage (each retry is one more). */
export function countRequest(): void {
  if (ENABLED) tally.requests++;
}

/** Runs `work`, adding its wall time to `phase` (phases may repeat; nested ones are counted in both). */
export async function timed<T>(phase: string, work: () => Promise<T>): Promise<T> {
  if (!ENABLED) return work();
  const started = performance.now();
  try {
    return await work();
  } finally {
    tally.phases.set(phase, (tally.phases.get(phase) ?? 0) + performance.now() - started);
  }
}

/**
 * The line for what was counted since the last one (one iteration), then starts counting afresh;
 * null when timings are off. Format: `timings: total=412 agent=101 … spawns=14 requests=7` (ms).
 */
export function takeTimings(): string | null {
  if (!ENABLED) return null;
  const fields = [
    `total=${Math.round(performance.now() - tally.started)}`,
    ...[...tally.phases].map(([phase, ms]) => `${phase}=${Math.round(ms)}`),
    `spawns=${tally.spawns}`,
    `requests=${tally.requests}`,
  ];
  const line = `timings: ${fields.join(" ")}`;
  tally = fresh();
  return line;
}
