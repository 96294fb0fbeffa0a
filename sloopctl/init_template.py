"""What ``sloopctl init`` writes: a commented ``sloop.toml`` and an example ticket.

Kept as text, not built from the daemon's defaults: ``sloopctl`` imports nothing
from the daemon but ``sloopd.wire.api``.  ``tests/unit/test_init_template.py`` checks
that the text parses with the daemon's own loader and that its values are the
daemon's defaults, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

CONFIG_FILE: Final = "sloop.toml"
TICKETS_FOLDER: Final = "tickets"
EXAMPLE_TICKET: Final = "example.md"
# The presets ``sloopctl init --agent`` offers (the daemon's sloopd.flows.presets).
AGENT_PRESETS: Final = ("claude", "codex", "gemini", "example")

SLOOP_TOML: Final = """\
# sloop.toml: how Sloop works on this repository.
#
# Commit this file.  The daemon (sloopd) reads it when it starts and again on
# SIGHUP (systemctl reload sloopd@<name>).  A file that does not validate is
# refused with a message naming the key and the reason: the daemon will not
# start on it, and a reload keeps the last good configuration.  A run keeps a
# snapshot of its flow from the moment it is claimed, so editing this file never
# changes a run in flight.  Unknown keys are errors, not ignored.
#
# Every value below is the default: with no sloop.toml at all, Sloop behaves
# exactly as this file says.  Lines starting with "# " followed by a key are
# optional keys, shown with an example value; uncomment to use them.
# Reference: docs/configuration.md.

# Every agent and command runs in a bubblewrap sandbox (docs/security.md): its own
# process namespace, the system read-only, its checkout read-write, no view of
# the store, the repository's .git or other runs.  "none" runs children without
# it: unsafe with agents you do not trust; doctor and the dashboard say so.
sandbox = "bwrap"

[repo]
# The branch the merge stage (ff_only) fast-forwards.  A non-empty string.
main = "main"
# The folder holding ticket files (Markdown), relative to the repository root;
# it must stay inside the repository.  A ticket in a sub-folder belongs to the
# project named after that sub-folder (tickets/billing/x.md: project "billing").
tickets = "tickets"
# How many runs may be in flight at once.  An integer, at least 1.
parallel = 2
# How many runs of the merge queue have their gate stages (the stages between
# sync and ff_only, below) running at once: an integer, at least 1; by default
# the same as parallel.  For example:
#   merge_window = 2
# Run branches are named <branch_prefix><ticket-name>/<attempt>, for example
# sloop/fix-rounding/1.  A non-empty string.
branch_prefix = "sloop/"
# A ticket file larger than this is refused at post, naming the limit: an
# integer (bytes) or a string like "512KiB", "1MiB"; 1KiB to 16MiB.  Replies
# (show of a ticket, brief) carry at most 64 KiB of a body, clipped with a marker.
max_ticket_bytes = "1MiB"

