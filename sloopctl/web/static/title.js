// The page's name, in the header and the tab: what the page shows, the run's state
// where there is one, and the repository, so a person with several tabs (or several
// gateways) open can tell them apart — "R7 · merged · myrepo — Sloop".

import {current} from "./api.js";

export function setTitle(...parts) {
  const repo = current()?.repo;
  const named = [...parts, repo].filter((part) => part !== null && part !== undefined && part !== "");
  document.title = named.length ? `${named.join(" · ")} — Sloop` : "Sloop";
}

// The header's repository label (the brand links to the dashboard beside it).
export function showRepository() {
  const repo = current()?.repo;
  const label = document.getElementById("repo-name");
  if (label) label.textContent = repo ? String(repo) : "";
}
