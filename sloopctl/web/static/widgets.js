// Small pieces every page shares: state badges, usage, links and action buttons.
// A state is never told by colour alone: each badge has a shape and a word too.

import {act, current} from "./api.js";
import {h} from "./dom.js";
import {when} from "./time.js";

export const SHAPES = {
  merged: "✔", passed: "✔", open: "●", ready: "○",
  failed: "✖", aborted: "■", needs_review: "◆",
  running: "▶", claimed: "▷", pending: "·", not_reached: "–", stalled: "▲",
  held: "❚❚", paused: "❚❚", cooldown: "◔",
  // An execution cut short by a restart, or by the merge queue's rebuild.
  interrupted: "■", rebuilt: "↻",
  // A run's state in the merge queue.
  waiting: "◌", building: "▷", gating: "▶", landing: "➔",
};

export function badge(state, extra = "") {
  const name = String(state ?? "unknown");
  const shape = SHAPES[name] ?? "?";
  return h("span", {class: `badge state-${name.replace(/[^a-z_]/g, "")}`, title: name},
    h("span", {class: "shape", "aria-hidden": "true"}, shape),
    " ", name.replace("_", " "), extra);
}

// A compact badge: the state's shape and colour beside a label (a stage execution).
export function chip(state, label) {
  const name = String(state ?? "unknown");
  return h("span", {class: `chip state-${name.replace(/[^a-z_]/g, "")}`, title: `${label}: ${name}`},
    h("span", {class: "shape", "aria-hidden": "true"}, SHAPES[name] ?? "?"), " ", label);
}

// A token count as `sloopctl show` cuts it (sloopctl/usage_text.py count, integer
// arithmetic there and here, halves up): 950, 1.2k, 12k, 1.2M.
function count(n) {
  const tenths = (unit) => Math.floor((n + unit / 20) / (unit / 10));
  if (n >= 999_500) return `${Math.floor(tenths(1_000_000) / 10)}.${tenths(1_000_000) % 10}M`;
  if (n >= 9_950) return `${Math.floor((n + 500) / 1000)}k`;
  if (n >= 1000) return `${Math.floor(tenths(1000) / 10)}.${tenths(1000) % 10}k`;
  return String(n);
}

// A Ray node as host/id (its first 12 hex digits), as `sloopctl show` writes it.
export function nodeText(node) {
  if (!node) return "—";
  const id = String(node.id ?? "").slice(0, 12);
  return id ? `${node.host ?? "?"}/${id}` : String(node.host ?? "?");
}

// One rule with `sloopctl show` and `sloopctl logs` (docs/agents.md "Tokens"):
// "52k in (40k cached), 1.8k out, $0.0421"; `in` already counts the cached input.
export function usageText(usage) {
  if (!usage) return "—";
  const number = (value) => (Number.isInteger(value) ? value : 0);
  let words = `${count(number(usage.input_tokens))} in`;
  if (number(usage.cached_tokens)) words += ` (${count(usage.cached_tokens)} cached)`;
  words += `, ${count(number(usage.output_tokens))} out`;
  if (typeof usage.cost_usd === "number") words += `, $${usage.cost_usd.toFixed(4)}`;
  return words;
}

export function runLink(run) {
  return h("a", {href: `/run/${encodeURIComponent(run.id)}`, class: "run-link"},
    String(run.alias ?? run.id), h("span", {class: "muted"}, ` ${run.id}`));
}

export function ticketLink(id, label) {
  return h("a", {href: `/ticket/${encodeURIComponent(id)}`}, String(label ?? id));
}

export function waitingText(waiting) {
  if (!waiting) return "—";
  return h("span", {class: "waiting", title: String(waiting.message ?? "")},
    h("code", {}, String(waiting.reason)), waiting.message ? `: ${waiting.message}` : "");
}

export function stageLabel(row) {
  return row.attempt ? `${row.stage}#${row.attempt}` : String(row.stage);
}

// What a verb's answer changed, in words (not "done": a hold of a held ticket
// changes nothing, and the reader should see what the daemon now says).
function outcome(verb, data) {
  if (verb === "resolve" && data?.run) return `${data.run.id} ${resolutionWords(data.run.resolution)}`;
  if (data?.ticket && verb !== "run") return `now ${data.ticket.state}`;
  if (data?.trigger) return `queued (${data.trigger.id})`;
  if (data?.run) return `${data.run.id} ${data.run.state}`;
  if (data?.gate) return `gate ${data.gate.state}`;
  return "done";
}