[agent]
# The agent CLI agent stages run, as one of Sloop's presets (docs/agents.md):
#   claude   Claude Code, headless, tools allowed; passes ANTHROPIC_API_KEY
#   codex    Codex exec, its own sandbox off; passes OPENAI_API_KEY
#   gemini   Gemini CLI with --yolo; passes GEMINI_API_KEY
#   example  the bundled example agent: try Sloop without a vendor account
# Each reads the prompt on standard input, prints JSON events (tokens and cost
# are read from them) and caps the CLI's own retries.  Sloop's sandbox is the
# boundary, so the CLI's permission prompts are off.  The key itself goes in
# the daemon's environment, never in this file.
preset = "claude"
# Or your own argv instead of a preset (no shell).  Hand it the prompt as a file:
# every "{prompt_file}" in it is replaced by the prompt file's path (also in
# SLOOP_PROMPT_FILE), or read it on standard input with
#   ["sh", "-c", 'exec my-agent < "$SLOOP_PROMPT_FILE"'].
# "{prompt}" puts the prompt text itself in argv: every local user can read it
# in /proc/<pid>/cmdline, and a ticket over 128 KiB cannot start at all.  The
# agent also gets SLOOP_RUN, SLOOP_TICKET, SLOOP_STAGE, SLOOP_WORKTREE.
#    command = ["my-agent", "--prompt-file", "{prompt_file}"]
# A command with "{prompt}" in argv: "warn" logs it at every load (and doctor
# warns), "accept" says the exposure is accepted, "refuse" refuses the file.
prompt_in_argv = "warn"
# A stage silent (no output line) this long shows as stalled.  Durations are
# written like 30s, 20m, 2h, 1h30m or 1d.
stall_after = "20m"
# A stage silent this long is stopped and fails (classification "stalled").
# Not shorter than stall_after.
stall_kill_after = "2h"
# When an agent fails on a vendor rate or usage limit, the gate closes: nothing
# is claimed until the reset time the vendor's message names.  When it names
# none, the gate reopens after probe_cooldown to try again, doubling the wait
# each time the limit is met again (1m, 2m, 4m, ...) up to cooldown; an agent
# stage that gets through starts it over.  The ticket is queued again for when
# the gate reopens.
probe_cooldown = "1m"
cooldown = "30m"
# A reset time further ahead than this ("resets in 31 days") is capped: the gate
# reopens after max_cooldown and its reason says so.
max_cooldown = "6h"
# Output stored per stage execution (each panel seat on its own): past either
# limit the child keeps running, the rest of its output is counted, not stored,
# and one "system" log record says how much was dropped.  max_log_bytes is an
# integer (bytes) or a string like "512KiB", "64MiB", "1GiB".
max_log_lines = 100000
max_log_bytes = "64MiB"
# A child's environment is an allowlist: PATH, the locale, its own HOME and the
# SLOOP_* variables, plus the variables named here (passed through by name).
env = []
# Host folders every sandbox sees read-only (credentials, CLI settings) and
# read-write (what runs may share on purpose: a package cache, a results
# folder).  Absolute paths, or paths under ~/.  Vendor presets: docs/agents.md.
ro_mounts = []
rw_mounts = []
# For example:
#   env = ["HTTPS_PROXY"]
#   ro_mounts = ["~/.config/my-agent"]
# A wall-clock limit per agent stage (each panel seat) and per command stage:
# past it the child is stopped and the stage fails (classification timed_out).
agent_timeout = "2h"
command_timeout = "30m"
# An overloaded or unreachable vendor: the ticket is queued again this many
# times, after transient_backoff, doubling up to transient_backoff_max.
transient_retries = 3
transient_backoff = "1m"
transient_backoff_max = "30m"
# The worker token is in the file SLOOP_TOKEN_FILE names; false keeps it out of
# the children's environment too (SLOOP_TOKEN), where every process they start
# inherits it and every environment dump shows it.
token_env = true
# The JSON event stream agent stages print, for tokens and cost: claude | codex
# | gemini | none.  A preset sets it; name it for your own command.
# stream = "claude"
# A run that spends more than this is stopped (classification budget_exceeded):
# Claude mid-session, Codex and Gemini only once their session ended (they print
# usage only at the end: the budget caps what merges, not what is spent).
# Codex and Gemini report no cost: their tokens are priced from [pricing] (a
# dollar budget over a Codex stage needs CODEX_MODEL in the daemon's environment).
# max_cost_usd = 5.0
# max_tokens = 2000000

