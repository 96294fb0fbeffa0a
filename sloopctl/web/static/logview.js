// A run's output, live: the records of one stage#attempt (by default the running
// one, following it as the walk moves on) or of all of them, from the gateway's
// log feed of that selector. Records are keyed by cursor, so a feed that starts
// over (a resync) never shows a line twice.

import {h, replace, section} from "./dom.js";
import {follow} from "./live.js";
import {stageLabel} from "./widgets.js";

const FOLLOW = "(running stage)";
const ALL = "(all stages)";
const MAX_LINES = 2000;

export class LogView {
  constructor() {
    this.select = h("select", {id: "log-filter", "aria-label": "Show the output of"});
    this.select.addEventListener("change", () => this.choose(this.select.value));
    this.lines = h("div", {class: "log", id: "log", role: "log", "aria-live": "polite"});
    this.status = h("p", {class: "muted", id: "log-status"});
    this.section = section("Output",
      h("label", {class: "filter"}, "Show ", this.select), this.status, this.lines);
    this.choice = FOLLOW;
    this.selector = undefined;
    this.feed = null;
    this.seen = new Set();
    this.options = "";
  }

  // Called with every new view of the run: refresh the choices, move with the walk.
  follow(run) {
    this.run = run;
    const labels = run.stages.filter((s) => s.attempt > 0).map(stageLabel);
    const mark = labels.join("\n");
    if (mark !== this.options) {
      this.options = mark;
      replace(this.select, [FOLLOW, ALL, ...labels].map((label) =>
        h("option", {value: label, selected: label === this.choice ? "selected" : null}, label)));
    }
    this.open(this.wanted());
  }

  wanted() {
    if (this.choice === ALL) return null;
    if (this.choice !== FOLLOW) return this.choice;
    const running = this.run.stages.filter((s) => s.state === "running");
    if (running.length) return stageLabel(running[running.length - 1]);
    const ran = this.run.stages.filter((s) => s.attempt > 0);
    return ran.length && !this.run.terminal ? stageLabel(ran[ran.length - 1]) : null;
  }

  choose(value) {
    this.choice = value;
    this.open(this.wanted());
  }

  open(selector) {
    if (selector === this.selector) return;
    this.selector = selector;
    this.feed?.close();
    this.seen.clear();
    replace(this.lines);
    this.status.textContent = selector ? `Output of ${selector}` : "Output of every stage";
    const query = new URLSearchParams({run: this.run.id});
    if (selector) query.set("stage", selector);
    this.feed = follow(`/sse/logs?${query}`, {
      records: ({records, elided}) => this.add(records, elided),
      end: () => { this.status.textContent += " (the run has settled)"; },
      problem: (error) => { this.status.textContent = `${error.code}: ${error.message}`; },
    });
  }

  add(records, elided) {
    if (elided && !this.lines.querySelector(".elided")) {
      this.lines.prepend(h("div", {class: "elided muted"}, `… ${elided} earlier records not shown`));
    }
    for (const record of records) {
      const key = String(record.cursor);
      if (this.seen.has(key)) continue;
      this.seen.add(key);
      const where = `${record.stage ?? "?"}${record.attempt ? `#${record.attempt}` : ""}`;
      this.lines.append(h("div", {class: `ll stream-${record.stream}`, dataset: {cursor: key}},
        h("span", {class: "ll-where"}, `[${where} ${record.stream}]`), " ",
        h("span", {class: "ll-text"}, String(record.text ?? ""))));
    }
    while (this.lines.children.length > MAX_LINES) this.lines.firstElementChild.remove();
    this.lines.scrollTop = this.lines.scrollHeight;
  }
}
