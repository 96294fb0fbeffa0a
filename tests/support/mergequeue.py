"""The merge queue's tests (issue 32): a queue agent, a gate, and what they check.

The flow under test is the issue's: ``implement`` (an agent that writes one file
per ticket and commits) → ``sync`` → ``test`` (a command stage, the *gate*) →
``merge`` (``ff_only``, ``return_to = "sync"``, ``returns = 3``).  Everything
here speaks to the real daemon through its socket (``show``, ``events``,
``abort``) or reads git; nothing reads the daemon's modules.

- The queue agent (``QUEUE_AGENT_SOURCE``) always writes ``work/<ticket>.txt``
  holding its ticket and run, plus every ``write: PATH=TEXT`` line of the
  ticket's body (``queue_ticket(writes=...)``), and commits them as
  ``queue-agent <ticket> <run>``: main's log then says which runs it holds.
- The gate (``GATE_SOURCE``) waits for a flag file when told to (``--hold``),
  sleeps, appends what it saw (run, attempt, the checkout's HEAD, whether a
  ``bad`` file is there) to a JSON-lines file, and fails when the checkout
  holds ``bad``.  It sleeps longer when ``bad`` is its own ticket's
  (``--bad-sleep``): the bad run's own gate is the slowest, so runs built on top
  of it see its failure first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.agents import Bench, agent_key, sloop_toml, ticket_text
from tests.support.daemon import git, sloopctl_argv, sloopctl_env, wait_until

GATE = "test"  # the gate stage's name in every flow here
GATE_LOG = "gates.jsonl"  # in the bench's flags folder
HOLD = "hold-gates"  # the flag that releases gates started with hold=True
QUEUE_ENTRY_KEYS = frozenset(
    {
        "run",
        "alias",
        "ticket",
        "position",
        "state",
        "candidate",
        "onto",
        "onto_commit",
        "waiting_for",
        "joined_at_ms",
        "rebuilds",
    }
)
QUEUE_STATES = frozenset({"waiting", "building", "gating", "held", "passed", "landing"})
QUEUE_EVENTS = ("queue_joined", "queue_landed", "queue_left", "queue_rebuilt")

QUEUE_AGENT_SOURCE = r'''
"""The queue agent: one file per ticket, plus the ticket's ``write:`` lines; one commit."""
import os
import re
import subprocess

IDENTITY = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
ticket, run = os.environ["SLOOP_TICKET"], os.environ["SLOOP_RUN"]
with open(os.environ["SLOOP_PROMPT_FILE"]) as f:
    prompt = f.read()
files = {f"work/{ticket}.txt": f"{ticket} {run}"}
for match in re.finditer(r"^write: ([^=\s]+)=(.*)$", prompt, re.M):
    files[match[1]] = match[2].replace("{ticket}", ticket)
for name, text in files.items():
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    with open(name, "w") as f:
        f.write(text + "\n")
subprocess.run(["git", *IDENTITY, "add", "-A"], check=True)
subprocess.run(
    ["git", *IDENTITY, "commit", "-q", "-m", f"queue-agent {ticket} {run}"], check=True
)
'''

GATE_SOURCE = r'''
"""The gate: hold, sleep, record, and fail when the checkout holds ``bad``."""
import argparse
import json
import os
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--record", required=True)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--bad-sleep", type=float, default=None)
p.add_argument("--hold")
opts = p.parse_args()
ticket = os.environ.get("SLOOP_TICKET", "?")
if opts.hold:
    deadline = time.monotonic() + 60
    while not os.path.exists(opts.hold):
        if time.monotonic() > deadline:
            print("gave up waiting for " + opts.hold, file=sys.stderr, flush=True)
            sys.exit(97)
        time.sleep(0.02)
bad = None
if os.path.exists("bad"):
    with open("bad") as f:
        bad = f.read().strip()
own_bad = bad == ticket
time.sleep(opts.bad_sleep if own_bad and opts.bad_sleep is not None else opts.sleep)
head = subprocess.run(
    ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
).stdout.strip()
seen = {
    "run": os.environ.get("SLOOP_RUN"),
    "ticket": ticket,
    "stage": os.environ.get("SLOOP_STAGE"),
    "attempt": os.environ.get("SLOOP_ATTEMPT"),
    "head": head,
    "bad": bad,
}
fd = os.open(opts.record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (json.dumps(seen) + "\n").encode())
os.close(fd)
if bad is not None:
    print(f"the checkout holds bad (from {bad})", file=sys.stderr, flush=True)
    sys.exit(1)
