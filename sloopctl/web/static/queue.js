// The merge queue in words, as `sloopctl show` says it (sloopctl/queue_view.py: the
// same sentences, so the page and the terminal never differ): "2nd in the merge
// queue (window 8), its gate test#1 running on main + R7". The runs a candidate is
// built on are links to their pages.

import {h, put, section, table} from "./dom.js";
import {duration} from "./time.js";
import {badge, runLink} from "./widgets.js";

const SUFFIXES = {1: "st", 2: "nd", 3: "rd"};
const SHORT_SHA = 12;

export function ordinal(n) {
  const tens = n % 100;
  return `${n}${tens >= 10 && tens <= 20 ? "th" : SUFFIXES[n % 10] ?? "th"}`;
}

const isCount = (value) => Number.isInteger(value);
const ids = (value) => (Array.isArray(value) ? value.filter((v) => v !== null && v !== undefined).map(String) : []);

// "R5", "R5 and R6", "R5, R6 and R7".
function names(runs) {
  if (runs.length <= 1) return runs.join("");
  return `${runs.slice(0, -1).join(", ")} and ${runs[runs.length - 1]}`;
}

export function shortSha(sha) {
  return typeof sha === "string" && sha ? sha.slice(0, SHORT_SHA) : "—";
}

// "main + R7 + R8", each run a link to its page.
export function onNodes(entry) {
  const parts = ["main"];
  for (const id of ids(entry.onto)) {
    parts.push(" + ", h("a", {href: `/run/${encodeURIComponent(id)}`, class: "onto-run"}, id));
  }
  return parts;
}

// What a queued run waits for, in words: its reason's, so every entry reads alike;
// the daemon's message only for a reason this view does not know.
export function waitsText(waiting, size) {
  if (!waiting || typeof waiting !== "object") return "";
  const runs = ids(waiting.runs);
  const reason = String(waiting.reason ?? "-");
  const whose = () => names(runs.map((r) => `${r}'s`));
  if (reason === "window") return `waiting for a place in the merge window${isCount(size) ? ` (${size})` : ""}`;
  if (reason === "candidate_ahead") return runs.length ? `waiting for ${whose()} candidate` : "waiting for its turn";
  if (reason === "runs_ahead" && runs.length) return `waiting for ${names(runs)} to land`;
  if (reason === "runs_ahead_gates" && runs.length) return `waiting for ${whose()} gates`;
  if (typeof waiting.message === "string" && waiting.message) return `waiting: ${waiting.message}`;
  return `waiting: ${reason}${runs.length ? ` (${names(runs)})` : ""}`;
}

// Why its candidate is to be built again, once it is (the entry's stale).
function staleText(entry) {
  return typeof entry.stale === "string" && entry.stale ? `to be rebuilt: ${entry.stale}` : "";
}

// The last running stage execution of a run's stages, "test#1"; null when none runs.
export function runningStage(stages) {
  const running = (stages ?? []).filter((s) => s && s.state === "running");
  if (!running.length) return null;
  const row = running[running.length - 1];
  return isCount(row.attempt) ? `${row.stage}#${row.attempt}` : String(row.stage);
}

// What the run does in the queue: [words before "main + …", whether "main + …"
// follows, words after], so the runs built on can be links.
function doing(entry, stage, lead) {
  const state = String(entry.state ?? "-");
  switch (state) {
    case "waiting": return ["not built yet", false, ""];
    case "building": return ["its candidate being built on ", true, ""];
    case "gating": return [stage ? `its gate ${stage} running on ` : "its gates running on ", true, ""];
    case "held": return [`${lead ? "held: " : ""}its gate failed on `, true, ""];
    case "passed": return ["its gates passed on ", true, ""];
    case "landing": return [`${lead ? "landing: " : ""}main moving to its candidate`, false,
      lead && typeof entry.candidate === "string" ? ` ${shortSha(entry.candidate)}` : ""];
    default: return [`${state} on `, true, ""];
  }
}

export function rebuildsText(entry) {
  const count = entry.rebuilds;
  if (!isCount(count) || count < 1) return "";
  return count === 1 ? "rebuilt once" : `rebuilt ${count} times`;
}

