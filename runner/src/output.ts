import { VERSION } from "../../shared/version.js";

/** How a command reports: human lines on stderr (progress) and stdout (results), or one JSON object. */
export interface OutputMode {
  json: boolean;
  quiet: boolean;
}

/** The single JSON object a command prints with `--json` (DESIGN §13). */
export interface JsonResult {
  status: "ok" | "running" | "halted" | "error";
  loop_id?: string;
  iteration?: number;
  halt_reason?: string;
  exit_class?: number;
  still_improving?: boolean;
  receipt_url?: string;
  errors?: string[];
  [extra: string]: unknown;
}

const useColor = () => process.stderr.isTTY && !process.env.NO_COLOR;

/** Colours a word for a terminal; plain when not a TTY or with NO_COLOR. */
export function paint(text: string, colour: "green" | "red" | "yellow" | "dim" | "bold"): string {
  if (!useColor()) return text;
  const codes = { green: 32, red: 31, yellow: 33, dim: 2, bold: 1 } as const;
  return `\u001b[${codes[colour]}m${text}\u001b[0m`;
}

/** Writes progress to stderr, unless `--quiet` or `--json`. */
export function progress(mode: OutputMode, line: string): void {
  if (mode.quiet || mode.json) return;
  process.stderr.write(`${line}\n`);
}

/** Writes a command's result: the JSON object with `--json`, else the human lines on stdout. */
export function emitResult(mode: OutputMode, result: JsonResult, humanLines: string[]): void {
  if (mode.json) {
    process.stdout.write(`${JSON.stringify({ tool: "loopwarden", version: VERSION, ...result, errors: result.errors ?? [] })}\n`);
    return;
  }
  for (const line of humanLines) process.stdout.write(`${line}\n`);
}
