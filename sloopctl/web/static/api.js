// The gateway's JSON reads and its one write. The session cookie goes with every
// request by itself; a write also carries the CSRF header, which a page of another
// origin can neither read (/api/session is same-origin) nor send. A 401 means
// the gateway's token is not this tab's any more (it restarted): banner.js ends
// the page then, rather than show errors as if a retry could help.

import {endAccess, showUnsafe} from "./banner.js";

let session = null;

export async function getSession() {
  if (session === null) {
    const response = await fetch("/api/session", {credentials: "same-origin"});
    if (response.status === 401) {
      endAccess();
      return new Promise(() => {}); // the page stays as endAccess left it: nothing draws over it
    }
    if (!response.ok) throw new Error(`the gateway answered ${response.status}`);
    session = await response.json();
    showUnsafe(session.unsafe); // sandbox = "none": said on every page, as the CLI does
  }
  return session;
}

// The session once getSession has answered (app.js waits for it before any page).
export function current() {
  return session;
}

// The daemon's envelope ({ok, data} or {ok: false, error}) for a read.
export async function read(path, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== null && v !== undefined));
  const response = await fetch(`${path}?${query}`, {credentials: "same-origin"});
  if (response.status === 401) endAccess();
  if (response.headers.get("Content-Type")?.startsWith("application/json")) {
    return response.json();
  }
  return {ok: false, error: {code: String(response.status), message: await response.text()}};
}

// An operator verb (hold, ready, run, abort, pause, resume); the envelope, or a refusal.
export async function act(verb, args = {}) {
  const {csrf} = await getSession();
  const response = await fetch("/api/action", {
    method: "POST",
    credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-Sloop-CSRF": csrf},
    body: JSON.stringify({verb, args}),
  });
  if (response.status === 401) endAccess();
  if (response.headers.get("Content-Type")?.startsWith("application/json")) {
    return response.json();
  }
  return {ok: false, error: {code: String(response.status), message: (await response.text()).trim()}};
}