// The words after the state: doing, then what it waits for (then rebuilds, with lead).
function sentence(entry, stage, size, lead) {
  const [before, on, after] = doing(entry, stage, lead);
  const parts = [before, on ? onNodes(entry) : "", after];
  for (const words of [waitsText(entry.waiting_for, size), staleText(entry)]) {
    if (words) parts.push(`; ${words}`);
  }
  const rebuilt = lead ? rebuildsText(entry) : "";
  if (rebuilt) parts.push(`; ${rebuilt}`);
  return parts;
}

// A run's place, one line: the run page's "In the merge queue", the same words as
// `sloopctl show RUN` prints under the run's header.
export function placeLine(entry, stages, size = entry?.merge_window) {
  if (!entry || typeof entry !== "object") return null;
  const position = entry.position;
  let where = isCount(position) && position > 0 ? `${ordinal(position)} in the merge queue` : "in the merge queue";
  if (isCount(size)) where += ` (window ${size})`;
  return put(h("p", {id: "queue-place", class: "queue-place"}),
    [`${where}, `, sentence(entry, runningStage(stages), size, true)]);
}

// The dashboard's section after the runs in flight: every queued run in order, its
// state, its candidate and what it is built on and waits for. Nothing while the
// queue is empty or the daemon sends none (older than 0.9).
export function queueSection(data, runs) {
  const entries = Array.isArray(data.queue) ? data.queue.filter((e) => e && typeof e === "object") : [];
  if (!entries.length) return null;
  const size = data.merge_window;
  const stageOf = new Map((runs ?? []).map((run) => [String(run.id),
    run.current ? `${run.current.stage}#${run.current.attempt}` : runningStage(run.stages)]));
  const rows = entries.map((entry) => {
    const rebuilt = rebuildsText(entry);
    return [
      String(entry.position ?? "—"),
      runLink({id: entry.run, alias: entry.alias}),
      badge(entry.state, rebuilt ? ` (${rebuilt})` : ""),
      typeof entry.candidate === "string" ? h("code", {title: entry.candidate}, shortSha(entry.candidate)) : "—",
      put(h("span", {class: "queue-what"}), sentence(entry, stageOf.get(String(entry.run)), size, false)),
    ];
  });
  const title = isCount(size) ? `Merge queue (window ${size})` : "Merge queue";
  const drawn = table(["#", "Run", "State", "Candidate", "Built on, waiting for"], rows);
  drawn.id = "merge-queue";
  // Each row says whose it is, in queue order, for whoever reads the page's markup.
  drawn.querySelectorAll("tbody tr").forEach((row, i) => {
    row.dataset.run = String(entries[i].run ?? "");
  });
  const card = section(title, drawn);
  card.id = "queue-section";
  return card;
}

// A queue_* event's data in words (the dashboard's activity, `sloopctl events`);
// null for any other kind, whose data is shown as key=value pairs.
export function eventWords(kind, data) {
  if (typeof kind !== "string" || !kind.startsWith("queue_") || !data || typeof data !== "object") return null;
  if (kind === "queue_joined") {
    return isCount(data.position) && data.position > 0
      ? `joined the merge queue, ${ordinal(data.position)}` : "joined the merge queue";
  }
  if (kind === "queue_rebuilt") {
    // The sentence (reason, 0.9.0) where there is one, else the cause's label.
    const said = data.reason || data.cause;
    const cause = said ? String(said) : "rebuilt";
    const by = data.by && !cause.includes(String(data.by)) ? ` (by ${data.by})` : "";
    return cause.startsWith("rebuilt") ? `${cause}${by}` : `rebuilt: ${cause}${by}`;
  }
  if (kind === "queue_landed") {
    let words = "landed";
    if (typeof data.commit === "string") words += ` ${shortSha(data.commit)}`;
    if (isCount(data.waited_ms)) words += ` after ${duration(data.waited_ms)} in the queue`;
    return words;
  }
  if (kind === "queue_left") return data.cause ? `left the merge queue: ${data.cause}` : "left the merge queue";
  return null;
}
