// The dashboard: the gate, what needs a person (runs left needs_review or failed,
// however long ago; stalled runs; held tickets), runs in flight with their stage and
// silence, the merge queue, queued triggers, tickets and why they wait, recent runs, totals, and the
// activity feed. Long lists show their first rows and a "show all" button, so 200
// tickets do not push everything else off the screen.

import {h, replace, section, table} from "./dom.js";
import {follow} from "./live.js";
import {plural, Slots} from "./sections.js";
import {growing, when} from "./time.js";
import {eventWords, queueSection} from "./queue.js";
import {stageHref} from "./timeline.js";
import {
  badge, gateActions, problemBox, runActions, runLink, runState, settledRunActions, stageLabel,
  ticketActions, ticketLink, usageText, waitingText,
} from "./widgets.js";

export function dashboard(main) {
  const summary = h("div", {class: "summary"});
  const views = h("div", {class: "sections"});
  const activity = h("ol", {class: "events", id: "activity"});
  replace(main, h("h1", {}, "Dashboard"), summary, views, section("Activity", activity));
  const top = new Slots(summary);
  const slots = new Slots(views);
  // Which capped lists the reader opened ("show all"): kept across feed updates.
  const opened = new Set();
  let latest = null;
  const draw = () => render(top, slots, latest, Date.now(), opened, toggle);
  const toggle = (name) => {
    if (opened.has(name)) opened.delete(name); else opened.add(name);
    draw();
  };
  follow("/sse/show", {
    show: (data) => {
      latest = data;
      draw();
    },
    problem: (error) => slots.update("problem", error, 0, () => problemBox(error)),
  });
  follow("/sse/events", {events: ({events}) => addEvents(activity, events)});
}

function render(top, slots, data, now, opened, toggle) {
  top.update("gate", [data.gate, data.next_wake, data.daemon?.store_fault,
    data.daemon?.sandbox?.workspaces], now,
    () => gateSection(data));
  top.update("usage", [data.usage, data.recent_total, data.runs?.length, data.tickets?.length], now,
    () => section("Totals",
      h("p", {class: "usage", id: "totals"},
        data.usage ? `Every run's agents: ${usageText(data.usage)}` : "No tokens or cost reported yet."),
      h("p", {class: "muted"}, `${data.runs?.length ?? 0} in flight · ${plural(data.tickets?.length ?? 0, "open ticket")} · `,
        h("a", {href: "/runs", id: "settled-link"}, plural(data.recent_total ?? 0, "settled run")))));
  const attention = [data.attention, data.attention_total, stalled(data.runs),
    held(data.tickets).length, data.gate];
  slots.update("attention", [attention, opened.has("attention")], now,
    () => attentionSection(data, now, opened.has("attention"), toggle));
  slots.update("runs", data.runs, now, () => runsSection(data.runs ?? [], now));
  // The merge queue (0.9), after the runs in flight; nothing while it is empty.
  const running = (data.runs ?? []).map((run) => [run.id, run.current?.stage, run.current?.attempt]);
  slots.update("queue", [data.queue, data.merge_window, running], now,
    () => queueSection(data, data.runs));
  slots.update("queued", [data.queued_triggers, opened.has("queued")], now,
    () => section("Queued triggers", ...capped("queued", data.queued_triggers ?? [], QUEUED_SHOWN,
      opened, toggle, "queued triggers", (shown) => table(["Trigger", "Ticket", "Due"],
        shown.map((t) => [t.id, ticketLink(t.ticket), when(t.due_at_ms)]), "Nothing queued."))));
  slots.update("tickets", [data.tickets, data.attention, data.gate, opened.has("tickets")], now,
    () => ticketsSection(data.tickets ?? [], data.attention ?? [], data.gate, opened, toggle));
  slots.update("recent", [data.recent, data.recent_total], now, () => recentSection(data));
}

const ATTENTION_SHOWN = 8;
const QUEUED_SHOWN = 5;
const TICKETS_SHOWN = 10;

// [its first rows (all of them once opened) drawn, the "show all N" button]
function capped(name, items, limit, opened, toggle, noun, draw) {
  if (items.length <= limit) return [draw(items)];
  const open = opened.has(name);
  const button = h("button", {
    type: "button",
    class: "more",
    id: `more-${name}`,
    "aria-expanded": open ? "true" : "false",
    onclick: () => toggle(name),
  }, open ? `Show the first ${limit} only` : `Show all ${items.length} ${noun}`);
  return [draw(open ? items : items.slice(0, limit)), h("p", {class: "more-bar"}, button)];
}

const stalled = (runs) => (runs ?? []).filter((run) => run.stall);
const held = (tickets) => (tickets ?? []).filter((t) => t.state === "held");