# --- flows -------------------------------------------------------------------
#
# A flow is the list of stages every run of a ticket walks, in order.  A ticket
# picks its flow in its front matter (flow = "NAME"); the default is "default".
# Define more flows as [[flows.NAME.stages]] tables.  Stage keys:
#
#   name          required; unique in the flow; no "#" in it.
#   action        required: agent | command | sync | ff_only
#                   agent    runs agent.command (or this stage's command)
#                   command  runs this stage's command (required for it)
#                   sync     brings main into the run branch; a conflict fails
#                   ff_only  fast-forwards main to the branch; a moved main fails
#                 The stages between a sync and the ff_only after it are the
#                 merge queue's gate (see the "test" stage after sync below).
#   prompt        agent stages only: the instructions put before the ticket.
#   command       agent and command stages: an argv; on an agent stage it
#                   replaces agent.command for this stage.
#   agent         agent stages: a preset for this stage (claude | codex |
#                   gemini | example), instead of command.
#   stream        agent stages: the JSON event stream its command prints.
#   timeout       agent and command stages: this stage's wall-clock limit.
#   result_check  exit_code (default: exit status 0 passes)
#                 | reported (the worker's first `sloopctl verdict` decides;
#                   exiting without one fails the stage)
#                 | panel (agent stages: reviewer seats, see quorum/reviewers)
#                 sync and ff_only stages are decided by git: exit_code only.
#   fail_action   fail (default: a failed stage ends the run failed)
#                 | continue (advisory: the failure is recorded, stepped over).
#   return_to     on failure, walk again from this stage: this stage or an
#                   earlier one, never a later one; not with continue.
#   returns       how many times return_to may be taken (default 1, at least
#                   1; only with return_to).  Once spent, the run settles
#                   needs_review.
#   quorum        panel only: passes needed, 1..number of reviewers (default:
#                   all of them).  A seat that never reports counts as a fail.
#   reviewers     panel only, at least one: [{ target = "NAME", agent = "PRESET" }]
#                   (or command = [argv] instead of agent).
#   mode          sync only: merge (default) | rebase.
#   network       agent and command stages: true (default) | false (no network
#                   in the sandbox; test commands usually should not need it).
#   commit        agent stages: manual (default: uncommitted changes left at
#                   exit fail the stage, naming the paths) | auto (Sloop commits
#                   them, with a message naming the ticket and the stage).
#   allow_empty   ff_only only: false (default: a branch with nothing beyond
#                   main fails, "nothing to merge") | true (that passes).
#   backend       agent and command stages (and a panel's reviewers): local
#                   (this host) | ray (a node of the [executor] Ray cluster);
#                   default: [executor] backend.
#   resources     with backend ray: cpus, memory ("2GiB") and custom (Ray's
#                   custom resources by name), over [executor] resources key
#                   by key.
#
# A flow that ends without an ff_only stage leaves the branch for a person: the
# run settles needs_review.

[[flows.default.stages]]
name = "implement"
action = "agent"
prompt = "Implement the ticket. Commit your work."
result_check = "exit_code"
# fail_action = "fail"
# command = ["my-agent", "--prompt-file", "{prompt_file}"]
# network = true
# commit = "manual"
# backend = "local"
# resources = { cpus = 2, memory = "4GiB" }

# An advisory stage: a failure is recorded, and the walk goes on.
# [[flows.default.stages]]
# name = "lint"
# action = "command"
# command = ["make", "lint"]
# fail_action = "continue"

# A stage whose worker reports its own verdict (sloopctl verdict pass|fail).
# [[flows.default.stages]]
# name = "self-check"
# action = "agent"
# agent = "codex"
# stream = "codex"
# result_check = "reported"
# prompt = "Check the branch against the ticket; report a verdict."

# A review panel: seats run one after another; 2 passes needed.
# [[flows.default.stages]]
# name = "review"
# action = "agent"
# result_check = "panel"
# quorum = 2
# prompt = "Review the branch against the ticket; report one verdict with a reason."
# reviewers = [ { target = "claude", agent = "claude" },
#               { target = "gemini", agent = "gemini" } ]

[[flows.default.stages]]
name = "sync"
action = "sync"
# mode = "merge"

# The merge queue's gate: the stages between sync and the ff_only below.  A run
# that reaches sync joins the merge queue; its sync builds its candidate (main,
# plus the work of the runs ahead of it in the queue, plus its own), the gate
# runs on that candidate, and the runs land in queue order, so main only ever
# holds a commit its tests passed on.  Up to repo.merge_window candidates are
# tested at once.  A gate never changes the candidate: what it commits or
# leaves is discarded.  Its own failure sends the run back to the agent, twice
# at most; a failure caused by a run ahead that leaves the queue is not held
# against it: its candidate is rebuilt instead (docs/operator-guide.md, "The
# merge queue").  Put your test command here (its sandbox has no network):
# [[flows.default.stages]]
# name = "test"
# action = "command"
# command = ["make", "test"]
# result_check = "exit_code"
# network = false
# timeout = "20m"
# return_to = "implement"
# returns = 2

[[flows.default.stages]]
name = "merge"
action = "ff_only"
# main moved since the sync (another run merged first): sync again, 3 times at most.
return_to = "sync"
returns = 3
# allow_empty = false

# --- vendor diagnostics ------------------------------------------------------
#
# When an agent stage fails, the agent's last output lines are classified:
# rate_limited | usage_limit | overloaded | auth_failed | network |
# context_length | refused (a preset's own refusal to start its CLI) (or
# unknown).  A rate or usage limit closes the gate (see
# agent.cooldown).  Sloop knows how claude, codex, gemini and aider word these;
# for wording it does not know, add patterns: they are tried first.  Keys:
#
#   classification  required: one of the classes above (not unknown).
#   regex           required: a Python regular expression, matched
#                     case-insensitively against each line; it must not match
#                     an empty line.
#   vendor          optional: the name to report as the vendor.
#
# [[vendor.patterns]]
# classification = "rate_limited"
# regex = 'proxy: too many requests'
# vendor = "internal-proxy"

