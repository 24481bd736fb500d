// What an artifact is called and how it is served (DESIGN §10). Names and content types come from the
// uploader; neither is trusted: names are reduced to a safe file name, and a download is rendered by the
// browser only when it is plain UTF-8 text.

/** The longest name kept; longer ones are cut, keeping a short extension. */
export const MAX_NAME_CHARS = 100;

/** The name of an artifact uploaded without a usable one. */
export function defaultName(sha256: string): string {
  return `${sha256.slice(0, 12)}.bin`;
}

/**
 * A safe file name: the last path segment only, every character outside `[A-Za-z0-9._-]` (spaces,
 * control characters, quotes, anything non-ASCII) as `_`, no leading dots or dashes (no `..`, no hidden
 * files, no option-like names), at most MAX_NAME_CHARS. A name with no letter or digit left is the default.
 */
export function sanitizeName(raw: string | undefined, sha256: string): string {
  const base = (raw ?? "").split(/[/\\]/).at(-1) ?? "";
  let name = base.replace(/[^A-Za-z0-9._-]/gu, "_").replace(/^[.-]+/, "");
  if (name.length > MAX_NAME_CHARS) {
    const extension = /\.[A-Za-z0-9_-]{1,10}$/.exec(name)?.[0] ?? "";
    name = name.slice(0, MAX_NAME_CHARS - extension.length) + extension;
  }
  return /[A-Za-z0-9]/.test(name) ? name : defaultName(sha256);
}

/** The content type recorded for an upload: what it said, when that is printable ASCII of at most 100 characters. */
export function recordedContentType(raw: string | undefined): string {
  const value = raw?.trim() ?? "";
  return value.length > 0 && value.length <= 100 && /^[\x21-\x7e][\x20-\x7e]*$/.test(value) ? value : "application/octet-stream";
}

/** Whether a recorded content type is one a browser may render: plain UTF-8 text, said explicitly. */
export function isInlineSafe(contentType: string): boolean {
  return contentType.toLowerCase().replace(/\s+/g, "") === "text/plain;charset=utf-8";
}

/**
 * The headers a download is served with. The uploaded content type decides nothing but this: plain
 * UTF-8 text is shown inline; everything else is `application/octet-stream`, saved as a file. Never
 * sniffed, and sandboxed should a browser render it anyway.
 */
export function downloadHeaders(artifact: { name: string; contentType: string; sha256: string }): Record<string, string> {
  const inline = isInlineSafe(artifact.contentType);
  return {
    "Content-Type": inline ? "text/plain; charset=utf-8" : "application/octet-stream",
    "Content-Disposition": `${inline ? "inline" : "attachment"}; filename="${sanitizeName(artifact.name, artifact.sha256)}"`,
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
  };
}

/** Whether an artifact is an SVG drawing (a flame graph, a chart): by its recorded type or its name. */
export function isSvgDrawing(artifact: { name: string; contentType: string }): boolean {
  return /^image\/svg\+xml\s*(;|$)/i.test(artifact.contentType) || /\.svg$/i.test(artifact.name);
}

/**
 * The headers an SVG drawing is served with for the dashboard to show it inline (DESIGN §10). The page
 * shows it only through `<img>`, where a browser runs no script in it and loads nothing it names; opened
 * on its own, its policy forbids script and every fetch, and sandboxes it to an opaque origin. Those two
 * together are the sanitising: nothing in the file can act, so nothing in it needs rewriting.
 */
export function svgDrawingHeaders(artifact: { name: string; sha256: string }): Record<string, string> {
  return {
    "Content-Type": "image/svg+xml",
    "Content-Disposition": `inline; filename="${sanitizeName(artifact.name, artifact.sha256)}"`,
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox",
  };
}
