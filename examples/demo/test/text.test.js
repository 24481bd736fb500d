import assert from "node:assert/strict";
import { test } from "node:test";
import { slugify, titleCase, wordCount } from "../src/text.js";

test("slugify joins words with single hyphens", () => {
  assert.equal(slugify("Hello, World!"), "hello-world");
  assert.equal(slugify("  Loop   warden  "), "loop-warden");
});

test("titleCase capitalises every word", () => {
  assert.equal(titleCase("the quick fox"), "The Quick Fox");
});

test("wordCount counts words across any whitespace", () => {
  assert.equal(wordCount("one  two\tthree\nfour"), 4);
  assert.equal(wordCount(""), 0);
  assert.equal(wordCount("   "), 0);
});