# --- pricing -------------------------------------------------------------------
#
# Dollars per million tokens, per model as the CLI names it, over the built-in
# table (docs/configuration.md#pricing): how Codex's and Gemini's cost is known.
#
# [pricing."gpt-5.5"]
# input = 1.25
# output = 10.0
# cached = 0.125

# --- executor ----------------------------------------------------------------
#
# Where stages run (docs/scale-out.md).  local (default): this host.  ray: the
# same sandbox on the nodes of a Ray cluster (pip install 'sloop[ray]'; the
# cluster's token in RAY_AUTH_TOKEN).  A stage's or reviewer's own backend and
# resources win.  sloopd serve --executor / --ray-address override these.
#
# [executor]
# backend = "ray"
# address = "10.0.0.5:6379"        # or "auto"
# namespace = "sloop"
# resources = { cpus = 1, memory = "2GiB", custom = { agents = 1 } }
# max_bundle = "512MiB"            # the most a git bundle to or from a node holds
# warm_actors = 1                  # idle actors per resource shape, made ahead (0: none)

# --- notifications -----------------------------------------------------------
#
# Webhooks posted when a run settles or the gate changes (see "notify" in
# docs/configuration.md; a receiver that checks signatures: docs/operator-guide.md).
# Keys:
#
#   url         required: an http:// or https:// URL.
#   on          required: merged | failed | needs_review | aborted | gate_changed.
#   format      json (default) | slack (an incoming-webhook message).
#   link        a URL pattern for the body: {run} {alias} {ticket} {ticket_name}.
#   secret_env  the NAME of a variable of the daemon's environment whose value
#                 signs each body (X-Sloop-Signature); it must be set.
#   attempts    4 (default) | 1 to 10.
#   backoff     "2s" (default): the first wait between attempts, doubling.
#   timeout     "10s" (default): how long one attempt may take.
#
# [[notify]]
# url = "https://hooks.slack.com/services/T000/B000/XXXX"
# on = ["merged", "failed", "needs_review"]
# format = "slack"
# link = "https://ci.example/sloop/{run}"
"""

EXAMPLE_TICKET_TEXT: Final = """\
+++
# Optional front matter (TOML between +++ lines); every key may be left out.
flow = "default"     # a flow defined in sloop.toml (default: "default")
project = "default"  # default: the sub-folder below the tickets folder, else "default"
priority = 0         # an integer; higher is claimed first (default: 0)
+++
# Write a note about this ticket

The bundled example agent (`preset = "example"` in sloop.toml) writes a note
naming this ticket and its run, notes/<ticket id>.md (notes/T1.md for the first
ticket), and commits it; a real agent reads this body as its task. The ticket's
name is its file name without .md ("example"), its title is the first "# " heading
above, and everything else is the body the agent reads.

Take 20 seconds.

(That line makes the example agent work slowly, so there is a run to follow and to
steer; delete it for an instant run.) Post it with `sloopctl post
tickets/example.md`, then follow it with `sloopctl show example`.
"""


# The template's gate stage, commented out; ``sloop_toml`` switches it on with a known
# test command.
GATE_STAGE: Final = """\
# [[flows.default.stages]]
# name = "test"
# action = "command"
# command = ["make", "test"]
"""


def sloop_toml(agent: str = "claude", test_command: Sequence[str] | None = None) -> str:
    """The template with ``agent`` as the [agent] preset.

    With ``test_command`` (an argv), the gate stage after ``sync`` is switched on
    and runs it; without, it stays commented out.
    """
    text = SLOOP_TOML.replace('\npreset = "claude"\n', f'\npreset = "{agent}"\n', 1)
    if not test_command:
        return text
    start = text.index(GATE_STAGE)
    end = text.index("\n\n", start)
    argv = ", ".join(json.dumps(arg, ensure_ascii=False) for arg in test_command)
    lines = [line.removeprefix("# ") for line in text[start:end].splitlines()]
    lines = [f"command = [{argv}]" if line.startswith("command = ") else line for line in lines]
    return text[:start] + "\n".join(lines) + text[end:]
