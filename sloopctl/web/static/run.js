// A run: its outcome, a timeline of its stage executions, each execution's facts
// (exit code, verdict, panel seats, tokens and cost), the live output of the
// running stage (or of any stage#attempt), and the diff of its branch.

import {fields, h, put, replace, section, table} from "./dom.js";
import {loadDiff} from "./diff.js";
import {follow} from "./live.js";
import {LogView} from "./logview.js";
import {Slots} from "./sections.js";
import {duration, growing, onTick, when} from "./time.js";
import {placeLine, runningStage} from "./queue.js";
import {drawTimeline, endedBy, stageChip, stageHref} from "./timeline.js";
import {setTitle} from "./title.js";
import {
  badge, chip, nodeText, problemBox, resolutionLine, resolutionWords, runActions,
  settledRunActions, stageLabel, ticketLink, usageText,
} from "./widgets.js";

export function run(main, ref) {
  const heading = h("h1", {}, "Run ", ref);
  const top = h("div", {class: "sections"});
  const details = h("div", {class: "sections"});
  const tl = h("div", {id: "timeline"});
  const output = new LogView();
  const diffBox = h("div", {id: "diff-box"}, h("p", {class: "muted"}, "Loading the diff…"));
  replace(main, heading, top, section("Timeline", tl), output.section, details,
    section("Diff against the base", diffBox));
  const slots = new Slots(top);
  const more = new Slots(details);
  let latest = null;
  let diffMark = null;
  onTick((now) => {
    if (latest && !latest.terminal) drawTimeline(tl, latest, now);
  });
  follow(`/sse/show?ref=${encodeURIComponent(ref)}`, {
    show: (data) => {
      if (data.kind !== "run") {
        slots.update("missing", data.kind, 0, () =>
          problemBox({code: "not_found", message: `no run is called ${ref}`}));
        return;
      }
      const value = data.value;
      const now = Date.now();
      latest = value;
      replace(heading, `${value.alias} `, h("span", {class: "muted"}, value.id), " ", badge(shownState(value)),
        value.resolution ? h("span", {class: "resolved-mark"}, ` ${resolutionWords(value.resolution)}`) : "");
      setTitle(value.id, titleState(value));
      // The running stage is part of the queue's sentence ("its gate test#1 running").
      slots.update("about", {...value, stages: null, running: runningStage(value.stages)}, now,
        () => about(value));
      more.update("stages", value.stages, now, () => stages(value.stages, value.id));
      more.update("notes", value.notes, now, () => notes(value.notes ?? []));
      drawTimeline(tl, value, now);
      output.follow(value);
      // The diff is read again whenever a stage recorded a new commit (and once settled).
      const mark = JSON.stringify([value.terminal, value.stages.map((s) => s.commit)]);
      if (mark !== diffMark) {
        diffMark = mark;
        loadDiff(diffBox, value.id);
      }
    },
    problem: (error) => slots.update("problem", error, 0, () => problemBox(error)),
  });
}

// A run in flight that went silent past stall_after is shown stalled, not running
// (its state on the wire stays running: the stall is its own field).
function shownState(value) {
  return !value.terminal && value.stall ? "stalled" : value.state;
}

// The tab's word: the state, "stalled", or how a needs_review run was resolved.
function titleState(value) {
  if (value.resolution) return `${value.state} (${resolutionWords(value.resolution)})`;
  return shownState(value);
}

// The agent's exit code, but not the signal an abort sent it (-15): that is no answer.
function agentExit(value) {
  const code = value.agent_exit_code;
  if (code === null || code === undefined) return "—";
  if (code < 0 && value.state === "aborted") return "— (stopped by the abort)";
  return String(code);
}

function about(value) {
  const took = value.started_at_ms && value.finished_at_ms
    ? duration(value.finished_at_ms - value.started_at_ms) : null;
  return section("Outcome",
    h("p", {class: "outcome"}, badge(shownState(value)),
      value.reason ? h("span", {id: "reason"}, ` ${value.reason}`) : value.state === "merged" ? " — merged into main" : "",
      nextAttempt(value.followed_by)),
    resolutionLine(value.resolution),
    // Its place in the merge queue (0.9): "2nd in the merge queue, its gate … on main + R7".
    value.queue ? placeLine(value.queue, value.stages) : null,
    fields([
      ["Ticket", ticketLink(value.ticket)],
      value.halt ? ["Halt", h("code", {id: "halt"}, String(value.halt))] : null,
      value.diagnosis ? ["Diagnosis", `${value.diagnosis.classification}`,
        value.diagnosis.evidence ? h("code", {}, ` ${value.diagnosis.evidence}`) : ""] : null,
      value.stall ? ["Stalled", `${value.stall.stage}#${value.stall.attempt} silent for ${duration(value.stall.silent_for_ms)}`] : null,
      ["Flow", String(value.flow)],
      ["Branch", h("code", {}, String(value.branch))],
      ["Claimed", when(value.claimed_at_ms)],
      ["Started", when(value.started_at_ms)],
      ["Finished", when(value.finished_at_ms)],
      took ? ["Took", took] : null,
      ["Agent exit", agentExit(value)],
      ["Tokens and cost", h("span", {id: "run-usage"}, usageText(value.usage))],
    ]),
    runActions(value),
    settledRunActions(value));
}

