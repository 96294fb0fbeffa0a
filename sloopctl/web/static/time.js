// Times are shown relative ("3 min ago") with the absolute time on hover; every
// relative time and running duration on the page is refreshed here, once a second.

const UNITS = [
  [86_400_000, "d"],
  [3_600_000, "h"],
  [60_000, "min"],
  [1000, "s"],
];

export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "—";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const parts = [];
  let left = ms;
  for (const [size, unit] of UNITS) {
    if (left >= size || (parts.length && parts.length < 2)) {
      const count = Math.floor(left / size);
      if (count || parts.length) parts.push(`${count} ${unit}`);
      left -= count * size;
    }
    if (parts.length === 2) break;
  }
  return parts.join(" ");
}

export function relative(at, now = Date.now()) {
  const delta = at - now;
  if (Math.abs(delta) < 1500) return "just now";
  const text = duration(Math.abs(delta));
  return delta < 0 ? `${text} ago` : `in ${text}`;
}

export function absolute(at) {
  return new Date(at).toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
}

// <time> with the relative text, the absolute one as its title.
export function when(at) {
  if (typeof at !== "number") return document.createTextNode("—");
  const node = document.createElement("time");
  node.dateTime = new Date(at).toISOString();
  node.title = absolute(at);
  node.dataset.at = String(at);
  node.textContent = relative(at);
  return node;
}

// A duration still growing: from ``since`` (epoch ms) to now.
export function growing(since) {
  const node = document.createElement("span");
  node.className = "growing";
  node.dataset.since = String(since);
  node.textContent = duration(Date.now() - since);
  return node;
}

const tickers = new Set();
let frozen = false;

// While the daemon (or the gateway) does not answer nothing shown is news: every
// growing duration and running bar stops where it was, rather than keep counting
// as if the run were still seen to run. Relative times ("3 min ago") go on: they
// name a moment that does not move.
export function setFrozen(value) {
  frozen = Boolean(value);
}

export function isFrozen() {
  return frozen;
}

// Called every second (a running timeline redraws itself so).
export function onTick(callback) {
  tickers.add(callback);
  return () => tickers.delete(callback);
}

setInterval(() => {
  const now = Date.now();
  for (const node of document.querySelectorAll("time[data-at]")) {
    node.textContent = relative(Number(node.dataset.at), now);
  }
  if (frozen) return;
  for (const node of document.querySelectorAll("span.growing[data-since]")) {
    node.textContent = duration(now - Number(node.dataset.since));
  }
  for (const callback of tickers) callback(now);
}, 1000);
