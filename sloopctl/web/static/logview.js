// A run's output, live: the records of one stage#attempt (by default the running
// one, following it as the walk moves on) or of all of them, from the gateway's
// log feed of that selector. Records are keyed by cursor, so a feed that starts
// over (a resync) never shows a line twice.
//
// Each line is shown as `sloopctl logs` prints it: the gateway renders an agent
// CLI's JSON events with the command's own code and sends `rendered` beside the
// raw `text`; "raw" shows the stored text instead. A panel seat's lines say which
// seat printed them, and the seat filter keeps one seat's. The feed holds the
// newest 500 records; "show earlier records" reads from the log's first line on
// (/api/logs, the protocol's forward cursor) until it meets them, and the whole
// selection downloads as text (/api/log). The view follows new lines only while
// the reader is at the bottom; scrolled up, it stays put and offers "jump to
// latest". The stage and seat chosen are in the address (?stage=review%231&seat=1).

import {read} from "./api.js";
import {h, replace, section} from "./dom.js";
import {follow} from "./live.js";
import {stageLabel} from "./widgets.js";

const FOLLOW = "(running stage)";
const ALL = "(all stages)";
const ALL_IN_URL = "all";
const EVERY_SEAT = "";
const MAX_LINES = 5000; // lines kept while following with nothing earlier loaded
const EARLIER = 500; // records one "show earlier records" reads
const BOTTOM_SLACK_PX = 8;
const SHORT_STREAMS = {stdout: "out", stderr: "err", system: "sys"};

export class LogView {
  constructor() {
    const params = new URLSearchParams(location.search);
    const stage = params.get("stage");
    this.choice = stage === null || stage === "" ? FOLLOW : stage === ALL_IN_URL ? ALL : stage;
    this.seat = params.get("seat") ?? EVERY_SEAT;
    this.select = h("select", {id: "log-filter", "aria-label": "Show the output of"});
    this.select.addEventListener("change", () => this.choose(this.select.value));
    this.seatSelect = h("select", {id: "log-seat", "aria-label": "Only the lines of"});
    this.seatSelect.addEventListener("change", () => this.chooseSeat(this.seatSelect.value));
    this.seatLabel = h("label", {class: "filter", hidden: "hidden"}, "Seat ", this.seatSelect);
    this.rawBox = h("input", {type: "checkbox", id: "log-raw"});
    this.rawBox.addEventListener("change", () => {
      this.lines.classList.toggle("raw", this.rawBox.checked);
      this.stick();
    });
    // What the page shows (rendered), or the stored text (raw) as the other choice.
    this.download = h("a", {id: "log-download", download: ""}, "Download");
    this.downloadRaw = h("a", {id: "log-download-raw", download: ""}, "Download raw");
    this.head = h("div", {class: "log-head"});
    this.gapText = h("span", {});
    this.earlier = h("button", {type: "button", id: "log-earlier"}, "Show earlier records");
    this.earlier.addEventListener("click", () => this.loadEarlier());
    this.gap = h("div", {class: "log-gap", id: "log-gap", hidden: "hidden"}, this.gapText, " ", this.earlier);
    this.tail = h("div", {class: "log-tail"});
    this.lines = h("div", {class: "log", id: "log", role: "log", "aria-live": "polite"},
      this.head, this.gap, this.tail);
    this.lines.addEventListener("scroll", () => {
      this.following = this.atBottom();
      if (this.following) this.unseen = 0;
      this.showJump();
    });
    this.jump = h("button", {type: "button", id: "log-jump", class: "log-jump", hidden: "hidden"},
      "Jump to latest ↓");
    this.jump.addEventListener("click", () => this.toLatest());
    this.status = h("p", {class: "muted", id: "log-status"});
    this.section = section("Output",
      h("div", {class: "log-controls"},
        h("label", {class: "filter"}, "Show ", this.select), this.seatLabel,
        h("label", {class: "filter"}, this.rawBox, " raw"),
        h("span", {class: "downloads"}, this.download, this.downloadRaw)),
      this.status, this.lines, this.jump);
    this.selector = undefined;
    this.feed = null;
    this.options = "";
    this.seatOptions = "";
    this.reset();
  }

  reset() {
    this.seen = new Map(); // cursor -> its line, or null once trimmed away
    this.elided = null; // records before the feed's first, as its first message said
    this.trimmed = 0;
    this.headCount = 0;
    this.headAfter = null; // the cursor "show earlier records" reads on from
    this.headClosed = false; // the head met the feed's records: nothing is missing
    this.following = true;
    this.unseen = 0;
    replace(this.head);
    replace(this.tail);
    this.showGap();
    this.showJump();
  }

