// Redraw only what changed: a feed may push the same view again (a poll, a held
// request's timeout), and a section redrawn under the pointer loses a click.

// A view's fingerprint without what only ticks: the uptime, and each silence as the
// moment it began (to two seconds), so new output (a silence reset) still counts.
export function signature(value, receivedAt) {
  return JSON.stringify(value, (key, item) => {
    if (key === "uptime_ms") return undefined;
    if (key === "silent_for_ms" && typeof item === "number") {
      return Math.round((receivedAt - item) / 2000);
    }
    return item;
  });
}

// slots.update("runs", value, () => node): replaces the slot's node when value changed.
export class Slots {
  constructor(root) {
    this.root = root;
    this.nodes = new Map();
    this.marks = new Map();
  }

  update(name, value, receivedAt, build) {
    const mark = signature(value, receivedAt);
    if (this.marks.get(name) === mark) return;
    this.marks.set(name, mark);
    const node = build() ?? document.createComment(name);
    const old = this.nodes.get(name);
    if (old) old.replaceWith(node); else this.root.append(node);
    this.nodes.set(name, node);
  }
}

// "1 settled run", "2 settled runs": a count with its noun.
export function plural(count, one, many = `${one}s`) {
  return `${count} ${count === 1 ? one : many}`;
}