function stages(rows, runId) {
  const body = rows.map((stage) => [
    stageChip(runId, stage),
    stage.started_at_ms ? when(stage.started_at_ms) : "—",
    stage.duration_ms !== null ? duration(stage.duration_ms)
      : stage.state === "running" ? growing(stage.started_at_ms) : "—",
    // An abort's signal (-15) is not the stage's answer: say what happened instead
    // (aborted, interrupted by a restart, or rebuilt by the merge queue).
    endedBy(stage) ?? (stage.exit_code === null ? "—" : String(stage.exit_code)),
    verdict(stage),
    stage.commit ? h("code", {}, String(stage.commit).slice(0, 12)) : "—",
    usageText(stage.usage),
    nodeText(stage.node),
  ]);
  const seats = rows.filter((s) => s.reviewers?.length).map((stage) =>
    h("div", {class: "panel", dataset: {stage: stageLabel(stage)}},
      h("h3", {}, `Panel of ${stageLabel(stage)}`),
      table(["Seat", "Target", "Verdict", "Confidence", "Reason", "Usage", "Node"],
        stage.reviewers.map((seat) => [
          h("a", {href: stageHref(runId, stage, seat.reviewer)}, `seat ${seat.reviewer}`),
          String(seat.target ?? "—"),
          chip(seat.verdict === "pass" ? "passed" : "failed", String(seat.verdict)),
          String(seat.confidence ?? "—"), String(seat.reason ?? ""), usageText(seat.usage),
          nodeText(seat.node),
        ]))));
  const discarded = rows.filter((s) => s.discarded?.length).map((stage) =>
    h("p", {class: "muted"}, `${stageLabel(stage)} left work that was not merged: `,
      stage.discarded.map((d) => `${(d.paths ?? []).join(", ")}${d.paths_omitted ? ` … and ${d.paths_omitted} more` : ""}${d.commit ? ` (${String(d.commit).slice(0, 12)})` : ""}`).join("; ")));
  return section("Stage executions",
    table(["Execution", "Started", "Took", "Exit", "Verdict", "Commit", "Usage", "Node"], body),
    seats, discarded);
}

// What decided a finished execution, in words; secondary to the verdict itself.
const SOURCES = {
  exit_code: "decided by its exit code", reported: "reported by its worker",
  missing: "its worker reported nothing", panel: "decided by the panel's quorum", git: "decided by git",
};

// The verdict first (pass or fail, confidence, advisory, the reason), its source after.
function verdict(stage) {
  if (stage.state !== "passed" && stage.state !== "failed") return "—";
  // A rebuild judged nothing: the run ahead that its candidate held left the queue.
  if (endedBy(stage) === "rebuilt") {
    return h("span", {class: "verdict"}, h("strong", {class: "verdict-word"}, "rebuilt"),
      " · not a failure", stage.reason ? h("div", {class: "reason"}, String(stage.reason)) : null);
  }
  const word = stage.state === "passed" ? "pass" : "fail";
  const parts = [h("strong", {class: `verdict-word verdict-${word}`}, word)];
  if (stage.confidence) parts.push(` · ${stage.confidence} confidence`);
  if (stage.advisory) parts.push(" · advisory");
  if (stage.reason) parts.push(h("div", {class: "reason"}, String(stage.reason)));
  if (stage.verdict_source) {
    const source = SOURCES[stage.verdict_source] ?? `decided by ${stage.verdict_source}`;
    parts.push(h("div", {class: "muted verdict-source", title: String(stage.verdict_source)}, source));
  }
  return put(h("span", {class: "verdict"}), parts);
}

// The ticket's attempt after this run, where its work went on: "→ t1#2".
function nextAttempt(next) {
  if (!next) return "";
  return h("span", {id: "followed-by"}, " → ",
    h("a", {href: `/run/${encodeURIComponent(next.id)}`}, String(next.alias ?? next.id)),
    h("span", {class: "muted"}, ` ${next.id} (next attempt, ${String(next.state)})`));
}

function notes(list) {
  if (!list.length) return null;
  return section("Notes", h("ul", {class: "notes"}, list.map((note) =>
    h("li", {}, when(note.at_ms), ` ${note.stage}#${note.attempt}`,
      note.reviewer !== null && note.reviewer !== undefined ? ` seat ${note.reviewer}` : "", ": ",
      h("span", {}, String(note.text))))));
}
