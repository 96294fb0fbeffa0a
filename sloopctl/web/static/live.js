// A page's live feeds: Server-Sent Events from the gateway, which follows each
// feed once for every browser (sloopctl/web/feeds.py). The browser never asks the
// daemon anything on a timer; it waits for the gateway to push.
//
// What a feed cannot say is said by banner.js: the daemon stopped answering (the
// feed's "daemon" event), the gateway did (the stream broke and reconnects), or
// the gateway refused this tab (401: its token changed; nothing will reconnect).

import {endAccess, isEnded, markStale, onEnd} from "./banner.js";

const state = document.getElementById("link-state");
const problems = new Set();
const sources = new Set();

onEnd(() => {
  for (const close of [...sources]) close();
});

function showLink() {
  if (isEnded()) return;
  markStale("daemon", !problems.has("daemon"));
  markStale("gateway", problems.size === 0 || (problems.size === 1 && problems.has("daemon")));
  if (!state) return;
  if (problems.has("daemon")) {
    state.textContent = "▲ daemon not answering";
    state.className = "link-state bad";
  } else if (problems.size) {
    state.textContent = "… reconnecting";
    state.className = "link-state warn";
  } else {
    state.textContent = "● live";
    state.className = "link-state ok";
  }
}

// Why a stream the browser gave up on was refused: a 401 ends this tab's access;
// anything else (the gateway busy, stopping) is worth another try.
async function refused() {
  try {
    const response = await fetch("/api/session", {credentials: "same-origin"});
    return response.status === 401;
  } catch {
    return false; // the gateway is not there at all: keep trying
  }
}

// follow("/sse/show?ref=R1", {show: (data) => …}) -> {close()}
export function follow(path, handlers) {
  let source = null;
  let closed = false;
  const key = `${path}#${Math.random()}`;
  function open() {
    if (closed || isEnded()) return;
    source = new EventSource(path);
    for (const [name, handle] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => { if (!isEnded()) handle(JSON.parse(event.data)); });
    }
    source.addEventListener("open", () => { problems.delete(key); showLink(); });
    source.addEventListener("daemon", (event) => {
      if (JSON.parse(event.data).ok) problems.delete("daemon"); else problems.add("daemon");
      showLink();
    });
    // Too far behind (or the gateway is stopping): start over; the feed sends its buffer.
    source.addEventListener("resync", () => {
      source.close();
      if (!closed) setTimeout(open, 500);
    });
    source.addEventListener("error", async () => {
      problems.add(key);
      showLink();
      // EventSource retries a broken stream by itself, but not one the gateway
      // answered with an error status (a 401 after a restart): that one is CLOSED.
      if (source.readyState !== EventSource.CLOSED || closed) return;
      if (await refused()) endAccess();
      else setTimeout(open, 2000);
    });
  }
  const handle = {
    close() {
      closed = true;
      sources.delete(handle.close);
      problems.delete(key);
      source?.close();
    },
  };
  sources.add(handle.close);
  open();
  showLink();
  return handle;
}
