import { createWriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createHash, type Hash } from "node:crypto";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { foldEvents, LoopEvent, type LoopState } from "#shared/engine/index.js";
import type { ArtifactRef } from "#shared/wire/observation.js";
import type { Client } from "../coordinator/client.js";
import { describeArtifactError } from "../evaluation/artifact-files.js";
import { evaluatedFor } from "../loop/candidate-evidence.js";
import { failingGateOf, gateFailed, gateOutcome, storedFilesOf } from "#shared/explain/gate-failure.js";
import { withConnection, type ServerOptions } from "../coordinator/connect.js";
import { stdoutClosed } from "../process/shutdown.js";
import { UserError } from "../errors.js";
import { emitResult, progress, type OutputMode } from "../output.js";
import { resolveTarget } from "../coordinator/target.js";

// `loopwarden logs` and `loopwarden artifacts` (DESIGN §10): what an evaluation stored — a candidate's or
// t0's: each gate's output, the metric command's, the contract's artifacts — read back from the coordinator.

type Options = ServerOptions & OutputMode & { cwd: string };

async function loopState(client: Client, loopId: string): Promise<LoopState> {
  const state = foldEvents((await client.eventLines(loopId)).map((line) => LoopEvent.parse(JSON.parse(line))));
  if (!state) throw new UserError(`loop ${loopId} has no events`);
  return state;
}

/**
 * `logs [CANDIDATE] [LOOP] [--gate NAME | --metric]`: the stored output of a candidate's (or t0's) gate,
 * streamed to stdout. By default the latest evaluated candidate, and its first failing gate — a failed
 * hard gate before a failed soft one — else, when every gate passed, its last gate.
 */
export async function logsCommand(
  candidateArg: string | undefined,
  loopArg: string | undefined,
  options: Options & { gate?: string | undefined; metric?: boolean | undefined },
): Promise<number> {
  if (options.gate !== undefined && options.metric) throw new UserError("give --gate NAME or --metric, not both", 2);
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const evaluated = evaluatedFor(await loopState(connection.client, loopId), candidateArg);
    const { gates } = evaluated;
    let ref: ArtifactRef | null;
    let what: string;
    if (options.metric) {
      ref = evaluated.artifacts.find((artifact) => artifact.name === "metric.log") ?? null;
      what = "the metric command's output";
      if (!ref) throw new UserError(`${evaluated.id} has no stored metric output (its metric did not run, or its runner predates metric logs)`);
    } else {
      const gate = options.gate !== undefined ? gates.find((entry) => entry.name === options.gate) : (failingGateOf(gates) ?? gates.at(-1));
      if (!gate) {
        throw new UserError(
          options.gate !== undefined
            ? `${evaluated.id} ran no gate ${options.gate} (it ran: ${gates.map((entry) => entry.name).join(", ") || "none"})`
            : `${evaluated.id} ran no gate`,
        );
      }
      ref = gate.log;
      what = `gate ${gate.name} (${gateFailed(gate) ? gateOutcome(gate) : "passed"})`;
      if (!ref) {
        const why = evaluated.artifact_errors?.find((error) => error.name === `gate-${gate.name}.log`);
        throw new UserError(`${evaluated.id}'s gate ${gate.name} stored no log${why ? `: ${describeArtifactError(why)}` : ""}`);
      }
    }
    progress(options, `${evaluated.id} ${what}: ${ref.name}, ${ref.size} bytes`);
    const response = await connection.client.artifactResponse(loopId, ref.sha256);
    // Content-addressed: bytes that do not hash to the log's digest were damaged in storage, and are refused
    // (in JSON, before anything is printed; streamed, as soon as the end shows it).
    const mismatch = () => new Error(`${ref.name} as stored does not match its digest ${ref.sha256}${options.json ? "" : "; do not trust the output above"}`);
    if (options.json) {
      const bytes = new Uint8Array(await response.arrayBuffer());
      if (createHash("sha256").update(bytes).digest("hex") !== ref.sha256) throw mismatch();
      emitResult(options, { status: "ok", loop_id: loopId, candidate_id: evaluated.id, artifact: ref, log: new TextDecoder().decode(bytes) }, []);
    } else if (response.body) {
      const hash = createHash("sha256");
      try {
        await pipeline(Readable.fromWeb(response.body as WebReadableStream<Uint8Array>), hashing(hash), process.stdout, { end: false });
      } catch (error) {
        // A reader that left early (`loopwarden logs | head`) ends the output, not the command: what it
        // did not read needs no digest check (surviveClosedPipes, for every other command's writes).
        if ((error as NodeJS.ErrnoException).code === "EPIPE" || stdoutClosed()) return 0;
        throw error;
      }
      if (hash.digest("hex") !== ref.sha256) throw mismatch();
    }
    return 0;
  });
}

