import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import * as z from "zod";
import { sha256Hex } from "#shared/hash.js";
import { UploadedPart } from "#shared/wire/api.js";
import { Sha256 } from "#shared/wire/observation.js";
import { isProcessAlive } from "../process/processes.js";

// Multipart uploads in progress, recorded on disk (`.loopwarden/uploads/` in the runner's checkout) so a
// runner that died mid-upload — killed, crashed, its machine restarted — is not the end of the parts it
// sent: the next upload of the same bytes to the same loop resumes the upload, sending only the parts
// not recorded, and an upload nobody resumes is aborted by the next runner that finds its record stale.
// A record holds the upload's URLs: in S3 mode presigned ones, so the files are the user's alone (0600);
// and since an agent can write there too, a record is used only when its URLs are this upload's own.

/** One multipart upload in progress, as the client that began it last saw it. */
export const UploadRecord = z.strictObject({
  version: z.literal(1),
  /** The coordinator's base URL: a record is only ever resumed or aborted there. */
  server: z.string().min(1),
  loop_id: z.string().min(1),
  sha256: Sha256,
  size: z.number().int().min(0),
  name: z.string().min(1),
  upload_id: z.string().min(1).max(1_000),
  part_size: z.number().int().min(1),
  part_urls: z.array(z.string()).min(1).max(10_000),
  complete_url: z.string(),
  abort_url: z.string(),
  /** The parts storage took, with their ETags, in ascending order. */
  parts: z.array(UploadedPart).max(10_000),
  /** The process sending it: a live one's upload is never taken over. */
  pid: z.number().int(),
  /** When it was last written (ISO 8601). */
  updated_at: z.string(),
});
export type UploadRecord = z.infer<typeof UploadRecord>;

/**
 * Whether a record's URLs are the ones the coordinator gives this upload: its own paths for this loop,
 * digest and upload id (which the client sends with its token), or presigned storage URLs (sent without
 * it). A record lives where an agent can write, so one naming any other coordinator route — a way to have
 * the runner send its token to a route of the agent's choosing — is never used.
 */
export function hasUploadUrls(record: UploadRecord): boolean {
  if (!/^[A-Za-z0-9_-]{1,100}$/.test(record.loop_id)) return false;
  const base = `/v1/loops/${record.loop_id}/artifacts/${record.sha256}/uploads/${encodeURIComponent(record.upload_id)}`;
  const parts = Math.max(1, Math.ceil(record.size / record.part_size));
  return (
    record.complete_url === `${base}/complete` &&
    record.abort_url === base &&
    record.part_urls.length === parts &&
    record.part_urls.every((url, index) => url === `${base}/parts/${index + 1}` || /^https?:\/\//.test(url))
  );
}

/** A record untouched this long, of a process that is gone, is aborted rather than kept for a resume. */
export const STALE_RECORD_MS = 24 * 60 * 60 * 1_000;

/** The multipart uploads recorded in one directory. */
export class UploadRecords {
  constructor(readonly dir: string) {}

  private file(record: Pick<UploadRecord, "server" | "loop_id" | "sha256" | "upload_id">): string {
    return path.join(this.dir, `${sha256Hex(`${record.server}\n${record.loop_id}\n${record.sha256}\n${record.upload_id}`).slice(0, 32)}.json`);
  }

  /** Writes (or rewrites) a record, atomically: a reader sees the old one or the new one, never half. */
  async save(record: Omit<UploadRecord, "version" | "pid" | "updated_at">): Promise<void> {
    const full: UploadRecord = { version: 1, ...record, pid: process.pid, updated_at: new Date().toISOString() };
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const file = this.file(full);
    const temporary = `${file}.${randomBytes(6).toString("hex")}.tmp`;
    await writeFile(temporary, `${JSON.stringify(full)}\n`, { mode: 0o600 });
    await rename(temporary, file);
  }

  async remove(record: Pick<UploadRecord, "server" | "loop_id" | "sha256" | "upload_id">): Promise<void> {
    await rm(this.file(record), { force: true });
  }

  /** Every readable record; a file that is not one (cut short, another version) is left alone. */
  private async all(): Promise<{ file: string; record: UploadRecord }[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const found: { file: string; record: UploadRecord }[] = [];
    for (const name of names.filter((entry) => entry.endsWith(".json"))) {
      const file = path.join(this.dir, name);
      const text = await readFile(file, "utf8").catch(() => null);
      if (text === null) continue;
      try {
        const parsed = UploadRecord.safeParse(JSON.parse(text));
        if (parsed.success && hasUploadUrls(parsed.data)) found.push({ file, record: parsed.data });
        // A record with URLs that are not this upload's was not written by a runner: it is removed unused.
        else if (parsed.success) await rm(file, { force: true });
      } catch {
        // Not JSON: not a record.
      }
    }
    return found;
  }

  /**
   * Takes over a record of an upload to `server` that no live sender holds: one of a process that is
   * gone, or one this process left (`active` lists the uploads it is sending now). Claimed by renaming
   * its file, so of two runners that find it at once only one resumes it.
   */
  async claim(
    server: string,
    matches: (record: UploadRecord) => boolean,
    active: ReadonlySet<string>,
    now = Date.now(),
  ): Promise<{ resume: UploadRecord | null; stale: UploadRecord[] }> {
    let resume: UploadRecord | null = null;
    const stale: UploadRecord[] = [];
    for (const { file, record } of await this.all()) {
      if (record.server !== server) continue;
      const held = record.pid === process.pid ? active.has(record.upload_id) : isProcessAlive(record.pid);
      if (held) continue;
      const isMatch = resume === null && matches(record);
      const isStale = !isMatch && now - Date.parse(record.updated_at) > STALE_RECORD_MS;
      if (!isMatch && !isStale) continue;
      const claimed = `${file}.claimed-${process.pid}-${randomBytes(6).toString("hex")}`;
      try {
        await rename(file, claimed);
      } catch {
        continue; // another runner took it first
      }
      await rm(claimed, { force: true });
      if (isMatch) resume = record;
      else stale.push(record);
    }
    return { resume, stale };
  }
}