print("gate passed", flush=True)
'''


# --- sloop.toml and tickets ---------------------------------------------------------


def install(bench: Bench) -> None:
    """Write the queue agent and the gate into the bench's agents folder."""
    folder = bench.agent_path.parent
    (folder / "queue_agent.py").write_text(QUEUE_AGENT_SOURCE, encoding="utf-8")
    (folder / "gate.py").write_text(GATE_SOURCE, encoding="utf-8")


def agent_argv(bench: Bench) -> list[str]:
    return [sys.executable, str(bench.agent_path.parent / "queue_agent.py")]


def gate_argv(
    bench: Bench, seconds: float, *, bad_seconds: float | None = None, hold: bool = False
) -> list[str]:
    argv = [
        sys.executable,
        str(bench.agent_path.parent / "gate.py"),
        "--record",
        bench.flag(GATE_LOG),
        "--sleep",
        str(seconds),
    ]
    if bad_seconds is not None:
        argv += ["--bad-sleep", str(bad_seconds)]
    if hold:
        argv += ["--hold", bench.flag(HOLD)]
    return argv


def queue_flow(
    bench: Bench,
    *,
    gate_s: float = 1.0,
    bad_gate_s: float | None = None,
    hold: bool = False,
    mode: str | None = None,
    gate: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """implement → sync → test → merge; ``gate`` replaces the command gate (a panel)."""
    sync: dict[str, Any] = {"name": "sync", "action": "sync"}
    if mode is not None:
        sync["mode"] = mode
    test = (
        dict(gate)
        if gate is not None
        else {
            "name": GATE,
            "action": "command",
            "command": gate_argv(bench, gate_s, bad_seconds=bad_gate_s, hold=hold),
            "network": False,
        }
    )
    return [
        {"name": "implement", "action": "agent", "command": agent_argv(bench)},
        sync,
        test,
        {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
    ]


def queue_toml(
    bench: Bench,
    flow: Sequence[Mapping[str, Any]],
    *,
    parallel: int,
    merge_window: int | None = None,
) -> str:
    """sloop.toml with the queue agent, ``flow`` as the default flow, and ``[repo]``."""
    text = sloop_toml(agent_argv(bench), parallel=parallel, flows={"default": flow})
    if merge_window is not None:
        head = f"[repo]\nparallel = {parallel}\n"
        assert head in text, text
        text = text.replace(head, f"{head}merge_window = {merge_window}\n", 1)
    return text


def queue_ticket(title: str, writes: Mapping[str, str] | None = None) -> str:
    """A ticket whose body tells the queue agent what else to write (``{ticket}`` filled)."""
    body = "\n".join(f"write: {path}={text}" for path, text in (writes or {}).items())
    return ticket_text(title, body)


def setup(
    bench: Bench,
    flow: Sequence[Mapping[str, Any]],
    tickets: Mapping[str, str],
    *,
    parallel: int,
    merge_window: int | None = None,
    max_interruptions: int | None = None,
) -> None:
    install(bench)
    text = queue_toml(bench, flow, parallel=parallel, merge_window=merge_window)
    if max_interruptions is not None:
        text = agent_key(text, "max_interruptions", max_interruptions)
    bench.setup(text, tickets)


# --- driving the daemon -----------------------------------------------------------------


def post_all(bench: Bench, names: Iterable[str]) -> dict[str, str]:
    """Post every ticket at once; ticket name -> ticket id."""
    return {name: bench.post(name)["ticket"]["id"] for name in names}


def reached_queue(value: dict[str, Any] | None, until: str = "queue") -> bool:
    """Whether a run reached its landing: in the queue, or its sync (or a later stage)
    began; with ``until="gate"``, whether its gate is running."""
    if value is None:
        return False
    if until == "gate":
        return any(r["stage"] == GATE and r["state"] == "running" for r in value["stages"])
    if value.get("queue") is not None:
        return True
    return any(r["stage"] in ("sync", GATE, "merge") and r["attempt"] >= 1 for r in value["stages"])


def post_in_order(bench: Bench, names: Sequence[str], until: str = "gate") -> dict[str, str]:
    """Post tickets one at a time, each once the one before reached its landing (its
    gate running, with ``until="gate"``): the queue's order is then the order of
    ``names`` (arrival order). Ticket name -> run alias."""
    aliases: dict[str, str] = {}
    for name in names:
        bench.post(name)
        alias = f"{name}#1"

        def arrived(alias: str = alias) -> bool:
            return reached_queue(bench.show_run(alias), until)

        wait_until(arrived, timeout=30, interval=0.05)
        aliases[name] = alias
    return aliases


def gates_running(bench: Bench, refs: Iterable[str], count: int | None = None) -> bool:
    """Whether ``count`` (default: all) of ``refs`` have a gate execution running."""
    refs = list(refs)
    running = 0
    for ref in refs:
        value = bench.show_run(ref)
        if value and any(r["stage"] == GATE and r["state"] == "running" for r in value["stages"]):
            running += 1
    return running >= (len(refs) if count is None else count)


def wait_runs(bench: Bench, refs: Iterable[str], timeout: float = 120.0) -> dict[str, Any]:
    """Every run of ``refs`` settled: ref -> its detail."""
    return {ref: bench.wait_run(ref, timeout=timeout) for ref in refs}


def sloopctl(bench: Bench, *args: str) -> subprocess.CompletedProcess[str]:
    """``sloopctl ARGS`` on the bench's operator socket, as a person types it."""
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    return subprocess.run(
        sloopctl_argv(bench.daemon.socket, *args),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        timeout=60,
        check=False,
    )


def events(bench: Bench, run_id: str) -> list[dict[str, Any]]:
    """A run's events in feed order (``events`` scoped to the run), with their data."""
    found: list[dict[str, Any]] = []
    args: dict[str, Any] = {"scope": run_id}
    while True:
        page = bench.ok("events", args)
        if not page["events"]:
            return found
        found += page["events"]
        args = {"scope": run_id, "after": page["next_cursor"]}


def kinds(found: Iterable[dict[str, Any]], *wanted: str) -> list[dict[str, Any]]:
    return [e for e in found if e["kind"] in wanted]


# --- reading runs -------------------------------------------------------------------------


def rows(run: Mapping[str, Any], stage: str) -> list[dict[str, Any]]:
    """A run's executions of ``stage`` (rows with attempt >= 1), in walk order."""
    return [r for r in run["stages"] if r["stage"] == stage and r["attempt"] >= 1]


def gate_rows(run: Mapping[str, Any], gate: str = GATE) -> list[dict[str, Any]]:
    return rows(run, gate)


def passed_gate_commits(runs: Iterable[Mapping[str, Any]], gate: str = GATE) -> set[str]:
    """Every commit a gate execution of one of ``runs`` passed on (its row's ``commit``)."""
    return {r["commit"] for run in runs for r in gate_rows(run, gate) if r["state"] == "passed"} - {
        None
    }


def merged_commit(run: Mapping[str, Any]) -> str | None:
    """The commit a merged run's passing ``merge`` execution moved main to."""
    passed = [r["commit"] for r in rows(run, "merge") if r["state"] == "passed"]
    return passed[-1] if passed else None


def moved_main_failures(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``merge`` executions that failed as 0.8's race does: main moved since the sync,
    not a rebuild (a row a rebuild cut short says so in ``ended_by``)."""
    return [
        r
        for r in rows(run, "merge")
        if r["state"] == "failed" and r.get("ended_by") != "rebuilt" and not r.get("aborted")
    ]


def rebuilt_rows(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [r for r in run["stages"] if r.get("ended_by") == "rebuilt"]


def returned(bench: Bench, run_id: str) -> list[str]:
    """The daemon's ``returning to ...`` lines of a run: each one spent a ``returns``."""
    return [
        text
        for _, _, stream, text in bench.log_lines(run_id)
        if stream == "system" and text.startswith("returning to")
    ]


def summary(runs: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per run for assertion messages: state and its stage table."""
    lines = []
    for ref, run in runs.items():
        table = " ".join(
            f"{r['stage']}#{r['attempt']}:{r['state']}"
            + (f"({r['ended_by']})" if r.get("ended_by") else "")
            for r in run["stages"]
        )
        lines.append(f"{ref} {run['id']} {run['state']}: {table} | {run['reason']}")
    return "\n".join(lines)


# --- git ---------------------------------------------------------------------------------


def reflog(repo: Path, ref: str = "refs/heads/main") -> list[str]:
    """Every commit ``ref`` was ever at, newest first (its reflog)."""
    return git(repo, "reflog", "show", "--format=%H", ref).split()


def main_agent_commits(repo: Path, rev: str = "main") -> list[tuple[str, str]]:
    """(ticket, run) of every queue-agent commit main (or ``rev``) holds."""
    found = []
    for subject in git(repo, "log", "--format=%s", rev).splitlines():
        parts = subject.split()
        if len(parts) == 3 and parts[0] == "queue-agent":
            found.append((parts[1], parts[2]))
    return found


def tree_has(repo: Path, commit: str, path: str) -> bool:
    done = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{commit}:{path}"], capture_output=True
    )
    return done.returncode == 0


def is_ancestor(repo: Path, ancestor: str, commit: str) -> bool:
    done = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", ancestor, commit],
        capture_output=True,
    )
    return done.returncode == 0


def untested_main(
    repo: Path, runs: Iterable[Mapping[str, Any]], allowed: Iterable[str], gate: str = GATE
) -> list[str]:
    """Commits main's reflog holds that no gate passed on and ``allowed`` does not list
    (main before the daemon started, a person's commits)."""
    tested = passed_gate_commits(runs, gate) | set(allowed)
    return [commit for commit in reflog(repo) if commit not in tested]


def gate_log(bench: Bench) -> list[dict[str, Any]]:
    path = bench.path(GATE_LOG)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
