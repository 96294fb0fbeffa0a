// A page's live feeds: Server-Sent Events from the gateway, which follows each
// feed once for every browser (sloopctl/web/feeds.py). The browser never asks the
// daemon anything on a timer; it waits for the gateway to push.

const state = document.getElementById("link-state");
const problems = new Set();

function showLink() {
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

// follow("/sse/show?ref=R1", {show: (data) => …}) -> {close()}
export function follow(path, handlers) {
  let source = null;
  let closed = false;
  const key = `${path}#${Math.random()}`;
  function open() {
    source = new EventSource(path);
    for (const [name, handle] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => handle(JSON.parse(event.data)));
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
    source.addEventListener("error", () => { problems.add(key); showLink(); });
  }
  open();
  showLink();
  return {
    close() {
      closed = true;
      problems.delete(key);
      source?.close();
    },
  };
}