  // Called with every new view of the run: refresh the choices, move with the walk.
  // A settled run has no running stage to follow: its default is every stage.
  follow(run) {
    this.run = run;
    const labels = run.stages.filter((s) => s.attempt > 0).map(stageLabel);
    const chosen = [FOLLOW, ALL].includes(this.choice) || labels.includes(this.choice) ? [] : [this.choice];
    const heads = run.terminal ? [ALL] : [FOLLOW, ALL];
    const shown = run.terminal && this.choice === FOLLOW ? ALL : this.choice;
    const mark = [...heads, ...labels, ...chosen].join("\n");
    if (mark !== this.options) {
      this.options = mark;
      replace(this.select, [...heads, ...labels, ...chosen].map((label) =>
        h("option", {value: label, selected: label === shown ? "selected" : null}, label)));
    }
    this.open(this.wanted());
    this.followSeats(run);
    this.showJump();
  }

  // The seats of the panels the output shows ("seat 0 (careful)"): only where a
  // panel ran in the selection (every stage, or the one stage#attempt chosen).
  panelSeats(run) {
    const seats = new Map();
    const stages = this.selector ? run.stages.filter((s) => stageLabel(s) === this.selector) : run.stages;
    for (const stage of stages) {
      for (const seat of stage.reviewers ?? []) {
        if (!seats.has(String(seat.reviewer))) seats.set(String(seat.reviewer), seat.target);
      }
    }
    return seats;
  }

  followSeats(run) {
    const seats = this.panelSeats(run);
    if (this.seat !== EVERY_SEAT && !seats.has(this.seat)) seats.set(this.seat, null);
    const mark = [...seats].join("\n");
    if (mark === this.seatOptions) return;
    this.seatOptions = mark;
    const choices = [[EVERY_SEAT, "every seat"],
      ...[...seats].map(([seat, target]) => [seat, `seat ${seat}${target ? ` (${target})` : ""}`])];
    replace(this.seatSelect, choices.map(([value, label]) =>
      h("option", {value, selected: value === this.seat ? "selected" : null}, label)));
    this.seatLabel.hidden = seats.size === 0;
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
    // A seat chosen for a panel means nothing for a stage without that seat.
    if (this.seat !== EVERY_SEAT && !this.panelSeats(this.run).has(this.seat)) this.chooseSeat(EVERY_SEAT);
    this.followSeats(this.run);
    this.remember();
    this.showJump();
  }

  chooseSeat(value) {
    this.seat = value;
    this.remember();
    for (const line of this.lines.querySelectorAll(".ll")) line.hidden = !this.shows(line);
    this.stick();
  }

  // Lines changed height (raw, a seat chosen): a follower stays at the newest.
  stick() {
    if (this.following) this.lines.scrollTop = this.lines.scrollHeight;
  }

  // The choices in the address, so a reload or a shared link opens on them.
  remember() {
    const url = new URL(location.href);
    if (this.choice === FOLLOW) url.searchParams.delete("stage");
    else url.searchParams.set("stage", this.choice === ALL ? ALL_IN_URL : this.choice);
    if (this.seat === EVERY_SEAT) url.searchParams.delete("seat");
    else url.searchParams.set("seat", this.seat);
    history.replaceState(history.state, "", `${url.pathname}${url.search}${url.hash}`);
  }

  shows(line) {
    return this.seat === EVERY_SEAT || line.dataset.seat === this.seat;
  }

  query(extra = {}) {
    const query = new URLSearchParams({run: this.run.id, ...extra});
    if (this.selector) query.set("stage", this.selector);
    return query;
  }

  open(selector) {
    if (selector === this.selector) return;
    this.selector = selector;
    this.feed?.close();
    this.reset();
    this.status.textContent = selector ? `Output of ${selector}` : "Output of every stage";
    this.download.setAttribute("href", `/api/log?${this.query()}`);
    this.downloadRaw.setAttribute("href", `/api/log?${this.query({raw: "1"})}`);
    this.feed = follow(`/sse/logs?${this.query()}`, {
      records: ({records, elided}) => this.add(records, elided),
      end: () => { this.status.textContent += " (the run has settled)"; },
      problem: (error) => { this.status.textContent = `${error.code}: ${error.message}`; },
    });
  }

