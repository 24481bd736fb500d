// Versioned schema migrations of the LoopObject's own SQLite, applied in order and recorded in
// `_schema`. Append new versions; never edit a released one.
export const LOOP_OBJECT_MIGRATIONS: readonly string[] = [
  `CREATE TABLE events (
     seq INTEGER PRIMARY KEY,
     type TEXT NOT NULL,
     at TEXT NOT NULL,
     body TEXT NOT NULL,
     hash TEXT NOT NULL
   );
   CREATE TABLE snapshot (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     state TEXT NOT NULL,
     head_seq INTEGER NOT NULL,
     head_hash TEXT NOT NULL
   );
   CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
   CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL);`,
  // The state is a fold over the events, refolded when the object wakes (linear in the log): one row
  // holding the whole state grew with the loop until SQLite's 2 MB row limit stopped it for good.
  `DROP TABLE snapshot;`,
  // An event's body longer than a row should hold (t0 of a 100,000-test suite is several MB; SQLite's
  // limit is 2 MB) is stored in parts of at most EVENT_PART_CHARS characters; its `events` row keeps
  // an empty body and the number of parts.
  `ALTER TABLE events ADD COLUMN parts INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE event_parts (
     seq INTEGER NOT NULL,
     part INTEGER NOT NULL,
     body TEXT NOT NULL,
     PRIMARY KEY (seq, part)
   );`,
];
