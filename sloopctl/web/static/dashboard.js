// The dashboard: the gate, runs in flight with their stage and silence, queued
// triggers, tickets and why they wait, recent runs, totals, and the activity feed.

import {h, replace, section, table} from "./dom.js";
import {follow} from "./live.js";
import {Slots} from "./sections.js";
import {growing, when} from "./time.js";
import {
  badge, gateActions, problemBox, runActions, runLink, stageLabel, ticketActions, ticketLink,
  usageText, waitingText,
} from "./widgets.js";

export function dashboard(main) {
  const summary = h("div", {class: "summary"});
  const views = h("div", {class: "sections"});
  const activity = h("ol", {class: "events", id: "activity"});
  replace(main, h("h1", {}, "Dashboard"), summary, views, section("Activity", activity));
  const top = new Slots(summary);
  const slots = new Slots(views);
  follow("/sse/show", {
    show: (data) => render(top, slots, data, Date.now()),
    problem: (error) => slots.update("problem", error, 0, () => problemBox(error)),
  });
  follow("/sse/events", {events: ({events}) => addEvents(activity, events)});
}

function render(top, slots, data, now) {
  top.update("gate", [data.gate, data.next_wake, data.daemon?.store_fault], now,
    () => gateSection(data));
  top.update("usage", [data.usage, data.recent_total, data.runs?.length, data.tickets?.length], now,
    () => section("Totals",
      h("p", {class: "usage", id: "totals"},
        data.usage ? `Every run's agents: ${usageText(data.usage)}` : "No tokens or cost reported yet."),
      h("p", {class: "muted"}, `${data.runs?.length ?? 0} in flight · ${data.tickets?.length ?? 0} open tickets · ${data.recent_total ?? 0} settled runs`)));
  slots.update("runs", data.runs, now, () => runsSection(data.runs ?? [], now));
  slots.update("queued", data.queued_triggers, now,
    () => section("Queued triggers", table(["Trigger", "Ticket", "Due"],
      (data.queued_triggers ?? []).map((t) => [t.id, ticketLink(t.ticket), when(t.due_at_ms)]),
      "Nothing queued.")));
  slots.update("tickets", [data.tickets, data.gate], now, () => ticketsSection(data.tickets ?? [], data.gate));
  slots.update("recent", [data.recent, data.recent_total], now, () => recentSection(data));
}

function gateSection(data) {
  const gate = data.gate ?? {};
  const fault = data.daemon?.store_fault;
  return section("Gate",
    h("p", {id: "gate"}, badge(gate.state),
      gate.reason ? ` ${gate.reason}` : "",
      gate.until_ms ? h("span", {}, " until ", when(gate.until_ms)) : ""),
    data.next_wake ? h("p", {class: "muted"}, "Next look at the queue: ", when(data.next_wake)) : null,
    fault ? problemBox({code: `store ${fault.reason}`, message: fault.detail}) : null,
    gateActions(gate));
}

function runsSection(runs, now) {
  const rows = runs.map((run) => {
    const stage = run.current;
    const silent = stage && typeof stage.silent_for_ms === "number"
      ? growing(now - stage.silent_for_ms) : "—";
    return [
      runLink(run),
      ticketLink(run.ticket),
      stage ? h("span", {class: "stage-now"}, badge("running"), " ", stageLabel(stage)) : badge(run.state),
      h("span", {class: run.stall ? "stall" : ""}, silent, run.stall ? " ▲ stalled" : ""),
      when(run.started_at_ms ?? run.claimed_at_ms),
      usageText(run.usage),
      runActions(run),
    ];
  });
  return section("Runs in flight",
    table(["Run", "Ticket", "Stage", "Silent for", "Started", "Usage", ""], rows, "No run in flight."));
}

function ticketsSection(tickets, gate) {
  const rows = tickets.map((t) => [
    ticketLink(t.id),
    h("a", {href: `/ticket/${encodeURIComponent(t.id)}`, class: "title"}, String(t.title)),
    badge(t.state),
    waitingText(t.waiting),
    ticketActions(t, gate),
  ]);
  return section("Tickets", table(["Id", "Title", "State", "Waiting", ""], rows,
    "No open ticket. Post one with 'sloopctl post'."));
}

function recentSection(data) {
  const rows = (data.recent ?? []).map((run) => [
    runLink(run),
    badge(run.state),
    when(run.finished_at_ms),
    String(run.reason ?? ""),
    usageText(run.usage),
  ]);
  const shown = rows.length < (data.recent_total ?? 0)
    ? h("p", {class: "muted"}, `${rows.length} of ${data.recent_total} settled runs`) : null;
  return section("Recent runs", table(["Run", "State", "Finished", "Reason", "Usage"], rows,
    "No run has settled yet."), shown);
}

const EVENTS_SHOWN = 30;

function addEvents(list, events) {
  for (const event of events) {
    if (list.querySelector(`[data-cursor="${CSS.escape(String(event.cursor))}"]`)) continue;
    const data = Object.entries(event.data ?? {})
      .filter(([, v]) => v !== null && v !== undefined)
      .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ");
    list.prepend(h("li", {dataset: {cursor: String(event.cursor)}},
      when(event.at_ms), " ", h("code", {}, String(event.kind)), " ",
      event.ticket ? ticketLink(event.ticket) : "", " ",
      event.run ? h("a", {href: `/run/${encodeURIComponent(event.run)}`}, String(event.run)) : "",
      " ", h("span", {class: "muted"}, data)));
  }
  while (list.children.length > EVENTS_SHOWN) list.lastElementChild.remove();
}