  // One record as `sloopctl logs` prints it: a prefixed row per line of its text.
  // On a phone the prefix is shorter ("[impl#2 err]", style.css), the whole one on hover.
  line(record, key) {
    const seat = Number.isInteger(record.reviewer) ? String(record.reviewer) : "";
    const stage = String(record.stage ?? "-");
    const attempt = record.attempt ? `#${record.attempt}` : "";
    const where = `${stage}${attempt}${seat ? ` seat ${seat}` : ""}`;
    const prefix = `[${where} ${record.stream}]`;
    const short = `[${stage.length > 6 ? stage.slice(0, 4) : stage}${attempt}${seat ? ` s${seat}` : ""} ${SHORT_STREAMS[record.stream] ?? record.stream}]`;
    const tag = () => h("span", {class: "ll-where", title: prefix, dataset: {short}}, prefix);
    const raw = String(record.text ?? "");
    const rows = (text, kind) => text.split("\n").map((part) =>
      h("div", {class: `ll-row ${kind}`}, tag(), " ", h("span", {class: "ll-text"}, part)));
    const shown = typeof record.rendered === "string"
      ? [rows(record.rendered, "ll-shown"), rows(raw, "ll-raw")]
      : [h("div", {class: "ll-row"}, tag(), " ", h("span", {class: "ll-text"}, raw))];
    const node = h("div", {class: `ll stream-${record.stream}`, dataset: {cursor: key, seat}}, shown);
    node.hidden = !this.shows(node);
    return node;
  }

  add(records, elided) {
    // What lies before the first records the feed sent (an empty backlog says nothing).
    if (this.elided === null && records.length) this.elided = elided ?? 0;
    const stick = this.following;
    let added = 0;
    for (const record of records) {
      const key = String(record.cursor);
      if (this.seen.has(key)) continue;
      const node = this.line(record, key);
      this.seen.set(key, node);
      this.tail.append(node);
      added += 1;
    }
    if (stick) {
      // Trimmed lines go back to the "earlier" count; never once the reader read the head.
      while (this.headCount === 0 && this.tail.children.length > MAX_LINES) {
        const first = this.tail.firstElementChild;
        this.seen.set(first.dataset.cursor, null);
        first.remove();
        this.trimmed += 1;
      }
      this.lines.scrollTop = this.lines.scrollHeight;
    } else {
      this.unseen += added;
    }
    this.showGap();
    this.showJump();
  }

  missing() {
    if (this.headClosed) return 0;
    return Math.max(0, (this.elided ?? 0) + this.trimmed - this.headCount);
  }

  showGap() {
    const missing = this.missing();
    this.gap.hidden = missing === 0;
    const first = this.headCount === 0;
    this.gapText.textContent = first
      ? `… ${missing} earlier record${missing === 1 ? "" : "s"} not shown`
      : `… ${missing} more record${missing === 1 ? "" : "s"} before the newest`;
    this.earlier.textContent = first ? "Show from the first line" : `Show the next ${EARLIER}`;
  }

  async loadEarlier() {
    this.earlier.disabled = true;
    try {
      const params = {limit: String(EARLIER)};
      if (this.headAfter !== null) params.after = this.headAfter;
      const selector = this.selector;
      const envelope = await read("/api/logs", Object.fromEntries(this.query(params)));
      if (selector !== this.selector) return; // the reader chose another stage meanwhile
      if (!envelope.ok) {
        this.status.textContent = `${envelope.error.code}: ${envelope.error.message}`;
        return;
      }
      const {records, next_cursor: next, complete} = envelope.data;
      for (const record of records) {
        const key = String(record.cursor);
        if (this.seen.get(key)) { this.headClosed = true; break; } // the feed's lines begin
        const node = this.line(record, key);
        this.seen.set(key, node);
        this.head.append(node);
        this.headCount += 1;
      }
      this.headAfter = next;
      if (complete) this.headClosed = true;
      this.showGap();
    } finally {
      this.earlier.disabled = false;
    }
  }

  atBottom() {
    const box = this.lines;
    return box.scrollHeight - box.scrollTop - box.clientHeight <= BOTTOM_SLACK_PX;
  }

  // Whether more lines can arrive: not once the run settled, nor for a finished execution.
  canGrow() {
    if (!this.run || this.run.terminal) return false;
    if (!this.selector) return true;
    const row = this.run.stages.find((s) => stageLabel(s) === this.selector);
    return !row || ["running", "pending"].includes(row.state);
  }

  showJump() {
    this.jump.hidden = this.following || !this.canGrow();
    this.jump.textContent = this.unseen ? `Jump to latest ↓ (${this.unseen} new)` : "Jump to latest ↓";
  }

  toLatest() {
    this.following = true;
    this.unseen = 0;
    this.lines.scrollTop = this.lines.scrollHeight;
    this.showJump();
  }
}
