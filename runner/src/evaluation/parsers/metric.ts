/** A `METRIC` line that could not be read: its 1-based line number, its text, and why. */
export interface MetricError {
  line: number;
  text: string;
  reason: string;
}

/** The metrics printed as `METRIC name=value`, and every malformed `METRIC` line. */
export interface MetricReadout {
  metrics: Record<string, number>;
  errors: MetricError[];
}

const NAME = /^[A-Za-z_][A-Za-z0-9_.]*$/;
const MAX_NAME = 64;
// A plain decimal or scientific number: no hex, no `_` separators, no unit; NaN and Infinity are
// spelled out by JavaScript and Python but are not measurements.
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const NUMBER_WITH_UNIT = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[A-Za-z%µ]+$/;

/**
 * Reads `METRIC name=value [name=value ...]` lines from a command's output; other lines are ignored.
 * A malformed METRIC line is reported, never silently dropped: a typo must not make a metric vanish.
 */
export function parseMetrics(output: string): MetricReadout {
  const metrics: Record<string, number> = {};
  const firstSeen = new Map<string, number>();
  const errors: MetricError[] = [];
  const lines = output.split(/\r?\n/);

  lines.forEach((raw, index) => {
    const line = index + 1;
    const text = raw.trim();
    // `METRIC` must be a word of its own: `METRICS: 3 written` is prose, but `METRIC:x=1` is a typo.
    if (!text.startsWith("METRIC") || /^[A-Za-z0-9_]/.test(text.slice(6))) return;
    const fail = (reason: string) => errors.push({ line, text, reason });
    const rest = text.slice(6);
    if (rest.trim() === "") {
      fail("no name=value pair after METRIC");
      return;
    }
    if (!/^\s/.test(rest)) {
      fail('"METRIC" must be followed by a space, then name=value pairs');
      return;
    }
    const pairs = rest.trim().split(/\s+/);
    for (const pair of pairs) {
      const equals = pair.indexOf("=");
      if (equals === -1) {
        fail(`"${pair}" has no "=": write name=value`);
        continue;
      }
      const name = pair.slice(0, equals);
      const value = pair.slice(equals + 1);
      if (!NAME.test(name)) {
        fail(`bad metric name "${name}": use letters, digits, "_" and ".", not starting with a digit`);
        continue;
      }
      if (name.length > MAX_NAME) {
        // The wire schema (shared/wire/observation.ts) caps names; a longer one would void the whole observation.
        fail(`metric name "${name}" is longer than ${MAX_NAME} characters`);
        continue;
      }
      const problem = valueProblem(value);
      if (problem !== undefined) {
        fail(`${name}: ${problem}`);
        continue;
      }
      const earlier = firstSeen.get(name);
      if (earlier !== undefined) {
        // Keeping the first value means re-printing a metric can never replace a measurement after the fact.
        fail(`duplicate metric "${name}" (first printed on line ${earlier}, whose value is kept)`);
        continue;
      }
      firstSeen.set(name, line);
      metrics[name] = Number(value);
    }
  });
  return { metrics, errors };
}

function valueProblem(value: string): string | undefined {
  if (value === "") return 'no value after "="';
  if (NUMBER.test(value)) {
    return Number.isFinite(Number(value)) ? undefined : `value ${value} is too large to be a finite number`;
  }
  if (/^[+-]?(nan|inf|infinity)$/i.test(value)) return `value ${value} is not a finite number`;
  if (NUMBER_WITH_UNIT.test(value)) return `value "${value}" has a unit; print the bare number and put the unit in the name (e.g. parse_ms=12.4)`;
  return `value "${value}" is not a decimal number`;
}