// An in-page confirmation with a reason field (Abort, Pause). Resolves to the
// reason typed (possibly ""), or null when cancelled: then nothing is sent.
export function confirmAction({title, text, action, placeholder}) {
  return new Promise((resolve) => {
    const reason = h("input", {type: "text", name: "reason", id: "confirm-reason", class: "confirm-reason",
      maxlength: "500", placeholder: placeholder ?? "", autocomplete: "off"});
    const dialog = h("dialog", {class: "confirm", "aria-labelledby": "confirm-title"});
    let answer = null;
    const cancel = h("button", {type: "button", class: "confirm-cancel", onclick: () => dialog.close()}, "Cancel");
    const go = h("button", {type: "submit", class: "confirm-go"}, action);
    const form = h("form", {method: "dialog", onsubmit: (event) => {
      event.preventDefault();
      answer = reason.value.trim();
      dialog.close();
    }},
      h("h2", {id: "confirm-title"}, title),
      text ? h("p", {}, text) : null,
      h("label", {for: "confirm-reason"}, "Reason (optional)"),
      reason,
      h("div", {class: "confirm-buttons"}, cancel, go));
    dialog.append(form);
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(answer);
    });
    document.body.append(dialog);
    dialog.showModal();
    reason.focus();
  });
}

// A button that calls an operator verb; only with --allow-actions (else nothing).
// options.confirm: ask first, the reason typed goes as args.reason (options.confirm.
// fallback when left empty); options.disabled: why it cannot be used now (shown).
export function actionButton(label, verb, args, options = {}) {
  if (!current()?.actions) return null;
  // Not a live region until its button is used: a page of 200 ticket rows would
  // otherwise carry 200 (the page's live regions are the connection state and the log).
  const out = h("span", {class: "action-result"});
  const button = h("button", {
    type: "button",
    class: `action action-${verb}${options.variant ? ` action-${verb}-${options.variant}` : ""}`,
    "data-verb": verb,
    onclick: async () => {
      let sent = typeof args === "function" ? args() : {...args};
      if (options.confirm) {
        const reason = await confirmAction(options.confirm);
        if (reason === null) return; // cancelled: nothing reaches the daemon
        const why = reason || options.confirm.fallback;
        if (why) sent = {...sent, reason: why};
      }
      button.disabled = true;
      out.setAttribute("role", "status"); // live from now on, so the answer is read out
      out.textContent = "…";
      const reply = await act(verb, sent);
      button.disabled = false;
      out.textContent = reply.ok ? outcome(verb, reply.data) : `${reply.error.code}: ${reply.error.message}`;
      out.className = `action-result ${reply.ok ? "ok" : "bad"}`;
      if (reply.ok && options.done) options.done(reply.data);
    },
  }, label);
  if (options.disabled) {
    button.disabled = true;
    button.title = options.disabled;
    out.textContent = options.disabled;
    out.className = "action-result muted";
  }
  return h("span", {class: "action-wrap"}, button, out);
}

// [label, verb, args, options] specs -> a row of buttons, or null in a read-only
// view or when none applies (a null spec is one that does not apply).
export function actionBar(...specs) {
  const present = specs.filter(Boolean).map((spec) => actionButton(...spec)).filter(Boolean);
  return present.length ? h("div", {class: "actions"}, present) : null;
}

// Which ticket verbs apply in which state (docs/protocol.md, "hold and ready",
// "run"): hold a ready ticket, release a held one, run a ready one or start the
// next attempt of a failed or needs_review one; nothing for a running or merged
// ticket (abort its run instead) or a state this view does not know.
export function ticketActions(ticket, gate = null) {
  const ref = {ref: ticket.id};
  const state = ticket.state;
  const cooldown = gate?.state === "cooldown" || (ticket.waiting?.reason === "cooldown" && ticket.waiting?.until_ms);
  const blocked = cooldown ? {disabled: "the gate is in cooldown: 'run' is refused until it ends (Resume ends it)"} : {};
  return tagged(actionBar(
    state === "ready" ? ["Hold", "hold", ref] : null,
    state === "held" ? ["Ready", "ready", ref] : null,
    state === "ready" ? ["Run", "run", ref, blocked] : null,
    state === "failed" || state === "needs_review" ? ["Run again", "run", ref, blocked] : null,
  ), {ticket: String(ticket.id)});
}

// Which ticket, run or gate a bar acts on, for whoever reads the page's markup.
function tagged(bar, data) {
  if (bar) Object.assign(bar.dataset, data);
  return bar;
}

