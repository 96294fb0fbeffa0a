"""The merge queue (issue 32) as a person sees it through the real daemon and CLI: a
run queued behind another is listed 2nd in ``sloopctl show``'s "Merge queue", its gate
running on main + the run ahead; ``show RUN`` says its place under its header; ``show
RUN --follow`` says it off a terminal; ``sloopctl events`` tells joining and landing in
words.  The renderers' cases, fixture by fixture: tests/unit/test_sloopctl_queue.py.

Flow: implement → sync → test (``sleep 3``, the gate) → merge, ``parallel = 2``, two
tickets: both agents finish at once, so one run's gate runs on main + the other's work.
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env
from tests.support.web import socket_of

AGENT = [
    "sh",
    "-c",
    'mkdir -p notes && echo "$SLOOP_RUN" > "notes/$SLOOP_TICKET.txt" && '
    'git add -A && git commit -q -m "work of $SLOOP_TICKET"',
]
GATE_S = 3
DEADLINE_S = 60.0


def queue_flow(gate_seconds: float = GATE_S) -> list[dict[str, Any]]:
    return [
        {"name": "implement", "action": "agent"},
        {"name": "sync", "action": "sync"},
        {
            "name": "test",
            "action": "command",
            "command": ["sleep", str(gate_seconds)],
            "network": False,
        },
        {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
    ]


def two_queued_tickets(bench: Bench, gate_seconds: float = GATE_S) -> None:
    """Post two tickets on the queue's flow, parallel 2; the daemon runs them at once."""
    bench.setup(
        sloop_toml(AGENT, parallel=2, flows={"default": queue_flow(gate_seconds)}),
        {name: ticket_text(name) for name in ("a", "b")},
    )
    bench.start()
    bench.post("a")
    bench.post("b")


def sloopctl(bench: Bench, *args: str) -> str:
    done = subprocess.run(
        sloopctl_argv(socket_of(bench), *args),
        capture_output=True,
        text=True,
        env=sloopctl_env(COLUMNS="200"),
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def until(look: Any, what: str) -> Any:
    """``look()`` until it answers something truthy; that answer."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = look()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"never saw {what}")


def second_gating(bench: Bench) -> dict[str, Any] | None:
    """The dashboard's queue entry 2 once its gate runs on the candidate of entry 1."""
    queue = bench.dashboard().get("queue") or []
    if len(queue) == 2 and queue[1]["state"] == "gating":
        return dict(queue[1])
    return None


def test_show_lists_a_run_queued_behind_another_and_its_place(bench: Bench) -> None:
    two_queued_tickets(bench)
    follower = subprocess.Popen(
        sloopctl_argv(socket_of(bench), "show", "b", "--follow"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sloopctl_env(),
    )
    second = until(lambda: second_gating(bench), "a run gating 2nd in the queue")
    ahead = second["onto"][0]
    assert second["position"] == 2
    assert second["onto"] == [ahead]

    def dashboard_says() -> str | None:
        out = sloopctl(bench, "show")
        row = re.search(rf"^2 +{second['run']} +{re.escape(second['alias'])} .*$", out, re.M)
        return out if row and f"running on main + {ahead}" in row.group(0) else None

    out = until(dashboard_says, "the 2nd entry gating on main + the run ahead in `show`")
    lines = out.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("Merge queue"))
    assert re.fullmatch(r"Merge queue \(window 2\)", lines[title])
    assert lines[title + 1].split() == ["#", "ID", "ALIAS", "STATE", "CANDIDATE", "WHAT"]
    assert re.match(rf"1 +{ahead} ", lines[title + 2]), lines[title + 2]
    assert re.search(
        rf"^2 +{second['run']} +{re.escape(second['alias'])} +gating +[0-9a-f]{{12}} +"
        # The dashboard's run rows carry no stages: "its gates", where show RUN names it.
        rf"its gates running on main \+ {ahead}$",
        out,
        re.M,
    ), out

    def run_says() -> str | None:
        lines = sloopctl(bench, "show", second["run"]).splitlines()
        return lines[1] if len(lines) > 1 and "2nd in the merge queue" in lines[1] else None

    place = until(run_says, "show RUN saying its place")
    assert place.startswith("2nd in the merge queue (window 2), ") or place.startswith(
        "2nd in the merge queue, "
    ), place
    assert place.endswith(f"its gate test#1 running on main + {ahead}"), place

    runs = [bench.wait_run(f"{name}#1") for name in ("a", "b")]
    assert [r["state"] for r in runs] == ["merged", "merged"], [r["reason"] for r in runs]
    # Settled: no queue section, and the runs' details say nothing of it.
    assert "Merge queue" not in sloopctl(bench, "show")
    assert "merge queue" not in sloopctl(bench, "show", second["run"])

    _, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    if second["alias"] == "b#1":  # its follower saw it queued behind the other
        assert re.search(
            r"2nd in the merge queue(?: \(window \d+\))?, its gate test#1 running on main \+ R", err
        ), err

    events = sloopctl(bench, "events")
    assert re.search(r"queue_joined +T\d+ +R\d+ +joined the merge queue, 1st$", events, re.M)
    assert re.search(
        rf"queue_joined +T\d+ +{second['run']} +joined the merge queue, 2nd$", events, re.M
    ), events
    assert re.search(
        rf"queue_landed +T\d+ +{second['run']} +landed [0-9a-f]{{12}} after \d+s in the queue$",
        events,
        re.M,
    ), events
