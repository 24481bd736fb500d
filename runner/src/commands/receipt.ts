import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { fetchReceipt } from "../receipts/receipt-documents.js";
import { emitResult, type OutputMode } from "../output.js";
import { resolveTarget } from "../coordinator/target.js";

/**
 * `loopwarden receipt [LOOP] [--save DIR]`: issues an interim receipt over the loop's log as it is now
 * (DESIGN §9) and prints its public URL. With --save, also writes the receipt's three documents — the
 * envelope, the log it signs and the key set — for verifying offline (`verify FILE --events … --key …`).
 */
export async function receiptCommand(
  loopArg: string | undefined,
  options: ServerOptions & OutputMode & { cwd: string; save?: string | undefined },
): Promise<number> {
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const issued = await connection.client.issueReceipt(loopId);
    const saved: string[] = [];
    if (options.save !== undefined) {
      const dir = path.resolve(options.cwd, options.save);
      const documents = await fetchReceipt(issued.url);
      await mkdir(dir, { recursive: true });
      const files = {
        [`${issued.receipt_id}.json`]: documents.envelopeText,
        [`${issued.receipt_id}.events.jsonl`]: documents.eventsText,
        "keys.json": documents.keysText,
      };
      for (const [name, text] of Object.entries(files)) {
        await writeFile(path.join(dir, name), text);
        saved.push(path.join(dir, name));
      }
    }
    const [envelopeFile, eventsFile, keysFile] = saved;
    emitResult(options, { status: "ok", loop_id: loopId, receipt_url: issued.url, receipt_id: issued.receipt_id, head: issued.head, saved }, [
      `receipt ${issued.receipt_id}: loop ${loopId}, events 1-${issued.head.seq}`,
      `  ${issued.url}`,
      `  verify: loopwarden verify ${issued.url}`,
      ...(envelopeFile && eventsFile && keysFile
        ? [`  saved; verify offline: loopwarden verify ${envelopeFile} --events ${eventsFile} --key ${keysFile}`]
        : []),
      ...(connection.ephemeral
        ? [
            `  (the local coordinator started for this command stops with it: \`loopwarden serve\` serves this receipt at http://127.0.0.1:8787/r/${issued.receipt_id}, or use --save DIR)`,
          ]
        : []),
    ]);
    return 0;
  });
}
