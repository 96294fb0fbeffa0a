// The one entry point: find the page from the address, then draw it. Pages are
// plain links (a full load each), so the browser's back button and bookmarks work
// and every page opens only the feeds it shows.

import {getSession} from "./api.js";
import {dashboard} from "./dashboard.js";
import {h, replace} from "./dom.js";
import {run} from "./run.js";
import {runs} from "./runs.js";
import {search} from "./search.js";
import {ticket} from "./ticket.js";
import {setTitle, showRepository} from "./title.js";

const ROUTES = [
  [/^\/$/, (main) => dashboard(main)],
  [/^\/ticket\/([^/]+)$/, (main, ref) => ticket(main, ref)],
  [/^\/run\/([^/]+)$/, (main, ref) => run(main, ref)],
  [/^\/search$/, (main) => search(main, new URLSearchParams(location.search).get("q") ?? "")],
  [/^\/runs$/, (main) => runs(main, new URLSearchParams(location.search))],
];
const NAMES = {"/": "Dashboard", "/search": "Search", "/runs": "Runs"};

async function start() {
  const main = document.getElementById("page");
  try {
    const session = await getSession();
    document.body.dataset.actions = session.actions ? "on" : "off";
    showRepository();
    for (const [pattern, draw] of ROUTES) {
      const found = location.pathname.match(pattern);
      if (found) {
        const ref = found[1] === undefined ? undefined : decodeURIComponent(found[1]);
        setTitle(ref ?? NAMES[location.pathname]);
        await draw(main, ref);
        return;
      }
    }
    replace(main, h("p", {}, "No such page."));
  } catch (error) {
    replace(main, h("p", {class: "problem"}, `The view could not start: ${error.message}`));
  }
}

start();
