import { createHash } from "node:crypto";
import canonicalize from "canonicalize";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { canonicalJson, sameJson } from "#shared/canonical-json.js";
import { sha256Hex, useSha256 } from "#shared/hash.js";
import { RFC8785_SERIALISATION, RFC8785_SORTING } from "../fixtures/rfc8785-examples.js";

// Vectors from RFC 8785 (JSON Canonicalization Scheme): §3.2.2 (serialisation), §3.2.3 (sorting) and
// Appendix B (numbers, given as IEEE 754 bit patterns). A receipt verifies only if every implementation
// hashes the same bytes, so these are the spec's own examples, not ours.

function fromBits(hex: string): number {
  const view = new DataView(new ArrayBuffer(8));
  view.setBigUint64(0, BigInt(`0x${hex}`));
  return view.getFloat64(0);
}

describe("canonicalJson (RFC 8785)", () => {
  it("serialises the RFC's §3.2.2 example byte for byte", () => {
    expect(canonicalJson(JSON.parse(RFC8785_SERIALISATION.input) as unknown)).toBe(RFC8785_SERIALISATION.canonical);
  });

  it("sorts keys by UTF-16 code units, not by code points (the RFC's §3.2.3 example)", () => {
    // U+1F600 (surrogates D83D DE00) sorts before U+FB33 by code units, after it by code points.
    expect(canonicalJson(RFC8785_SORTING.input)).toBe(
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",' +
        '"\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
    );
  });

  it("sorts nested objects too, and keeps array order", () => {
    expect(canonicalJson({ b: [3, 1, { z: 1, a: 2 }], a: { d: null, c: true } })).toBe('{"a":{"c":true,"d":null},"b":[3,1,{"a":2,"z":1}]}');
  });

  it.each([
    ["0000000000000000", "0"],
    ["8000000000000000", "0"],
    ["0000000000000001", "5e-324"],
    ["8000000000000001", "-5e-324"],
    ["7fefffffffffffff", "1.7976931348623157e+308"],
    ["ffefffffffffffff", "-1.7976931348623157e+308"],
    ["4340000000000000", "9007199254740992"],
    ["c340000000000000", "-9007199254740992"],
    ["4430000000000000", "295147905179352830000"],
    ["44b52d02c7e14af5", "9.999999999999997e+22"],
    ["44b52d02c7e14af6", "1e+23"],
    ["44b52d02c7e14af7", "1.0000000000000001e+23"],
    ["444b1ae4d6e2ef4e", "999999999999999700000"],
    ["444b1ae4d6e2ef4f", "999999999999999900000"],
    ["444b1ae4d6e2ef50", "1e+21"],
    ["3eb0c6f7a0b5ed8c", "9.999999999999997e-7"],
    ["3eb0c6f7a0b5ed8d", "0.000001"],
    ["41b3de4355555553", "333333333.3333332"],
    ["41b3de4355555554", "333333333.33333325"],
    ["41b3de4355555555", "333333333.3333333"],
    ["41b3de4355555556", "333333333.3333334"],
    ["41b3de4355555557", "333333333.33333343"],
    ["becbf647612f3696", "-0.0000033333333333333333"],
    ["43143ff3c1cb0959", "1424953923781206.2"],
  ])("serialises the number with bits %s as %s", (bits, expected) => {
    expect(canonicalJson(fromBits(bits))).toBe(expected);
    expect(canonicalJson({ n: fromBits(bits) })).toBe(`{"n":${expected}}`);
  });

  it.each([
    ["\u0000\u0008\u0009\u000a\u000b\u000c\u000d\u001f", String.raw`"\u0000\b\t\n\u000b\f\r\u001f"`],
    ['quote " and backslash \\', String.raw`"quote \" and backslash \\"`],
    ["slash / stays", '"slash / stays"'],
    ["non-ASCII stays literal: é € 😀 \u007f", '"non-ASCII stays literal: é € 😀 \u007f"'],
  ])("escapes only what RFC 8785 escapes: %j", (input, expected) => {
    expect(canonicalJson(input)).toBe(expected);
  });

  it("omits undefined object members, as JSON does", () => {
    expect(canonicalJson({ a: 1, b: undefined })).toBe('{"a":1}');
  });

  it.each([
    ["NaN", Number.NaN],
    ["Infinity", Number.POSITIVE_INFINITY],
    ["-Infinity", Number.NEGATIVE_INFINITY],
    ["NaN nested in an object", { metric: { value: Number.NaN } }],
    ["Infinity nested in an array", [1, 2, Number.POSITIVE_INFINITY]],
    ["undefined at the top level", undefined],
  ])("throws on %s instead of hashing something else", (_what, value) => {
    expect(() => canonicalJson(value)).toThrow();
  });
});

