// A run's stage executions on one time axis, each bar as long as it took: where
// the time went, which attempt failed, what is running now. Bars of a running
// execution grow with the clock. Each bar says its state in a word and a shape
// (and failed bars are hatched), not by colour alone. Each bar and label is a link
// to its execution (stageHref).

import {h} from "./dom.js";
import {duration} from "./time.js";
import {SHAPES as SHAPE_OF, chip, nodeText, stageLabel} from "./widgets.js";

// What cut an execution short: "aborted", "interrupted" (a daemon restart) or
// "rebuilt" (the merge queue rebuilt its candidate after a run ahead left), from the
// row's ended_by (0.9; 0.8.0's aborted: true is "aborted"); null for one that ended
// on its own. Its state stays "failed" for v1 clients.
const ENDED = new Set(["aborted", "interrupted", "rebuilt"]);

export function endedBy(stage) {
  if (stage.state !== "failed") return null;
  if (ENDED.has(stage.ended_by)) return stage.ended_by;
  return stage.aborted ? "aborted" : null;
}

// An execution's drawn state: one cut short is drawn as a stop or a rebuild, not as a
// failure with the signal's exit code.
export function executionState(stage) {
  return endedBy(stage) ?? stage.state;
}

// The deep link to one execution (and one panel seat) of a run: the run page opens
// with its output selected, and the address survives a reload and can be shared.
export function stageHref(runId, stage, seat) {
  const query = new URLSearchParams({stage: stageLabel(stage)});
  if (seat !== undefined && seat !== null) query.set("seat", String(seat));
  return `/run/${encodeURIComponent(runId)}?${query}`;
}

// A stage chip that is a link to its execution (a pending stage has none: a chip);
// a settled run's pending row (`unreached`) reads "not reached".
export function stageChip(runId, stage) {
  const label = stageLabel(stage);
  if (stage.unreached) return chip("not_reached", `${label} · not reached`);
  const drawn = chip(executionState(stage), label);
  if (!stage.attempt) return drawn;
  return h("a", {href: stageHref(runId, stage), class: "chip-link", "aria-label": `${label}: ${executionState(stage)}`}, drawn);
}

// The timeline drawn last: while its executions are the same, a tick (or a new view
// of the same run) repaints its geometry in place instead of building new nodes, so
// a bar under the pointer or the keyboard focus is not replaced mid-click.
let drawn = null;

export function timeline(run, now) {
  const executions = (run.stages ?? []).filter((s) => s.attempt > 0 && s.started_at_ms);
  if (!executions.length) {
    drawn = null;
    return h("p", {class: "muted"}, "No stage has started yet.");
  }
  const key = JSON.stringify([run.id, run.finished_at_ms, executions.map((s) => [
    s.stage, s.attempt, s.state, s.aborted, s.ended_by, s.advisory, s.started_at_ms, s.finished_at_ms,
    s.exit_code, s.node?.id ?? null, s.node?.host ?? null,
  ])]);
  if (drawn?.key !== key) drawn = {key, ...build(run, executions)};
  drawn.paint(now);
  return drawn.node;
}

function build(run, executions) {
  const start = Math.min(...executions.map((s) => s.started_at_ms));
  const rows = executions.map((stage) => {
    const state = executionState(stage);
    const href = stageHref(run.id, stage);
    const bar = h("a", {
      href,
      class: `bar state-${state}${stage.advisory ? " advisory" : ""}`,
      "aria-label": `${stageLabel(stage)} ${state}`,
    });
    const took = document.createTextNode("");
    const row = h("div", {class: "tl-row", dataset: {stage: stageLabel(stage), state}},
      h("a", {class: "tl-label", href}, chip(state, stageLabel(stage))),
      h("span", {class: "tl-track"}, bar),
      h("span", {class: "tl-took"}, took,
        endedBy(stage) ? ` · ${SHAPE_OF[endedBy(stage)]} ${endedBy(stage)}`
          : stage.exit_code !== null && stage.exit_code !== undefined ? ` · exit ${stage.exit_code}` : "",
        // Where it ran (0.8.0): a Ray node; nothing for the daemon's own host.
        stage.node ? h("span", {class: "tl-node"}, ` · on ${nodeText(stage.node)}`) : ""));
    return {stage, state, bar, took, row};
  });
  const total = document.createTextNode("");
  // A group, not an image: its bars are links a screen reader must reach.
  const node = h("div", {class: "timeline", role: "group"},
    rows.map((r) => r.row),
    h("div", {class: "tl-axis"}, h("span", {}, "0"), h("span", {}, total)));
  const paint = (now) => {
    const ends = executions.map((s) => s.finished_at_ms ?? now);
    const span = Math.max(Math.max(run.finished_at_ms ?? 0, ...ends) - start, 1);
    for (const {stage, state, bar, took} of rows) {
      const length = (stage.finished_at_ms ?? now) - stage.started_at_ms;
      // Geometry through the CSSOM (allowed by the CSP, unlike a style attribute).
      bar.style.left = `${((stage.started_at_ms - start) / span) * 100}%`;
      bar.style.width = `max(3px, ${(length / span) * 100}%)`;
      bar.title = `${stageLabel(stage)} ${state}, ${duration(length)}${stage.node ? ` on ${nodeText(stage.node)}` : ""}`;
      took.textContent = duration(length);
    }
    total.textContent = duration(span);
    node.setAttribute("aria-label", `${executions.length} stage executions over ${duration(span)}`);
  };
  return {node, paint};
}

// Into ``box``: the same node stays in place (only repainted), a new one replaces it.
export function drawTimeline(box, run, now) {
  const node = timeline(run, now);
  if (box.firstChild !== node || box.childNodes.length !== 1) box.replaceChildren(node);
}
