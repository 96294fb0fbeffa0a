// /runs: every settled run, newest first, a page at a time, filtered by state — the
// place a run that left the dashboard's recent window is found again. The page is
// read once, and again whenever the dashboard feed says a run settled (no timer).

import {read} from "./api.js";
import {h, replace, section, table} from "./dom.js";
import {follow} from "./live.js";
import {plural} from "./sections.js";
import {when} from "./time.js";
import {badge, problemBox, runLink, runState, ticketLink, usageText} from "./widgets.js";

export const RUN_FILTERS = ["merged", "failed", "needs_review", "aborted"];
const PAGE = 25;

export function runsHref(state, offset = 0, limit = PAGE) {
  const query = new URLSearchParams();
  if (state) query.set("state", state);
  if (offset) query.set("offset", String(offset));
  if (limit !== PAGE) query.set("limit", String(limit));
  const text = query.toString();
  return text ? `/runs?${text}` : "/runs";
}

export function runs(main, params) {
  const state = RUN_FILTERS.includes(params.get("state")) ? params.get("state") : null;
  const offset = Math.max(0, Number.parseInt(params.get("offset") ?? "0", 10) || 0);
  const limit = Math.max(1, Number.parseInt(params.get("limit") ?? "", 10) || PAGE);
  const filters = h("nav", {class: "filters navbar", "aria-label": "Filter by state"},
    [null, ...RUN_FILTERS].map((name) => h("a", {
      href: runsHref(name, 0, limit),
      class: "filter-link",
      "aria-current": name === state ? "page" : null,
    }, name ? badge(name) : "all settled runs")));
  const body = h("div", {id: "runs-list"}, h("p", {class: "muted"}, "Loading…"));
  replace(main, h("h1", {}, state ? `Runs: ${state.replace("_", " ")}` : "Runs"), filters, body);
  let settled = null;
  const load = async () => {
    const reply = await read("/api/runs", {state, offset, limit});
    if (!reply.ok) {
      replace(body, problemBox(reply.error));
      return;
    }
    replace(body, page(reply.data, state, limit));
  };
  load();
  // A run settling moves the list: the dashboard feed's recent_total tells when.
  follow("/sse/show", {
    show: (data) => {
      if (settled !== null && data.recent_total !== settled) load();
      settled = data.recent_total;
    },
  });
}

function page(data, state, limit) {
  const rows = (data.runs ?? []).map((run) => [
    runLink(run),
    ticketLink(run.ticket),
    runState(run),
    when(run.finished_at_ms),
    String(run.reason ?? ""),
    usageText(run.usage),
  ]);
  const first = data.offset + 1;
  const last = data.offset + rows.length;
  const one = state ? `${state.replace("_", " ")} run` : "settled run";
  const counted = rows.length ? `${first}–${last} of ${plural(data.total, one)}`
    : data.total ? `No run on this page (${plural(data.total, one)} in all).` : `No ${one} yet.`;
  const newer = data.offset > 0 ? h("a", {href: runsHref(state, Math.max(0, data.offset - data.limit), limit), rel: "prev"}, "← Newer") : null;
  const older = last < data.total ? h("a", {href: runsHref(state, last, limit), rel: "next"}, "Older →") : null;
  return section(state ? `Runs ${state.replace("_", " ")}` : "Settled runs, newest first",
    h("p", {class: "muted", id: "runs-count"}, counted),
    rows.length ? table(["Run", "Ticket", "State", "Finished", "Reason", "Usage"], rows) : null,
    newer || older ? h("nav", {class: "pager navbar", "aria-label": "Pages"}, newer, " ", older) : null);
}
