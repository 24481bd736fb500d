import { html, raw } from "hono/html";
import { secureHeaders } from "hono/secure-headers";
import type { HtmlEscapedString } from "hono/utils/html";

// The dashboard's page shell: semantic HTML, one stylesheet inline, no script but the live updates
// (/assets/dashboard.js, loaded only on a loop page). Every page reads and works without JavaScript;
// status is said in words and shapes as well as colour.

/** What a page's HTML is made of: hono/html's escaped strings, or their promises. */
export type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

/**
 * The dashboard's response headers (hono/secure-headers), for its pages and forms: scripts, styles,
 * images and connections from this origin only (the one inline stylesheet aside), no framing (the
 * cancel button cannot be clickjacked), forms posted here only, no referrer. A response that set its own
 * policy keeps it: a stored file is served sandboxed (artifact-names.ts).
 */
export const pageHeaders = secureHeaders({
  overwrite: false,
  contentSecurityPolicy: {
    defaultSrc: ["'self'"],
    scriptSrc: ["'self'"],
    styleSrc: ["'self'", "'unsafe-inline'"],
    imgSrc: ["'self'"],
    connectSrc: ["'self'"],
    objectSrc: ["'none'"],
    baseUri: ["'none'"],
    formAction: ["'self'"],
    frameAncestors: ["'none'"],
  },
  xFrameOptions: "DENY",
  referrerPolicy: "no-referrer",
});

/** Who is looking, for the shell: the CSRF token its forms carry (logout), and whether it is signed in at all. */
export interface Viewer {
  csrf: string;
  /** Whether the viewer may cancel loops (`propose` scope). */
  mayAct: boolean;
  /** The viewer's team, shown in the header. */
  team: string;
}

const STYLE = `
body { font: 15px/1.5 system-ui, sans-serif; max-width: 64rem; margin: 0 auto; padding: 0 1rem 2rem; color: #1b1b1b; }
header.top { display: flex; gap: 1rem; align-items: baseline; border-bottom: 1px solid #ddd; padding: 0.5rem 0; margin-bottom: 1rem; }
header.top form { margin-left: auto; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 0.2rem; } h2 { font-size: 1.15rem; margin-top: 1.5rem; }
.muted { color: #595959; } code { font-size: 0.9em; }
table { border-collapse: collapse; width: 100%; } td, th { text-align: left; padding: 0.25rem 0.5rem; border-bottom: 1px solid #ddd; vertical-align: top; }
.promoted { color: #17703a; } .rejected { color: #9b1c1c; } .queued, .leased { color: #6b4f00; }
.chart { width: 100%; height: auto; border: 1px solid #eee; }
.chart .axis { font-size: 11px; fill: #595959; } .chart .best { fill: none; stroke: #1f9d55; stroke-width: 2; } .chart .baseline { stroke: #555; stroke-dasharray: 4 3; }
.chart .dot-promoted { fill: #1f9d55; stroke: #0b4d26; } .chart .dot-rejected { fill: #fff; stroke: #777; } .chart .whisker { stroke: #777; }
.chart .columns { fill: none; stroke: #aaa; stroke-width: 6; stroke-linecap: round; }
.strip .pass { stroke: #1f9d55; } .strip .fail { stroke: #c0392b; } .strip text { font-size: 11px; fill: #595959; }
.halt { padding: 0.5rem 1rem; border-left: 4px solid #999; background: #f6f6f6; } .halt[data-class="converged"] { border-left-color: #1f9d55; }
.halt pre { white-space: pre-wrap; margin: 0.25rem 0; font-size: 0.9em; }
ul.tree { list-style: none; padding-left: 1.2rem; border-left: 1px dotted #bbb; } ul.tree.root { border-left: none; padding-left: 0; }
.tree .on-path > a { font-weight: bold; }
a:focus, button:focus, summary:focus, input:focus, select:focus { outline: 3px solid #1d5fbf; outline-offset: 2px; }
button { font: inherit; padding: 0.2rem 0.8rem; }
.notice { padding: 0.5rem 1rem; border: 1px solid #c0392b; background: #fdecea; }
`;

/** A page: its title, the header (with logout when signed in), and `body` inside `<main>`. */
export function page(title: string, body: Html, options: { viewer?: Viewer; script?: boolean } = {}) {
  const { viewer } = options;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} · loopwarden</title>
<style>${raw(STYLE)}</style>
</head>
<body>
<header class="top"><strong>loopwarden</strong><nav aria-label="main"><a href="/loops">Loops</a></nav>${
    viewer
      ? html`<form method="post" action="/logout"><span class="muted">team ${viewer.team}</span> <input type="hidden" name="csrf" value="${viewer.csrf}"><button type="submit">Log out</button></form>`
      : ""
  }</header>
<main>
${body}
</main>
${options.script ? html`<script type="module" src="/assets/dashboard.js"></script>` : ""}
</body>
</html>`;
}

/** The login form: a token, exchanged once for a session cookie; `next` is where to go after. */
export function loginPage(next: string, problem?: string) {
  return page(
    "Log in",
    html`<h1>Log in</h1>
${problem ? html`<p class="notice" role="alert">${problem}</p>` : ""}
<p>Paste a token of your team (any scope; <code>loopwarden token create --scopes read</code> makes one). It is exchanged once for a session: the browser keeps only a cookie it cannot read from a script.</p>
<form method="post" action="/login">
<input type="hidden" name="next" value="${next}">
<p><label for="token">Token</label><br><input id="token" name="token" type="password" autocomplete="off" size="60" required></p>
<p><button type="submit">Log in</button></p>
</form>
<p class="muted">On your own machine, <code>loopwarden serve</code> and <code>loopwarden run</code> print a one-time link that logs you in.</p>`,
  );
}
