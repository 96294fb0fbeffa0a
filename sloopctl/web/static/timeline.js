// A run's stage executions on one time axis, each bar as long as it took: where
// the time went, which attempt failed, what is running now. Bars of a running
// execution grow with the clock. Each bar says its state in a word and a shape
// (and failed bars are hatched), not by colour alone. Each bar and label is a link
// to its execution (stageHref).

import {h} from "./dom.js";
import {duration} from "./time.js";
import {chip, nodeText, stageLabel} from "./widgets.js";

// An execution's drawn state: an execution an abort (or a restart) cut short is
// "aborted" (the daemon marks it; its state stays "failed" for v1 clients), so it is
// drawn as a stop, not as a failure with the signal's exit code.
export function executionState(stage) {
  return stage.aborted ? "aborted" : stage.state;
}

// The deep link to one execution (and one panel seat) of a run: the run page opens
// with its output selected, and the address survives a reload and can be shared.
export function stageHref(runId, stage, seat) {
  const query = new URLSearchParams({stage: stageLabel(stage)});
  if (seat !== undefined && seat !== null) query.set("seat", String(seat));
  return `/run/${encodeURIComponent(runId)}?${query}`;
}

// A stage chip that is a link to its execution (a pending stage has none: a chip).
export function stageChip(runId, stage) {
  const label = stageLabel(stage);
  const drawn = chip(executionState(stage), label);
  if (!stage.attempt) return drawn;
  return h("a", {href: stageHref(runId, stage), class: "chip-link", "aria-label": `${label}: ${executionState(stage)}`}, drawn);
}

export function timeline(run, now) {
  const executions = (run.stages ?? []).filter((s) => s.attempt > 0 && s.started_at_ms);
  if (!executions.length) return h("p", {class: "muted"}, "No stage has started yet.");
  const start = Math.min(...executions.map((s) => s.started_at_ms));
  const ends = executions.map((s) => s.finished_at_ms ?? now);
  const end = Math.max(run.finished_at_ms ?? 0, ...ends);
  const span = Math.max(end - start, 1);
  const rows = executions.map((stage) => {
    const finish = stage.finished_at_ms ?? now;
    const state = executionState(stage);
    const href = stageHref(run.id, stage);
    const bar = h("a", {
      href,
      class: `bar state-${state}${stage.advisory ? " advisory" : ""}`,
      title: `${stageLabel(stage)} ${state}, ${duration(finish - stage.started_at_ms)}${stage.node ? ` on ${nodeText(stage.node)}` : ""}`,
      "aria-label": `${stageLabel(stage)} ${state}`,
    });
    // Geometry through the CSSOM (allowed by the CSP, unlike a style attribute).
    bar.style.left = `${((stage.started_at_ms - start) / span) * 100}%`;
    bar.style.width = `max(3px, ${((finish - stage.started_at_ms) / span) * 100}%)`;
    return h("div", {class: "tl-row", dataset: {stage: stageLabel(stage), state}},
      h("a", {class: "tl-label", href}, chip(state, stageLabel(stage))),
      h("span", {class: "tl-track"}, bar),
      h("span", {class: "tl-took"}, duration(finish - stage.started_at_ms),
        stage.aborted ? " · ■ aborted"
          : stage.exit_code !== null && stage.exit_code !== undefined ? ` · exit ${stage.exit_code}` : "",
        // Where it ran (0.8.0): a Ray node; nothing for the daemon's own host.
        stage.node ? h("span", {class: "tl-node"}, ` · on ${nodeText(stage.node)}`) : ""));
  });
  return h("div", {class: "timeline", role: "img", "aria-label": `${executions.length} stage executions over ${duration(span)}`},
    rows,
    h("div", {class: "tl-axis"}, h("span", {}, "0"), h("span", {}, duration(span))));
}
