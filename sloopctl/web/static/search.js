// The search box: the daemon's show ladder with the text as a reference. An exact
// id, alias or name goes to its page; anything else is the pattern rung (a
// substring, or a regular expression when it has metacharacters) over tickets'
// ids, names and titles.

import {read} from "./api.js";
import {h, localHref, replace, section, table} from "./dom.js";
import {badge, problemBox, ticketLink, waitingText} from "./widgets.js";

export async function search(main, query) {
  const input = document.getElementById("q");
  if (input) input.value = query;
  replace(main, h("h1", {}, "Search"));
  if (!query.trim()) {
    main.append(h("p", {class: "muted"}, "Type words of a ticket's title, a ticket name, an id (T3, R7), an alias (fix-login#2), project:NAME or a regular expression."));
    return;
  }
  const reply = await read("/api/show", {ref: query});
  if (!reply.ok) {
    main.append(problemBox(reply.error));
    return;
  }
  const data = reply.data;
  // An exact id, alias or name goes straight to its page; replace(), so the back
  // button returns to the page the search was typed on, not to this redirect.
  if (data.kind === "ticket" || data.kind === "run") {
    const page = `/${data.kind}/${encodeURIComponent(data.value.id)}`;
    main.append(h("p", {}, "Exact match: ", h("a", {href: page}, String(data.value.id))));
    location.replace(localHref(page));
    return;
  }
  const tickets = data.kind === "project" ? data.value.tickets : data.tickets;
  const title = data.kind === "project" ? `Project ${data.value.name}` : `Tickets matching “${query}”`;
  const rows = (tickets ?? []).map((t) => [ticketLink(t.id), ticketLink(t.id, t.title), badge(t.state), waitingText(t.waiting)]);
  main.append(section(title, table(["Id", "Title", "State", "Waiting"], rows, "No ticket matches."),
    data.total > rows.length ? h("p", {class: "muted"}, `${rows.length} of ${data.total} shown`) : null));
}
