// The dashboard's live updates (docs/dashboard.md): on a loop page, follow the loop's event stream (the
// one `loopwarden watch` reads; the browser's EventSource resumes from the last event id by itself after a
// dropped connection) and, a moment after events arrive, render the page's live part again from the
// server (`?part=live`) and put it in place. The page works without this script; it only saves a reload.

/** How long to gather events before asking for the new render: a burst of events costs one request. */
const SETTLE_MS = 150;

const live = document.querySelector<HTMLElement>("[data-live]");
const statusLine = document.querySelector<HTMLElement>("[data-live-status]");

function say(text: string): void {
  if (statusLine) statusLine.textContent = text;
}

if (live?.dataset["loop"] && typeof EventSource !== "undefined") {
  const loop = live.dataset["loop"];
  const source = new EventSource(`/loops/${encodeURIComponent(loop)}/events?after=${encodeURIComponent(live.dataset["seq"] ?? "0")}`);
  let timer: ReturnType<typeof setTimeout> | null = null;
  let rendering = false;
  let again = false;
  let seen = Number(live.dataset["seq"] ?? 0);

  const render = async (): Promise<void> => {
    if (rendering) {
      again = true;
      return;
    }
    rendering = true;
    try {
      const response = await fetch(`/loops/${encodeURIComponent(loop)}?part=live`, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!response.ok) {
        say(`Live updates stopped: the coordinator answered ${response.status}. Reload the page.`);
        source.close();
        return;
      }
      live.innerHTML = await response.text();
      live.dataset["seq"] = String(seen);
      say(`Updated at ${new Date().toLocaleTimeString()} (event ${seen}).`);
    } catch {
      say("Live updates paused: the coordinator did not answer. Retrying with the next event.");
    } finally {
      rendering = false;
      if (again) {
        again = false;
        void render();
      }
    }
  };

  source.onmessage = (message: MessageEvent<string>) => {
    seen = Math.max(seen, Number(message.lastEventId) || seen);
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      void render();
    }, SETTLE_MS);
  };
  source.onopen = () => say("Live: following the loop's events.");
  source.onerror = () => say("Live updates interrupted; reconnecting…");
}
