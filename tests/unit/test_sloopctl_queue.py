"""The merge queue (issue 32) as ``sloopctl`` draws it, without a daemon: the
dashboard's "Merge queue", a run's place under its header (``show RUN``, the follow
views), executions a rebuild cut short, and the ``queue_*`` events.

The fixtures are in the wire shapes of the design note (docs/protocol.md, dashboard
``queue`` and the run detail's ``queue``); tests/integration/test_queue_view.py sees the
same through the real daemon.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sloopctl.feeds_cli import event_line
from sloopctl.follow import progress_line, transitions
from sloopctl.layout import painter
from sloopctl.next_steps import next_commands
from sloopctl.queue_view import (
    doing,
    ended_by,
    event_words,
    on_text,
    ordinal,
    place_line,
    queue_section,
    waits_text,
)
from sloopctl.render import render, stages_summary
from sloopctl.watch import frame

NOW = 1_800_000_000_000
SHA = "3f2a9c1d0b12" + "0" * 28
ESC = re.compile(r"\x1b\[")


def entry(run: str, alias: str, position: int, state: str, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run": run,
        "alias": alias,
        "ticket": f"T{run[1:]}",
        "position": position,
        "state": state,
        "candidate": None,
        "onto": [],
        "onto_commit": None,
        "waiting_for": None,
        "joined_at_ms": NOW - 60_000,
        "rebuilds": 0,
    }
    row.update(extra)
    return row


QUEUE = [
    entry("R7", "fix-login#1", 1, "landing", candidate=SHA),
    entry("R9", "add-x#1", 2, "gating", candidate="a" * 40, onto=["R7"]),
    entry(
        "R10",
        "docs#1",
        3,
        "held",
        candidate="b" * 40,
        onto=["R7", "R9"],
        rebuilds=1,
        waiting_for={"reason": "runs_ahead_gates", "message": None, "runs": ["R9"]},
    ),
    entry(
        "R11",
        "cli#1",
        4,
        "passed",
        candidate="c" * 40,
        onto=["R7", "R9", "R10"],
        waiting_for={"reason": "runs_ahead", "message": None, "runs": ["R7", "R9", "R10"]},
    ),
    entry("R12", "z#1", 5, "waiting", waiting_for={"reason": "window", "runs": []}),
]


def stage(name: str, attempt: int, state: str, **extra: Any) -> dict[str, Any]:
    return {"stage": name, "attempt": attempt, "state": state, "advisory": False, **extra}


def dashboard(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kind": "dashboard",
        "daemon": {"version": "0.9.0", "pid": 1},
        "gate": {"state": "open"},
        "runs": [
            {
                "id": "R9",
                "alias": "add-x#1",
                "state": "running",
                "started_at_ms": NOW - 60_000,
                "stages": [
                    stage("implement", 1, "passed"),
                    stage("sync", 1, "passed"),
                    stage("test", 1, "running"),
                ],
            }
        ],
        "queued_triggers": [],
        "tickets": [],
    }
    data.update(extra)
    return data


def test_the_dashboard_lists_the_queue_in_order_with_what_each_is_built_on_and_waits_for() -> None:
    out = render("show", dashboard(queue=QUEUE, merge_window=8), NOW, colour=False)
    lines = out.splitlines()
    start = lines.index("Merge queue (window 8)")
    # After the runs in flight, before the queued triggers.
    assert lines.index("Runs in flight") < start < lines.index("Queued triggers: none")
    table = lines[start + 1 : start + 7]
    assert table[0].split() == ["#", "ID", "ALIAS", "STATE", "CANDIDATE", "WHAT"]
    assert [row.split()[:3] for row in table[1:]] == [
        ["1", "R7", "fix-login#1"],
        ["2", "R9", "add-x#1"],
        ["3", "R10", "docs#1"],
        ["4", "R11", "cli#1"],
        ["5", "R12", "z#1"],
    ]
    assert re.search(r"^1 +R7 +fix-login#1 +landing +3f2a9c1d0b12 +main moving to its", out, re.M)
    # "2nd in the merge queue, its tests running on main + R7": the running gate named.
    assert re.search(r"^2 +R9 .* gating +a{12} +its gate test#1 running on main \+ R7$", out, re.M)
    assert re.search(
        r"^3 +R10 .* held \(rebuilt once\) +b{12} +its gate failed on main \+ R7 \+ R9; "
        r"waiting for R9's gates$",
        out,
        re.M,
    )
    assert "its gates passed on main + R7 + R9 + R10; waiting for R7, R9 and R10 to land" in out
    assert re.search(
        r"^5 +R12 .* waiting +- +not built yet; waiting for a place in the merge", out, re.M
    )


@pytest.mark.parametrize("queue", [None, [], "not a list", [None, 3]])
def test_no_section_for_an_empty_queue_or_a_daemon_without_one(queue: Any) -> None:
    data = dashboard() if queue is None else dashboard(queue=queue, merge_window=4)
    out = render("show", data, NOW, colour=False)
    assert "Merge queue" not in out
    assert "Runs in flight" in out


def test_an_entry_of_unknown_shape_or_state_still_renders() -> None:
    odd = [{"run": "R1", "state": "bisecting", "onto": ["R0"], "brand_new": {"x": 1}}, {}]
    out = render("show", dashboard(queue=odd), NOW, colour=False)
    assert "Merge queue" in out
    assert "bisecting on main + R0" in out
    assert queue_section({"queue": odd}, NOW, painter(True))  # and with colour


def test_the_queue_is_painted_but_aligned_and_untrusted_text_stays_text() -> None:
    out = render("show", dashboard(queue=QUEUE, merge_window=8), NOW, colour=True)
    assert ESC.search(out)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert plain == render("show", dashboard(queue=QUEUE, merge_window=8), NOW, colour=False)


def test_a_runs_place_is_one_line_under_its_header_instead_of_the_entrys_fields() -> None:
    held = {**QUEUE[2], "merge_window": 8}
    run = {
        "id": "R10",
        "alias": "docs#1",
        "state": "running",
        "terminal": False,
        "queue": held,
        "stages": [stage("implement", 1, "passed"), stage("sync", 2, "passed")],
    }
    lines = render("show", {"kind": "run", "value": run}, NOW, colour=False).splitlines()
    assert lines[0] == "run R10"
    assert lines[1] == (
        "3rd in the merge queue (window 8), held: its gate failed on main + R7 + R9; "
        "waiting for R9's gates; rebuilt once"
    )
    assert not any(line.startswith("queue") for line in lines)  # no queue.run, queue.onto...

    gating = {**QUEUE[1]}
    run.update(queue=gating, stages=[stage("sync", 1, "passed"), stage("test", 1, "running")])
    lines = render("show", {"kind": "run", "value": run}, NOW, colour=False).splitlines()
    assert lines[1] == "2nd in the merge queue, its gate test#1 running on main + R7"

    # Not in the queue (null), or a daemon without the field: nothing is said.
    for value in ({**run, "queue": None}, {k: v for k, v in run.items() if k != "queue"}):
        lines = render("show", {"kind": "run", "value": value}, NOW, colour=False).splitlines()
        assert lines[1].startswith("id ")


@pytest.mark.parametrize(
    ("item", "window", "said"),
    [
        (
            QUEUE[0],
            8,
            "1st in the merge queue (window 8), landing: main moving to its candidate 3f2a9c1d0b12",
        ),
        (QUEUE[1], None, "2nd in the merge queue, its gates running on main + R7"),
        (
            QUEUE[4],
            8,
            "5th in the merge queue (window 8), not built yet; "
            "waiting for a place in the merge window (8)",
        ),
        (
            entry("R3", "a#1", 2, "building", onto=["R1"]),
            None,
            "2nd in the merge queue, its candidate being built on main + R1",
        ),
        (
            entry(
                "R3",
                "a#1",
                12,
                "waiting",
                onto=["R1", "R2"],
                rebuilds=3,
                stale="R1 left the queue (stage 'test' failed)",
                waiting_for={
                    "reason": "candidate_ahead",
                    "message": "the candidate of R2 to be built",
                    "runs": ["R2"],
                },
            ),
            None,
            "12th in the merge queue, not built yet; waiting for R2's candidate; "
            "to be rebuilt: R1 left the queue (stage 'test' failed); rebuilt 3 times",
        ),
    ],
)
def test_a_place_reads_as_a_sentence(item: dict[str, Any], window: Any, said: str) -> None:
    assert place_line(item, window) == said


def test_the_small_words() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd",
        "101st", "111th", "112th",
    ]  # fmt: skip
    assert on_text({"onto": []}) == "main"
    assert on_text({"onto": ["R5", "R6"]}) == "main + R5 + R6"
    assert on_text({}) == "main"
    assert waits_text(None) == ""
    assert waits_text({"reason": "candidate_ahead", "runs": ["R5"]}) == "waiting for R5's candidate"
    assert waits_text({"reason": "runs_ahead_gates", "runs": ["R5", "R6"]}) == (
        "waiting for R5's and R6's gates"
    )
    assert waits_text({"reason": "something_new", "runs": ["R5"]}) == "waiting: something_new (R5)"
    assert waits_text({"reason": "something_new", "message": "a bisection"}) == (
        "waiting: a bisection"
    )
    assert waits_text({"reason": "candidate_ahead", "runs": []}) == "waiting for its turn"
    assert doing({"state": "passed", "onto": ["R1"]}) == "its gates passed on main + R1"
    assert place_line(None) == ""
    assert place_line("garbage") == ""


def test_a_rebuilt_execution_is_drawn_as_rebuilt_not_as_a_failure() -> None:
    rebuilt = stage(
        "test",
        1,
        "failed",
        ended_by="rebuilt",
        exit_code=-15,
        reason="rebuilt: R5 left the queue (stage 'test' failed)",
    )
    stopped = stage("test", 2, "failed", aborted=True, reason="aborted by the operator")
    restarted = stage("test", 3, "failed", ended_by="interrupted", aborted=True)
    failed = stage("test", 4, "failed", ended_by=None, reason="exited with code 1")
    assert [ended_by(r) for r in (rebuilt, stopped, restarted, failed)] == [
        "rebuilt",
        "aborted",
        "interrupted",
        None,
    ]
    assert ended_by({"state": "passed", "ended_by": "rebuilt"}) is None  # only a failed row

    rows = [stage("sync", 1, "passed"), rebuilt, stopped, restarted, failed]
    assert stages_summary(rows) == "sync✓ test↻ test#2■ test#3■ test#4✗"
    run = {"id": "R9", "state": "failed", "terminal": True, "stages": rows}
    out = render("show", {"kind": "run", "value": run}, NOW, colour=False)
    assert re.search(r"^test +1 +rebuilt .* rebuilt: R5 left the queue", out, re.M)
    assert re.search(r"^test +2 +aborted ", out, re.M)
    assert re.search(r"^test +3 +interrupted ", out, re.M)
    assert re.search(r"^test +4 +failed ", out, re.M)
    # The follow frame, its transitions off a terminal, and what to look at next.
    drawn = ["".join(part for part, _ in line) for line in frame(run, [], None, NOW)]
    assert any(line.startswith("  ↻ test#1") and "rebuilt" in line for line in drawn)
    assert transitions(None, run)[1] == "R9 test#1 rebuilt: R5 left the queue (stage 'test' failed)"
    assert "sloopctl logs R9 --stage test#4" in next_commands(run, details=False)
    only_rebuilt = {**run, "stages": [rebuilt]}
    assert next_commands(only_rebuilt, details=False)[0] == "sloopctl logs R9"


def test_following_a_queued_run_says_its_place_and_each_change_of_it() -> None:
    before: dict[str, Any] = {
        "id": "R9",
        "state": "running",
        "stages": [stage("sync", 1, "passed"), stage("test", 1, "running")],
        "queue": QUEUE[1],
    }
    assert progress_line(before).endswith(" · 2nd in the merge queue")
    assert transitions(None, before)[-1] == (
        "R9 2nd in the merge queue, its gate test#1 running on main + R7"
    )
    assert transitions(before, before) == []
    ahead_left = {**before, "queue": {**QUEUE[1], "position": 1, "onto": []}}
    assert transitions(before, ahead_left) == [
        "R9 1st in the merge queue, its gate test#1 running on main"
    ]
    landed = {**before, "queue": None}
    assert transitions(before, landed) == []
    drawn = ["".join(part for part, _ in line) for line in frame(before, [], None, NOW)]
    assert drawn[1] == "  2nd in the merge queue, its gate test#1 running on main + R7"
    assert progress_line(landed) == "R9 running · sync✓ test▶"


@pytest.mark.parametrize(
    ("kind", "data", "said"),
    [
        ("queue_joined", {"position": 2}, "joined the merge queue, 2nd"),
        (
            "queue_rebuilt",
            {
                "cause": "left_failed",
                "by": "R5",
                "reason": "R5 left the queue (stage 'test' failed)",
            },
            "rebuilt: R5 left the queue (stage 'test' failed)",
        ),
        (
            "queue_rebuilt",
            {"cause": "main_moved", "by": None, "reason": "main moved outside the merge queue"},
            "rebuilt: main moved outside the merge queue",
        ),
        # Without a reason (a daemon that sends none): the label, and who left.
        ("queue_rebuilt", {"cause": "left_conflict", "by": "R5"}, "rebuilt: left_conflict (by R5)"),
        (
            "queue_landed",
            {"commit": SHA, "waited_ms": 95_000},
            "landed 3f2a9c1d0b12 after 2m in the queue",
        ),
        (
            "queue_left",
            {"cause": "stage 'test' failed"},
            "left the merge queue: stage 'test' failed",
        ),
        ("queue_left", {}, "left the merge queue"),
    ],
)
def test_queue_events_read_as_words(kind: str, data: dict[str, Any], said: str) -> None:
    assert event_words(kind, data) == said
    line = event_line({"at_ms": NOW, "kind": kind, "ticket": "T3", "run": "R7", "data": data})
    assert line.endswith(f" T3    R7    {said}")


def test_other_events_and_odd_queue_data_stay_key_value_pairs() -> None:
    assert event_words("run_claimed", {"x": 1}) is None
    assert event_words("queue_joined", "odd") is None
    assert event_words("queue_bisected", {"x": 1}) is None
    line = event_line({"at_ms": NOW, "kind": "queue_bisected", "data": {"x": 1}})
    assert line.endswith("x=1")
