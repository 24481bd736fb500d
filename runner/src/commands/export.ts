import { writeFile } from "node:fs/promises";
import path from "node:path";
import { LoopEvent } from "#shared/engine/index.js";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { UserError } from "../errors.js";
import { EXPORT_FORMATS, exportLoop, isExportFormat } from "../loop/export-formats.js";
import { emitResult, type OutputMode } from "../output.js";
import { resolveTarget } from "../coordinator/target.js";

/**
 * `loopwarden export --format F [--output FILE] [LOOP]`: the loop's history, folded from its public
 * event log, as `candidates.jsonl`, `benchmark.csv` or `results.tsv` (see `loop/export-formats.ts`). Without
 * `--output` the data goes to stdout; with `--json`, stdout is the one JSON object, so `--output` is required.
 */
export async function exportCommand(
  loopArg: string | undefined,
  options: ServerOptions & OutputMode & { cwd: string; format: string; output?: string | undefined },
): Promise<number> {
  const { format } = options;
  if (!isExportFormat(format)) throw new UserError(`--format ${format} is not an export format; use ${EXPORT_FORMATS.join(", ")}`, 2);
  if (options.json && options.output === undefined) {
    throw new UserError("with --json, stdout holds the result object: give --output FILE for the data", 2);
  }
  const { loopId, server } = await resolveTarget(loopArg, options);
  const events = await withConnection(server, options, async ({ client }) =>
    (await client.eventLines(loopId)).map((line) => LoopEvent.parse(JSON.parse(line))),
  );
  if (events.length === 0) throw new UserError(`loop ${loopId} has no events`);
  const { text, rows } = exportLoop(format, events);

  if (options.output === undefined) {
    process.stdout.write(text);
    return 0;
  }
  const output = path.resolve(options.cwd, options.output);
  try {
    await writeFile(output, text, "utf8");
  } catch (error) {
    throw new UserError(`cannot write ${options.output}: ${(error as Error).message}`);
  }
  emitResult(options, { status: "ok", loop_id: loopId, format, rows, output }, [`wrote ${rows} row(s) of ${format} to ${options.output}`]);
  return 0;
}
