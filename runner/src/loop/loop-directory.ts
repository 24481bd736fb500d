import type { LoopSummary } from "#shared/wire/api.js";
import { CoordinatorError, type Client } from "../coordinator/client.js";

// The loops a `work` runner serves (commands/work.ts): the one `--loop` names, or every loop of its team
// pinned to its checkout's contract — those awaiting their baseline first, then the running ones — read
// again now and then, each served in turn, and those whose jobs this checkout can never run set aside.

/** How often the list of loops to serve is read again while none has a job. */
export const RELIST_MS = 10_000;

/** The loops this runner serves: the one named, or those pinned to its contract (awaiting a baseline, or running), re-read now and then. */
export class LoopDirectory {
  private loops: string[] = [];
  private readAt = 0;
  private turn = 0;
  /** The read in flight, which every slot asking meanwhile waits for (none sees the list before it is read). */
  private reading: Promise<void> | null = null;
  /** Loops whose jobs this checkout can never run (`JobRefused`), by id, with why: not served again by this process. */
  private readonly refused = new Map<string, string>();
  /** The named loop's summary when it was last read and was not running (`--loop`): why there is nothing more to do. */
  halted: LoopSummary | null = null;

  constructor(
    private readonly client: Client,
    private readonly contractHash: string,
    private readonly only: string | undefined,
  ) {}

  /** The next loop to ask for a job (in turn, so every loop is served), or null when none is running. */
  async next(): Promise<string | null> {
    if (this.reading || Date.now() - this.readAt > RELIST_MS) await this.read();
    const loops = this.loops.filter((loopId) => !this.refused.has(loopId));
    if (loops.length === 0) return null;
    return loops[this.turn++ % loops.length] ?? null;
  }

  /** Reads the list again at the next `next()` (a loop halted, or answered 404). */
  stale(): void {
    this.readAt = 0;
  }

  /** Serves the loop no more (this checkout cannot run its jobs). */
  refuse(loopId: string, why: string): void {
    this.refused.set(loopId, why);
  }

  private read(): Promise<void> {
    this.reading ??= this.refresh().finally(() => (this.reading = null));
    return this.reading;
  }

  private async refresh(): Promise<void> {
    if (this.only !== undefined) {
      const loop = await namedLoop(this.client, this.only);
      this.loops = loop === "awaiting_baseline" || loop.status === "running" ? [this.only] : [];
      this.halted = loop === "awaiting_baseline" || loop.status === "running" ? null : loop;
    } else {
      // Loops awaiting their baseline first: their first job is t0, which every later job compares with.
      const found: string[] = [];
      for (const status of ["awaiting_baseline", "running"] as const) {
        let cursor: string | undefined;
        do {
          const page = await this.client.listLoops({ status, contract_hash: this.contractHash, limit: 100, ...(cursor ? { cursor } : {}) });
          found.push(...page.loops.map((loop) => loop.loop_id));
          cursor = page.next_cursor ?? undefined;
        } while (cursor);
      }
      this.loops = found;
    }
    // Only a list that was read counts as fresh: a failed read is tried again at the next `next()`.
    this.readAt = Date.now();
  }
}

/** A loop's summary, or `awaiting_baseline` while it has no log yet (a runner is to measure its t0). */
export async function namedLoop(client: Client, loopId: string): Promise<LoopSummary | "awaiting_baseline"> {
  try {
    return await client.getLoop(loopId);
  } catch (error) {
    if (error instanceof CoordinatorError && error.code === "awaiting_baseline") return "awaiting_baseline";
    throw error;
  }
}
