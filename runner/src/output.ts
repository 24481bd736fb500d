import { VERSION } from "#shared/version.js";

/** How a command reports: human lines on stderr (progress) and stdout (results), or one JSON object. */
export interface OutputMode {
  json: boolean;
  quiet: boolean;
}

/** The single JSON object a command prints with `--json` (DESIGN §13). */
export interface JsonResult {
  /** `awaiting_baseline`: a loop with no log yet, whose t0 a runner with the contract's labels is to measure. */
  status: "ok" | "running" | "halted" | "awaiting_baseline" | "error";
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

// The live status line: on a terminal, one line rewritten in place (phase, gate, elapsed); elsewhere
// nothing, since every phase change is also printed as a plain line.
let live: { text: string; started: number; timer: NodeJS.Timeout } | null = null;

function renderLive(): void {
  if (!live) return;
  const seconds = ((performance.now() - live.started) / 1_000).toFixed(1);
  const width = process.stderr.columns || 100;
  process.stderr.write(`\r\u001b[2K${paint(`${live.text} · ${seconds}s`, "dim").slice(0, width + 16)}`);
}

function clearLive(): void {
  if (!live) return;
  clearInterval(live.timer);
  live = null;
  process.stderr.write("\r\u001b[2K");
}

/** Shows a live status line on a TTY (never with `--quiet`, `--json`, or when stderr is not a terminal). */
export function liveStatus(mode: OutputMode, text: string): void {
  if (mode.quiet || mode.json || !process.stderr.isTTY) return;
  clearLive();
  live = { text, started: performance.now(), timer: setInterval(renderLive, 200) };
  live.timer.unref();
  renderLive();
}

/** Writes a progress line to stderr, unless `--quiet` or `--json`; the live line, if any, is cleared first. */
export function progress(mode: OutputMode, line: string): void {
  clearLive();
  if (mode.quiet || mode.json) return;
  process.stderr.write(`${line}\n`);
}

/** Writes a command's result: the JSON object with `--json`, else the human lines on stdout. */
export function emitResult(mode: OutputMode, result: JsonResult, humanLines: string[]): void {
  clearLive();
  if (mode.json) {
    process.stdout.write(`${JSON.stringify({ tool: "loopwarden", version: VERSION, ...result, errors: result.errors ?? [] })}\n`);
    return;
  }
  for (const line of humanLines) process.stdout.write(`${line}\n`);
}
