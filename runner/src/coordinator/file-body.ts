import { createHash } from "node:crypto";
import type { Stats } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";

// A file (or a range of it) as a request body that can be streamed again for each attempt, read from
// disk in large pieces into a few buffers reused in turn (issue 30). An upload's digest must be known
// before its first byte is sent: the intent names it, storage keys the object by it and a presigned PUT
// signs it (DESIGN §10) — so a file is read twice, once to hash it and once to send it, both in large
// pieces: 64 KiB reads (fs.openAsBlob's stream) took 2–3× as long as 1 MiB ones.

/** How much is read from disk at a time, for the digest and for sending. */
export const FILE_READ_BYTES = 1024 * 1024;

/**
 * The buffers one stream of a file reads into, in turn: a buffer is refilled only after the two chunks
 * read since it was handed on. Node's fetch (undici) writes each chunk of a body out before it asks for
 * the next one, so a chunk is long gone by then. Fresh buffers would leave every chunk sent to the
 * garbage collector, which in a fetch upload let a 500 MiB file's worth pile up before it ran.
 */
const RING_BUFFERS = 3;

/** A request body: what a request streams (again for each attempt) and declares the length of. */
export interface BodySource {
  readonly size: number;
  stream(): ReadableStream<Uint8Array>;
}

/** A body an upload can cut into parts (a Blob is one too). */
export interface Uploadable extends BodySource {
  slice(start: number, end: number): Uploadable;
}

/** What tells one version of a file from another: a write changes its modification time or size. */
interface FileVersion {
  readonly size: number;
  readonly mtimeMs: number;
  readonly ino: number;
}

const versionOf = (stats: Stats): FileVersion => ({ size: stats.size, mtimeMs: stats.mtimeMs, ino: stats.ino });

/** The file is no longer the one that was hashed: sending it would send other bytes under that digest. */
export class FileChanged extends Error {
  constructor(file: string, how: string) {
    super(`${file} ${how} since it was hashed`);
    this.name = "FileChanged";
  }
}

/** A range of a file, as it was when hashed: each stream checks the file is still that version. */
export class FileBody implements Uploadable {
  readonly size: number;

  constructor(
    readonly file: string,
    private readonly version: FileVersion,
    private readonly start = 0,
    private readonly end = version.size,
  ) {
    this.size = end - start;
  }

  slice(start: number, end: number): FileBody {
    return new FileBody(this.file, this.version, this.start + start, Math.min(this.start + end, this.end));
  }

  /** Throws when the open file is not the version hashed (written since, replaced, cut short). */
  private async check(handle: FileHandle): Promise<void> {
    const now = versionOf(await handle.stat());
    if (now.ino !== this.version.ino || now.size !== this.version.size || now.mtimeMs !== this.version.mtimeMs) throw new FileChanged(this.file, "changed");
  }

  /**
   * The range's bytes, read as asked for (no read-ahead), in chunks of at most FILE_READ_BYTES that stay
   * valid until two more are read (RING_BUFFERS): a consumer must be done with a chunk by then, as fetch is.
   */
  stream(): ReadableStream<Uint8Array> {
    let handle: FileHandle | null = null;
    let position = this.start;
    const ring: Buffer[] = [];
    let turn = 0;
    const close = async () => {
      const open = handle;
      handle = null;
      await open?.close();
    };
    return new ReadableStream<Uint8Array>(
      {
        pull: async (controller) => {
          try {
            if (!handle) {
              handle = await open(this.file, "r");
              await this.check(handle);
            }
            if (position >= this.end) {
              await close();
              controller.close();
              return;
            }
            const slot = turn++ % RING_BUFFERS;
            const buffer = (ring[slot] ??= Buffer.allocUnsafe(Math.min(FILE_READ_BYTES, this.size)));
            const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.byteLength, this.end - position), position);
            if (bytesRead === 0) throw new FileChanged(this.file, "was cut short");
            position += bytesRead;
            // Checked again before the last bytes go: a file written while it was sent never arrives whole.
            if (position >= this.end) await this.check(handle);
            controller.enqueue(buffer.subarray(0, bytesRead));
          } catch (error) {
            await close().catch(() => undefined);
            throw error;
          }
        },
        cancel: close,
      },
      { highWaterMark: 0 },
    );
  }
}

/**
 * A file's SHA-256, read once in large pieces into one buffer, and the file as a body to send: the
 * version hashed (taken before the first read), so a file written since is never sent under this digest.
 */
export async function hashFile(file: string): Promise<{ sha256: string; body: FileBody }> {
  const handle = await open(file, "r");
  try {
    const version = versionOf(await handle.stat());
    const hash = createHash("sha256");
    const buffer = Buffer.allocUnsafe(Math.max(1, Math.min(FILE_READ_BYTES, version.size)));
    // The size taken before reading bounds the digest: bytes appended since make another version, refused when sent.
    for (let position = 0; position < version.size;) {
      const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.byteLength, version.size - position), position);
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
      position += bytesRead;
    }
    return { sha256: hash.digest("hex"), body: new FileBody(file, version) };
  } finally {
    await handle.close();
  }
}
