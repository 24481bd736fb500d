// RFC 8785 (JCS) canonical JSON, written here rather than taken from the `canonicalize` package: every
// event is serialised once when it is sealed and again when a verifier checks the chain, and that
// package's reduce-and-template recursion made a cold 10,000-event verification spend 180 ms in it where
// this loop spends 80 (issue 30). The package stays the oracle of a property test
// (test/unit/canonical-json.test.ts): both must give the same bytes for any JSON value.
//
// JCS is ECMAScript's own JSON serialisation with object keys sorted by UTF-16 code units, so strings and
// numbers are written by JSON.stringify (shortest round-trip numbers, the same escapes) and keys are
// sorted by the default `sort()`, which compares code units.

/** The canonical text of a value, or undefined where JSON has none (undefined, a function, a symbol). */
function serialize(value: unknown): string | undefined {
  if (value === null) return "null";
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "number":
      if (!Number.isFinite(value)) throw new TypeError(`${value} has no JSON representation`);
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "object": {
      const record = value as Record<string, unknown> & { toJSON?: unknown };
      if (typeof record.toJSON === "function") return serialize((record.toJSON as () => unknown)());
      if (Array.isArray(value)) {
        // An array of strings (a suite's test ids) is already canonical as JSON.stringify writes it: one
        // native call instead of one per id.
        if (value.every((element) => typeof element === "string")) return JSON.stringify(value);
        let out = "[";
        for (let index = 0; index < value.length; index++) {
          if (index > 0) out += ",";
          // As in JSON.stringify: an element JSON cannot represent is written as null.
          out += serialize(value[index] as unknown) ?? "null";
        }
        return `${out}]`;
      }
      return joinMembers(canonicalMembers(record));
    }
    case "bigint":
      throw new TypeError("a BigInt has no JSON representation");
    default:
      return undefined;
  }
}

/** An object's member as canonical JSON writes it: the key, and the value's canonical text. */
export type CanonicalMember = readonly [key: string, text: string];

/**
 * The members of an object as canonical JSON writes them, in its order (keys sorted by UTF-16 code
 * units), each value serialised once; those JSON leaves out (undefined, a function, a symbol) are not
 * among them. With `joinMembers`, for a caller that writes one object twice, with and without a member
 * (an event's hash, `sealEventWithBody`), without serialising the rest again.
 */
export function canonicalMembers(record: Record<string, unknown>): CanonicalMember[] {
  const members: CanonicalMember[] = [];
  for (const key of Object.keys(record).sort()) {
    const text = serialize(record[key]);
    // As in JSON.stringify: a member JSON cannot represent is left out.
    if (text !== undefined) members.push([key, text]);
  }
  return members;
}

/** The canonical text of an object of these members, which must be sorted by key as `canonicalMembers` answers them. */
export function joinMembers(members: readonly CanonicalMember[]): string {
  let out = "{";
  for (const [key, text] of members) {
    if (out.length > 1) out += ",";
    out += `${JSON.stringify(key)}:${text}`;
  }
  return `${out}}`;
}

/**
 * RFC 8785 (JCS) canonical JSON. Throws on values JSON cannot represent (NaN, Infinity, a BigInt,
 * undefined at the top level) instead of silently hashing something else.
 */
export function canonicalJson(value: unknown): string {
  const text = serialize(value);
  if (text === undefined) throw new TypeError("value has no JSON representation");
  return text;
}

/** Whether a member or element is one JSON leaves out of an object (undefined, a function, a symbol). */
function isAbsent(value: unknown): boolean {
  return value === undefined || typeof value === "function" || typeof value === "symbol";
}

/**
 * Whether two values have the same canonical JSON, `canonicalJson(a) === canonicalJson(b)`, decided
 * without writing either out: a verifier compares every recomputed event with the recorded one, and
 * serialising both was a third of its time. A value with `toJSON` is compared by its text.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) {
    if (typeof a === "number" && !Number.isFinite(a)) throw new TypeError(`${a} has no JSON representation`);
    return true;
  }
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) {
    // Different primitives, or a primitive and an object; 0 and -0 are === already, NaN is never equal.
    if (typeof a === "number" && !Number.isFinite(a)) throw new TypeError(`${a} has no JSON representation`);
    if (typeof b === "number" && !Number.isFinite(b)) throw new TypeError(`${b} has no JSON representation`);
    return false;
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  if (typeof left.toJSON === "function" || typeof right.toJSON === "function") return canonicalJson(a) === canonicalJson(b);
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) return false;
    for (let index = 0; index < a.length; index++) {
      // An element JSON cannot represent is written as null, so it equals null.
      const x: unknown = isAbsent(a[index]) ? null : a[index];
      const y: unknown = isAbsent(b[index]) ? null : b[index];
      if (!sameJson(x, y)) return false;
    }
    return true;
  }
  let count = 0;
  for (const key of Object.keys(left)) {
    const value = left[key];
    if (isAbsent(value)) continue;
    count++;
    if (!Object.hasOwn(right, key) || isAbsent(right[key]) || !sameJson(value, right[key])) return false;
  }
  for (const key of Object.keys(right)) if (!isAbsent(right[key])) count--;
  return count === 0;
}
