// The search box: the daemon's show ladder with the text as a reference. An exact
// id, alias or name leads to its page; anything else is the pattern rung (a
// substring, or a regular expression when it has metacharacters) over tickets.

import {read} from "./api.js";
import {h, replace, section, table} from "./dom.js";
import {badge, problemBox, ticketLink, waitingText} from "./widgets.js";

export async function search(main, query) {
  const input = document.getElementById("q");
  if (input) input.value = query;
  replace(main, h("h1", {}, "Search"));
  if (!query.trim()) {
    main.append(h("p", {class: "muted"}, "Type a ticket name, an id (T3, R7), an alias (fix-login#2), project:NAME or a regular expression."));
    return;
  }
  const reply = await read("/api/show", {ref: query});
  if (!reply.ok) {
    main.append(problemBox(reply.error));
    return;
  }
  const data = reply.data;
  if (data.kind === "ticket") {
    main.append(h("p", {}, "Exact match: ", ticketLink(data.value.id, `${data.value.id} ${data.value.title}`)));
    return;
  }
  if (data.kind === "run") {
    main.append(h("p", {}, "Exact match: ",
      h("a", {href: `/run/${encodeURIComponent(data.value.id)}`}, `${data.value.alias} (${data.value.id})`)));
    return;
  }
  const tickets = data.kind === "project" ? data.value.tickets : data.tickets;
  const title = data.kind === "project" ? `Project ${data.value.name}` : `Tickets matching “${query}”`;
  const rows = (tickets ?? []).map((t) => [ticketLink(t.id), ticketLink(t.id, t.title), badge(t.state), waitingText(t.waiting)]);
  main.append(section(title, table(["Id", "Title", "State", "Waiting"], rows, "No ticket matches."),
    data.total > rows.length ? h("p", {class: "muted"}, `${rows.length} of ${data.total} shown`) : null));
}