// Pause while the gate is open or cooling down (a pause replaces a cooldown);
// Resume while paused or cooling down (it ends a cooldown early).
export function gateActions(gate) {
  const state = gate?.state;
  return tagged(actionBar(
    state === "open" || state === "cooldown" ? ["Pause", "pause", {}, {confirm: {
      title: "Pause the gate?",
      text: "No trigger is claimed until Resume; runs in flight go on.",
      action: "Pause",
      placeholder: "paused from the web view",
      fallback: "paused from the web view",
    }}] : null,
    state === "paused" || state === "cooldown" ? ["Resume", "resume", {}] : null,
  ), {gate: String(state)});
}

// Abort only a run in flight; it asks first, and the reason goes on the run.
export function runActions(run) {
  if (!run || run.terminal || !["claimed", "running"].includes(run.state)) return null;
  return tagged(actionBar([`Abort ${run.id}`, "abort", {run: run.id}, {confirm: {
    title: `Abort ${run.alias ?? run.id}?`,
    text: "Its processes are stopped, the run settles aborted and its ticket is held.",
    action: `Abort ${run.id}`,
    placeholder: "why (kept in the run's reason)",
  }}]), {run: String(run.id)});
}

// A needs_review run's resolution (issue 33) in words: "resolved: merged by hand".
// Its state stays needs_review (a closed set in protocol v1); the resolution says how
// a person (or the daemon, seeing the branch on main: auto) let it go.
export function resolutionWords(resolution) {
  if (!resolution) return "";
  const how = resolution.resolution === "merged" ? "merged by hand" : String(resolution.resolution);
  return `resolved: ${how}`;
}

// As `sloopctl show RUN` says it: "resolved: merged by hand (by alice, 2 min ago):
// landed with #42", "(found on main, …)" when the daemon resolved it by itself.
// A settled run's state in a list: its badge, and how it was resolved when it was
// ("◆ needs review · resolved: dismissed"), as `sloopctl show` lists it.
export function runState(run) {
  if (!run?.resolution) return badge(run?.state);
  return h("span", {class: "run-state"}, badge(run.state),
    h("span", {class: "resolved-mark"}, ` ${resolutionWords(run.resolution)}`));
}

export function resolutionLine(resolution) {
  if (!resolution) return null;
  const who = resolution.auto ? "found on main" : resolution.by ? `by ${resolution.by}` : null;
  const at = Number.isInteger(resolution.at_ms) ? when(resolution.at_ms) : null;
  const aside = who || at ? [" (", who ?? "", who && at ? ", " : "", at ?? "", ")"] : [];
  return h("p", {class: "resolution", id: "resolution"},
    h("span", {class: "shape", "aria-hidden": "true"}, "✔ "),
    resolutionWords(resolution), ...aside,
    resolution.reason ? `: ${resolution.reason}` : "");
}

// The ways out of a settled run where its failure is read (the run page, the Needs
// attention rows): a needs_review run not yet resolved is "Merged by hand" or
// "Dismiss" (the verb resolve, asked first with a reason, as Abort is); a failed or
// needs_review run that is its ticket's latest attempt can be run again, unless it
// was resolved as merged by hand (its ticket is merged then).
export function settledRunActions(run, gate = null) {
  if (!run || !run.terminal) return null;
  const open = run.state === "needs_review" && !run.resolution;
  const name = run.alias ?? run.id;
  const resolve = (resolution, label, title, text) => [label, "resolve",
    {run: run.id, resolution}, {variant: resolution, confirm: {
      title, text, action: label, placeholder: "why (kept with the run's resolution)",
    }}];
  const again = ["failed", "needs_review"].includes(run.state) && !run.followed_by
    && run.resolution?.resolution !== "merged";
  const blocked = gate?.state === "cooldown"
    ? {disabled: "the gate is in cooldown: 'run' is refused until it ends (Resume ends it)"} : {};
  return tagged(actionBar(
    open ? resolve("merged", "Merged by hand", `Merged by hand: ${name}?`,
      "Say that a person merged this run's work: the run leaves Needs attention and its ticket reads merged.") : null,
    open ? resolve("dismissed", "Dismiss", `Dismiss ${name}?`,
      "Let this run go without merging it: it leaves Needs attention and its ticket reads failed (Run again stays possible).") : null,
    again && run.ticket ? ["Run again", "run", {ref: run.ticket}, blocked] : null,
  ), {run: String(run.id)});
}

export function problemBox(error) {
  return h("p", {class: "problem", role: "alert"},
    h("span", {class: "shape", "aria-hidden": "true"}, "▲ "),
    `${error?.code ?? "error"}: ${error?.message ?? "no answer"}`);
}
