// A ticket: its row, its text (as text), its queued trigger, and its runs, newest first.

import {fields, h, replace, section, table} from "./dom.js";
import {follow} from "./live.js";
import {Slots} from "./sections.js";
import {duration, when} from "./time.js";
import {stageChip} from "./timeline.js";
import {setTitle} from "./title.js";
import {
  badge, problemBox, runActions, runLink, runState, ticketActions, usageText, waitingText,
} from "./widgets.js";

export function ticket(main, ref) {
  const heading = h("h1", {}, "Ticket ", ref);
  const views = h("div", {class: "sections"});
  replace(main, heading, views);
  const slots = new Slots(views);
  follow(`/sse/show?ref=${encodeURIComponent(ref)}`, {
    show: (data) => {
      if (data.kind !== "ticket") {
        slots.update("missing", data.kind, 0, () =>
          problemBox({code: "not_found", message: `no ticket is called ${ref}`}));
        return;
      }
      const value = data.value;
      const now = Date.now();
      replace(heading, `${value.id} `, h("span", {class: "title", id: "ticket-title"}, String(value.title)));
      setTitle(value.id, value.state);
      slots.update("row", [value, value.runs.length], now, () => about(value));
      slots.update("runs", value.runs, now, () => runs(value.runs));
      slots.update("body", value.body, now, () => section("Text",
        h("pre", {class: "ticket-body", id: "ticket-body"}, String(value.body ?? ""))));
    },
    problem: (error) => slots.update("problem", error, 0, () => problemBox(error)),
  });
}

function about(value) {
  return section("Ticket",
    fields([
      ["State", badge(value.state, value.manual ? " (manual)" : "")],
      ["Waiting", waitingText(value.waiting)],
      ["Name", h("code", {}, String(value.name))],
      ["File", h("code", {}, String(value.path))],
      ["Project", h("a", {href: `/search?q=${encodeURIComponent(`project:${value.project}`)}`}, String(value.project))],
      ["Flow", String(value.flow)],
      ["Priority", String(value.priority)],
      value.trigger ? ["Queued", `${value.trigger.id}, due `, when(value.trigger.due_at_ms)] : null,
      ["Posted", when(value.created_at_ms)],
      ["Changed", when(value.updated_at_ms)],
      ["Usage", usageText(value.usage)],
    ]),
    ticketActions(value),
    runActions(value.runs.find((run) => !run.terminal)));
}

function runs(list) {
  const rows = list.map((run) => [
    runLink(run),
    runState(run),
    when(run.started_at_ms),
    run.finished_at_ms && run.started_at_ms ? duration(run.finished_at_ms - run.started_at_ms) : "—",
    h("span", {class: "strip"}, run.stages.map((stage) => stageChip(run.id, stage))),
    String(run.reason ?? ""),
    usageText(run.usage),
  ]);
  return section("Runs (newest first)",
    table(["Run", "State", "Started", "Took", "Stages", "Reason", "Usage"], rows, "No run yet."));
}
