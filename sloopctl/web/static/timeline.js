// A run's stage executions on one time axis, each bar as long as it took: where
// the time went, which attempt failed, what is running now. Bars of a running
// execution grow with the clock. Each bar says its state in a word and a shape
// (and failed bars are hatched), not by colour alone.

import {h} from "./dom.js";
import {duration} from "./time.js";
import {chip, nodeText, stageLabel} from "./widgets.js";

export function timeline(run, now) {
  const executions = (run.stages ?? []).filter((s) => s.attempt > 0 && s.started_at_ms);
  if (!executions.length) return h("p", {class: "muted"}, "No stage has started yet.");
  const start = Math.min(...executions.map((s) => s.started_at_ms));
  const ends = executions.map((s) => s.finished_at_ms ?? now);
  const end = Math.max(run.finished_at_ms ?? 0, ...ends);
  const span = Math.max(end - start, 1);
  const rows = executions.map((stage) => {
    const finish = stage.finished_at_ms ?? now;
    const bar = h("span", {
      class: `bar state-${stage.state}${stage.advisory ? " advisory" : ""}`,
      title: `${stageLabel(stage)} ${stage.state}, ${duration(finish - stage.started_at_ms)}${stage.node ? ` on ${nodeText(stage.node)}` : ""}`,
    });
    // Geometry through the CSSOM (allowed by the CSP, unlike a style attribute).
    bar.style.left = `${((stage.started_at_ms - start) / span) * 100}%`;
    bar.style.width = `max(3px, ${((finish - stage.started_at_ms) / span) * 100}%)`;
    return h("div", {class: "tl-row", dataset: {stage: stageLabel(stage), state: stage.state}},
      h("span", {class: "tl-label"}, chip(stage.state, stageLabel(stage))),
      h("span", {class: "tl-track"}, bar),
      h("span", {class: "tl-took"}, duration(finish - stage.started_at_ms),
        stage.exit_code !== null && stage.exit_code !== undefined ? ` · exit ${stage.exit_code}` : "",
        // Where it ran (0.8.0): a Ray node; nothing for the daemon's own host.
        stage.node ? h("span", {class: "tl-node"}, ` · on ${nodeText(stage.node)}`) : ""));
  });
  return h("div", {class: "timeline", role: "img", "aria-label": `${executions.length} stage executions over ${duration(span)}`},
    rows,
    h("div", {class: "tl-axis"}, h("span", {}, "0"), h("span", {}, duration(span))));
}