// What waits for a person. Runs that left a ticket needs_review or failed come from
// the daemon's own list (attention), not from the recent window, so no number of
// later runs pushes one off; a ticket leaves it when it runs again, and a run when
// it is resolved (merged by hand, dismissed). Each row offers its ways out there.
// Held tickets wait by intent: they are counted apart, not rows (they are under
// Tickets).
function attentionSection(data, now, open, toggle) {
  const items = [
    ...(data.attention ?? []).filter((run) => !run.resolution).map((run) => ({data: {run: run.id}, cells: [
      runLink(run), ticketLink(run.ticket), badge(run.state), when(run.finished_at_ms),
      String(run.reason ?? ""), settledRunActions(run, data.gate),
    ]})),
    ...stalled(data.runs).map((run) => ({data: {run: run.id}, cells: [
      runLink(run), ticketLink(run.ticket),
      h("span", {class: "stall"}, badge("running"), " ▲ stalled"),
      run.current && typeof run.current.silent_for_ms === "number"
        ? h("span", {}, "silent for ", growing(now - run.current.silent_for_ms)) : "—",
      run.current ? h("a", {href: stageHref(run.id, run.current)}, `${stageLabel(run.current)} is silent`) : "",
      runActions(run),
    ]})),
  ];
  const opened = new Set(open ? ["attention"] : []);
  const more = (data.attention_total ?? 0) > (data.attention ?? []).length
    ? h("p", {class: "muted"}, `${data.attention.length} of ${data.attention_total} runs shown: see `,
      h("a", {href: "/runs?state=needs_review"}, "needs review"), " and ",
      h("a", {href: "/runs?state=failed"}, "failed"), " runs") : null;
  const heldCount = held(data.tickets).length;
  const aside = heldCount ? h("p", {class: "muted", id: "attention-held"},
    badge("held"), ` ${heldCount} ${heldCount === 1 ? "ticket" : "tickets"} held, waiting by intent ('ready' releases one), under `,
    h("a", {href: "#tickets"}, "Tickets")) : null;
  return h("section", {class: "card attention", id: "attention"},
    h("h2", {}, items.length ? `Needs attention (${items.length})` : "Needs attention"),
    ...capped("attention", items, ATTENTION_SHOWN, opened, toggle, "items",
      (shown) => table(["Run", "Ticket", "State", "Since", "Why", ""], shown,
        "Nothing needs a person now.")),
    more, aside);
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
    wholeCheckouts(data.daemon?.sandbox?.workspaces),
    gateActions(gate));
}

// Since 0.9.0: a host without copy-on-write checkouts makes a whole one per stage,
// whose start grows with the tree; the daemon says why, and so does the page.
function wholeCheckouts(workspaces) {
  if (!workspaces || workspaces.mode !== "whole") return null;
  return h("p", {id: "checkouts", class: "muted"},
    "Stages start in whole checkouts (slower on large trees): ", String(workspaces.reason ?? ""));
}

function runsSection(runs, now) {
  const rows = runs.map((run) => {
    const stage = run.current;
    const silent = stage && typeof stage.silent_for_ms === "number"
      ? growing(now - stage.silent_for_ms) : "—";
    return [
      runLink(run),
      ticketLink(run.ticket),
      stage ? h("span", {class: "stage-now"}, badge("running"), " ",
        h("a", {href: stageHref(run.id, stage)}, stageLabel(stage))) : badge(run.state),
      h("span", {class: run.stall ? "stall" : ""}, silent, run.stall ? " ▲ stalled" : ""),
      when(run.started_at_ms ?? run.claimed_at_ms),
      usageText(run.usage),
      runActions(run),
    ];
  });
  return section("Runs in flight",
    table(["Run", "Ticket", "Stage", "Silent for", "Started", "Usage", ""], rows, "No run in flight."));
}

// The open tickets, but those whose run is a Needs attention row (each thing once).
function ticketsSection(all, attention, gate, opened, toggle) {
  const above = new Set(attention.filter((run) => !run.resolution).map((run) => run.ticket));
  const tickets = all.filter((t) => !above.has(t.id));
  const rows = tickets.map((t) => [
    ticketLink(t.id),
    h("a", {href: `/ticket/${encodeURIComponent(t.id)}`, class: "title"}, String(t.title)),
    badge(t.state),
    waitingText(t.waiting),
    ticketActions(t, gate),
  ]);
  const skipped = all.length - tickets.length;
  const card = section(all.length ? `Tickets (${all.length} open)` : "Tickets",
    skipped ? h("p", {class: "muted", id: "tickets-above"},
      `${skipped === 1 ? "1 is" : `${skipped} are`} under `, h("a", {href: "#attention"}, "Needs attention"),
      skipped === 1 ? ", with its run" : ", with their runs") : null,
    ...capped("tickets", rows, TICKETS_SHOWN, opened, toggle, "tickets",
      (shown) => table(["Id", "Title", "State", "Waiting", ""], shown,
        skipped ? "No other open ticket." : "No open ticket. Post one with 'sloopctl post'.")));
  card.id = "tickets";
  return card;
}

function recentSection(data) {
  const rows = (data.recent ?? []).map((run) => [
    runLink(run),
    runState(run),
    when(run.finished_at_ms),
    String(run.reason ?? ""),
    usageText(run.usage),
  ]);
  const total = data.recent_total ?? 0;
  const shown = total ? h("p", {class: "muted"}, h("a", {href: "/runs", id: "recent-all"},
    rows.length < total ? `${rows.length} of ${plural(total, "settled run")}: all of them, by state`
      : `${plural(total, "settled run")}: by state`)) : null;
  return section("Recent runs", table(["Run", "State", "Finished", "Reason", "Usage"], rows,
    "No run has settled yet."), shown);
}

const EVENTS_SHOWN = 30;

function addEvents(list, events) {
  for (const event of events) {
    if (list.querySelector(`[data-cursor="${CSS.escape(String(event.cursor))}"]`)) continue;
    // The merge queue's events in words, as `sloopctl events` prints them.
    const data = eventWords(event.kind, event.data) ?? Object.entries(event.data ?? {})
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
