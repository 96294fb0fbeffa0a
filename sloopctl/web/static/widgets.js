// Small pieces every page shares: state badges, usage, links and action buttons.
// A state is never told by colour alone: each badge has a shape and a word too.

import {act, current} from "./api.js";
import {h} from "./dom.js";

const SHAPES = {
  merged: "✔", passed: "✔", open: "●", ready: "○",
  failed: "✖", aborted: "■", needs_review: "◆",
  running: "▶", claimed: "▷", pending: "·", not_reached: "–",
  held: "❚❚", paused: "❚❚", cooldown: "◔",
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

// A stage row's chip; a settled run's pending row (`unreached`) reads "not reached".
export function stageChip(stage) {
  return stage.unreached ? chip("not_reached", `${stageLabel(stage)} · not reached`)
    : chip(stage.state, stageLabel(stage));
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
    h("code", {}, String(waiting.reason)), " ", String(waiting.message ?? ""));
}

export function stageLabel(row) {
  return row.attempt ? `${row.stage}#${row.attempt}` : String(row.stage);
}

// A button that calls an operator verb; only with --allow-actions (else nothing).
export function actionButton(label, verb, args, done) {
  if (!current()?.actions) return null;
  const out = h("span", {class: "action-result", role: "status"});
  const button = h("button", {
    type: "button",
    class: `action action-${verb}`,
    "data-verb": verb,
    onclick: async () => {
      button.disabled = true;
      out.textContent = "…";
      const reply = await act(verb, typeof args === "function" ? args() : args);
      button.disabled = false;
      out.textContent = reply.ok ? "done" : `${reply.error.code}: ${reply.error.message}`;
      out.className = `action-result ${reply.ok ? "ok" : "bad"}`;
      if (reply.ok && done) done(reply.data);
    },
  }, label);
  return h("span", {class: "action-wrap"}, button, out);
}

// [label, verb, args] specs -> a row of buttons, or null in a read-only view.
export function actionBar(...specs) {
  const present = specs.map((spec) => actionButton(...spec)).filter(Boolean);
  return present.length ? h("div", {class: "actions"}, present) : null;
}

export function problemBox(error) {
  return h("p", {class: "problem", role: "alert"},
    h("span", {class: "shape", "aria-hidden": "true"}, "▲ "),
    `${error?.code ?? "error"}: ${error?.message ?? "no answer"}`);
}
