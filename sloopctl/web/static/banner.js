// What the page must say above everything else, because it changes how the rest
// is read: the daemon runs agents without a sandbox (UNSAFE), what is shown is
// frozen (the daemon or the gateway stopped answering), or this tab's access has
// ended (the gateway restarted with a new token). A page never looks live when
// it is not.

import {h, replace} from "./dom.js";
import {setFrozen} from "./time.js";

let area = null;
let ended = false;
const stale = new Map(); // who is not answering ("daemon", "gateway") -> since (epoch ms)
const endHooks = new Set();

function banners() {
  if (area === null) {
    area = h("div", {id: "banners", class: "banners"});
    const header = document.querySelector("header.top");
    if (header) header.after(area); else document.body.prepend(area);
  }
  return area;
}

function slot(id) {
  let node = document.getElementById(id);
  if (node === null) {
    node = h("div", {id, class: "banner", role: "alert"});
    banners().append(node);
  }
  return node;
}

function clockText(at) {
  return new Date(at).toLocaleTimeString(undefined, {hour: "2-digit", minute: "2-digit", hourCycle: "h23"});
}

// The daemon's own sentence (show's daemon.sandbox.warning), as the CLI prints it.
export function showUnsafe(warning) {
  if (!warning) {
    document.getElementById("unsafe")?.remove();
    return;
  }
  const node = slot("unsafe");
  node.className = "banner unsafe";
  replace(node, h("strong", {}, "UNSAFE: "), String(warning));
}

// who: "daemon" or "gateway"; answering: whether it does now.
export function markStale(who, answering) {
  if (ended) return;
  if (answering) stale.delete(who);
  else if (!stale.has(who)) stale.set(who, Date.now());
  setFrozen(stale.size > 0);
  if (!stale.size) {
    document.getElementById("stale")?.remove();
    return;
  }
  const [name, since] = stale.has("daemon") ? ["daemon", stale.get("daemon")] : ["gateway", stale.get("gateway")];
  const node = slot("stale");
  node.className = "banner stale";
  replace(node, h("span", {class: "shape", "aria-hidden": "true"}, "▲ "),
    `The ${name} is not answering since ${clockText(since)} — what you see is frozen`,
    name === "gateway" ? "; reconnecting…" : "; this page resumes by itself when it answers.");
}

export function isEnded() {
  return ended;
}

// Called once the page is of no more use (its feeds are closed then: nothing retries).
export function onEnd(callback) {
  endHooks.add(callback);
  return () => endHooks.delete(callback);
}

// A 401 from the gateway: its token is not this tab's any more. Everything shown
// goes, so nothing stale is mistaken for live, and the page says what to do.
export function endAccess() {
  if (ended) return;
  ended = true;
  setFrozen(true);
  for (const callback of endHooks) callback();
  const state = document.getElementById("link-state");
  if (state) {
    state.textContent = "■ access ended";
    state.className = "link-state bad";
  }
  banners().replaceChildren();
  const main = document.getElementById("page");
  if (main) {
    replace(main, h("section", {class: "card ended", id: "access-ended", role: "alert"},
      h("h1", {}, "This view's access has ended"),
      h("p", {}, "The gateway restarted or its token changed, so this tab may no longer read it."),
      h("p", {}, "Open the URL ", h("code", {}, "sloopctl web"), " printed (it ends in ",
        h("code", {}, "?token=…"), "); the token is also in the gateway's token file.")));
  }
  document.title = "Access ended · Sloop";
}
