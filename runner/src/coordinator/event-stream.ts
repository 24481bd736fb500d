import { createParser, type EventSourceMessage } from "eventsource-parser";
import { LoopEvent } from "#shared/engine/events.js";
import type { Client } from "./client.js";

// A loop's event log followed live (DESIGN §8: `GET /v1/loops/:id/events` as Server-Sent Events), for
// `loopwarden watch`: one connection that the coordinator pushes each event down as it is appended —
// never a poll. A connection that drops (a restarted coordinator, a network blip) is opened again with
// `Last-Event-ID` set to the last event handled, so nothing is missed and nothing is handled twice.
// eventsource-parser (a small, maintained SSE parser) reads the stream: Node's fetch has no EventSource.

/** How long to wait before opening a dropped stream again (unless the coordinator said otherwise with `retry:`). */
const RECONNECT_MS = 1_000;

/** The messages of one SSE response body, in order. */
async function* messagesOf(body: ReadableStream<Uint8Array>, onRetry: (ms: number) => void): AsyncGenerator<EventSourceMessage> {
  const queue: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (message) => queue.push(message), onRetry });
  const decoder = new TextDecoder();
  for await (const chunk of body) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    while (queue.length > 0) {
      const message = queue.shift();
      if (message) yield message;
    }
  }
}

/**
 * Follows the log of `loopId` after event `after`: `handle` gets each event once, in order, and answers
 * true to stop. A stream the coordinator ends (each lasts at most ten minutes) is opened again at once
 * from the last event handled; `onDropped` is told when a connection failed (it is then opened again
 * after the coordinator's `retry:` interval). An error opening it (the loop unknown, a token refused)
 * is thrown. Answers the last event's `seq`.
 */
export async function followEvents(
  client: Client,
  loopId: string,
  after: number,
  handle: (event: LoopEvent) => Promise<boolean> | boolean,
  onDropped: (why: string) => void = () => undefined,
): Promise<number> {
  let last = after;
  let reconnectMs = RECONNECT_MS;
  for (;;) {
    const body = await client.eventStream(loopId, last);
    const from = last;
    const messages = messagesOf(body, (ms) => (reconnectMs = ms));
    let dropped = false;
    try {
      for (;;) {
        // Only reading the connection can fail as a dropped connection does. An event that is not one
        // (malformed, or of a type this runner does not know), a gap, or a failure of `handle` is thrown:
        // opening the stream again would meet the same thing again, for ever.
        let next: IteratorResult<EventSourceMessage>;
        try {
          next = await messages.next();
        } catch (error) {
          onDropped((error as Error).message);
          dropped = true;
          break;
        }
        if (next.done) break;
        const event = LoopEvent.parse(JSON.parse(next.value.data));
        // Never twice: a reconnect starts after the last event handled, and a stale event is skipped.
        if (event.seq <= last) continue;
        if (event.seq !== last + 1) throw new Error(`the stream skipped from event ${last} to ${event.seq}`);
        last = event.seq;
        if (await handle(event)) return last;
      }
    } finally {
      // Closes the connection, however this ends: the reader holds the body, so it is the one to cancel it.
      await messages.return(undefined).catch(() => undefined);
    }
    // Ended by the coordinator (its streams are bounded): read on from here, at once unless it ended
    // without a single event (then after the retry interval, so a coordinator that keeps ending streams
    // at once is not asked again and again).
    if (!dropped && last > from) continue;
    await new Promise((resolve) => setTimeout(resolve, reconnectMs));
  }
}
