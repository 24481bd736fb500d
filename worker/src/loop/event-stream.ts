import type { LoopEventStore } from "./loop-event-store.js";

// A loop's event log as Server-Sent Events (DESIGN §8: `GET /v1/loops/:id/events` with
// `Accept: text/event-stream`), for live pages and `loopwarden watch`: every event after the reader's
// last one (`Last-Event-ID`, or `?after=`), then each new one as it is appended, never polled. Each SSE
// event's id is the event's `seq` and its data the event exactly as stored (the bytes that were hashed),
// so a reader that reconnects with the last id it saw misses nothing and gets nothing twice.

/** Events sent per page while catching up. */
const PAGE = 500;
/** A comment line this often while nothing is appended, so proxies and readers know the stream lives. */
const KEEPALIVE_MS = 20_000;
/**
 * The longest one stream stays open: then it ends, and its reader reconnects from its last id. An open
 * stream keeps its LoopObject in memory; a bounded one lets an idle object be evicted between readers.
 */
export const STREAM_MAX_MS = 10 * 60_000;

/** The stream of the log after `after`, open until its reader goes away or `maxMs` has passed. */
export function streamEvents(store: LoopEventStore, after: number, maxMs = STREAM_MAX_MS): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const writer = writable.getWriter();
  const pump = async () => {
    const endAt = Date.now() + maxMs;
    let cursor = after;
    // Tells the reader how long to wait before it reconnects after a dropped connection.
    await writer.write(encoder.encode("retry: 1000\n\n"));
    for (;;) {
      const page = store.eventsPage(cursor, PAGE);
      // Events are numbered from 1 without gaps: the first after `cursor` is cursor + 1.
      for (const line of page.events) {
        cursor += 1;
        await writer.write(encoder.encode(`id: ${cursor}\ndata: ${line}\n\n`));
      }
      if (page.more) continue;
      const seq = store.head?.seq ?? 0;
      if (seq > cursor) continue;
      if (Date.now() >= endAt) return writer.close();
      await store.nextAppend(Math.min(KEEPALIVE_MS, Math.max(0, endAt - Date.now())));
      if ((store.head?.seq ?? 0) <= cursor) await writer.write(encoder.encode(": keep-alive\n\n"));
    }
  };
  // Ends when a write fails: the reader went away (or the object is shutting down).
  pump().catch(() => writer.abort().catch(() => undefined));
  return readable;
}