describe("canonicalJson against the canonicalize package, and sameJson", () => {
  // Any JSON value, with members JSON leaves out (undefined) and -0, which JCS writes as 0.
  const value = fc.letrec((tie) => ({
    node: fc.oneof(
      { depthSize: "small" },
      fc.constantFrom(null, true, false, -0, 0),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.integer(),
      fc.string({ unit: "binary" }),
      fc.array(tie("node"), { maxLength: 5 }),
      fc.dictionary(fc.string({ unit: "binary", maxLength: 6 }), fc.oneof(tie("node"), fc.constant(undefined)), { maxKeys: 6 }),
    ),
  })).node;

  it("writes the same bytes as the canonicalize package (the implementation it replaced) for any JSON value", () => {
    fc.assert(
      fc.property(value, (input) => {
        expect(canonicalJson(input)).toBe(canonicalize(input));
      }),
      { numRuns: 2_000 },
    );
  });

  it("says two values are the same exactly when their canonical JSON is", () => {
    fc.assert(
      fc.property(value, value, (a, b) => {
        expect(sameJson(a, b)).toBe(canonicalJson(a) === canonicalJson(b));
        // A value and a re-parsed copy of it (key order shuffled by the parse of its canonical text) are the same.
        expect(sameJson(a, JSON.parse(canonicalJson(a)))).toBe(true);
      }),
      { numRuns: 2_000 },
    );
  });

  it.each<[string, unknown, unknown, boolean]>([
    ["a member left undefined is a member left out", { a: 1, b: undefined }, { a: 1 }, true],
    ["an undefined element is null", [1, undefined], [1, null], true],
    ["0 and -0", { n: -0 }, { n: 0 }, true],
    ["key order does not matter", { a: 1, b: [2, { c: 3, d: 4 }] }, { b: [2, { d: 4, c: 3 }], a: 1 }, true],
    ["an array is not an object with index keys", [1], { 0: 1 }, false],
    ["one more member", { a: 1 }, { a: 1, b: null }, false],
    ["a string is not a number", { a: "1" }, { a: 1 }, false],
  ])("%s", (_what, a, b, same) => {
    expect(sameJson(a, b)).toBe(same);
  });

  it("throws on a number JSON cannot represent, as canonicalJson does", () => {
    expect(() => sameJson({ a: Number.NaN }, { a: Number.NaN })).toThrow();
    expect(() => sameJson(Number.POSITIVE_INFINITY, 1)).toThrow();
  });
});

describe("sha256Hex", () => {
  afterEach(() => useSha256(null));

  it("gives the same digest with the portable implementation and with Node's, for strings (lone surrogates included) and bytes", () => {
    const node = (input: string | Uint8Array) => createHash("sha256").update(input).digest("hex");
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: "binary" }), fc.string({ unit: "grapheme" }), fc.uint8Array({ maxLength: 300 })), (input) => {
        useSha256(null);
        const portable = sha256Hex(input);
        useSha256(node);
        expect(sha256Hex(input)).toBe(portable);
      }),
      { numRuns: 1_000 },
    );
    useSha256(null);
    expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  });
});
