/** Lower-case, ASCII-only, words joined by single hyphens: "Hello, World!" → "hello-world". */
export function slugify(text) {
  return text.toLowerCase().replace(/[^a-z0-9]/g, "-");
}

/** Capitalises the first letter of every word: "the quick fox" → "The Quick Fox". */
export function titleCase(text) {
  return text.replace(/\b\w/, (letter) => letter.toUpperCase());
}

/** Counts words separated by any run of whitespace; "" has 0 words. */
export function wordCount(text) {
  return text.split(" ").length;
}
