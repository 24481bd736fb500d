import canonicalize from "canonicalize";

/**
 * RFC 8785 (JCS) canonical JSON. Throws on values JSON cannot represent (NaN, Infinity, undefined at
 * the top level) instead of silently hashing something else.
 */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError("value has no JSON representation");
  return text;
}