/** A pass-through stream that feeds every chunk to `hash`. */
function hashing(hash: Hash): Transform {
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
}

/** Where a stored file is written under `dir`: its name's path, never outside `dir`. */
function downloadPath(dir: string, name: string): string {
  const target = path.resolve(dir, name.replace(/^\/+/, ""));
  if (target !== dir && !target.startsWith(`${dir}${path.sep}`)) throw new UserError(`refusing to write ${name} outside ${dir}`);
  return target;
}

/**
 * `artifacts [CANDIDATE] [LOOP] [--download DIR]`: the files a candidate's (or t0's) evaluation stored (its
 * gate logs, the metric output, the contract's artifacts); with --download, each written to DIR and its
 * digest checked.
 */
export async function artifactsCommand(
  candidateArg: string | undefined,
  loopArg: string | undefined,
  options: Options & { download?: string | undefined },
): Promise<number> {
  const { loopId, server } = await resolveTarget(loopArg, options);
  return withConnection(server, options, async (connection) => {
    const evaluated = evaluatedFor(await loopState(connection.client, loopId), candidateArg);
    const files = storedFilesOf(evaluated);
    const written: string[] = [];
    if (options.download !== undefined) {
      const dir = path.resolve(options.download);
      for (const file of files) {
        const target = downloadPath(dir, file.name);
        await mkdir(path.dirname(target), { recursive: true });
        const response = await connection.client.artifactResponse(loopId, file.sha256);
        if (!response.body) throw new Error(`the coordinator sent no body for ${file.name}`);
        const hash = createHash("sha256");
        await pipeline(Readable.fromWeb(response.body as WebReadableStream<Uint8Array>), hashing(hash), createWriteStream(target));
        if (hash.digest("hex") !== file.sha256)
          throw new Error(`${file.name} as downloaded does not match its digest ${file.sha256}; the file was written to ${target}, do not trust it`);
        written.push(target);
      }
    }
    // What the evaluation could not store as it was (refused, unreadable, kept as a log's tail), and why.
    const notStored = evaluated.artifact_errors ?? [];
    emitResult(
      options,
      {
        status: "ok",
        loop_id: loopId,
        candidate_id: evaluated.id,
        artifacts: files,
        ...(notStored.length > 0 ? { artifact_errors: notStored } : {}),
        ...(options.download !== undefined ? { written } : {}),
      },
      [
        ...(files.length === 0
          ? [`${evaluated.id} stored no files`]
          : [
              `${evaluated.id} stored ${files.length} file(s):`,
              ...files.map((file) => `  ${file.name}  ${file.size} bytes  sha256:${file.sha256.slice(0, 16)}…`),
              ...(options.download !== undefined
                ? [`written to ${path.resolve(options.download)} (digests checked)`]
                : [`download them: loopwarden artifacts ${evaluated.id} --download DIR`]),
            ]),
        ...(notStored.length > 0
          ? [`not stored as they were (${notStored.length}):`, ...notStored.map((error) => `  ${describeArtifactError(error)} [${error.code}]`)]
          : []),
      ],
    );
    return 0;
  });
}
