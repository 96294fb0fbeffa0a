// The diff of a run's branch against its base (the daemon's read-only 'diff' verb):
// a per-file summary, then the unified diff, each line as text. Added and removed
// lines keep their '+'/'-' marks, so colour is never the only sign.

import {read} from "./api.js";
import {h, replace, table} from "./dom.js";
import {problemBox} from "./widgets.js";

export async function loadDiff(box, runId) {
  const reply = await read("/api/diff", {run: runId});
  if (!reply.ok) {
    replace(box, problemBox(reply.error));
    return null;
  }
  replace(box, render(reply.data));
  return reply.data;
}

function render(data) {
  const files = data.files ?? [];
  const added = files.reduce((sum, f) => sum + (f.added ?? 0), 0);
  const deleted = files.reduce((sum, f) => sum + (f.deleted ?? 0), 0);
  const rows = files.map((f) => [
    h("code", {class: "path"}, f.old_path ? `${f.old_path} → ${f.path}` : String(f.path)),
    f.binary ? "binary" : h("span", {class: "plus"}, `+${f.added ?? "?"}`),
    f.binary ? "" : h("span", {class: "minus"}, `−${f.deleted ?? "?"}`),
  ]);
  return h("div", {class: "diff", id: "diff"},
    h("p", {class: "muted"},
      `${files.length} file${files.length === 1 ? "" : "s"} changed, +${added} −${deleted}; `,
      h("code", {}, short(data.base)), "..", h("code", {}, short(data.head)),
      data.base_source === "main_before_merge" ? " (main before the merge)" : " (the run's base)"),
    data.problem ? problemBox({code: "diff", message: data.problem}) : null,
    table(["File", "Added", "Deleted"], rows, "No change."),
    data.files_truncated ? h("p", {class: "muted"}, "More files changed than are listed.") : null,
    data.text ? h("div", {class: "diff-text", role: "region", "aria-label": "unified diff"},
      data.text.split("\n").map(line)) : null,
    data.truncated ? h("p", {class: "problem"}, `Cut at ${data.max_bytes} bytes: 'sloopctl diff ${data.run} --max-bytes N' shows more.`) : null);
}

function line(text) {
  let kind = "ctx";
  if (text.startsWith("+++") || text.startsWith("---") || text.startsWith("diff ") || text.startsWith("index ")) kind = "meta";
  else if (text.startsWith("@@")) kind = "hunk";
  else if (text.startsWith("+")) kind = "add";
  else if (text.startsWith("-")) kind = "del";
  return h("div", {class: `dl ${kind}`}, text || " ");
}

function short(sha) {
  return sha ? String(sha).slice(0, 12) : "—";
}
