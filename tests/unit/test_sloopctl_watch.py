"""The live view of ``show --follow`` and the long-poll it uses, without a daemon.

Frames are pure functions of a run and the clock; ``LiveTable`` writes them to a
stream (cursor up over the last frame, each line cleared, clipped to the size);
``RunFollower`` here talks to a scripted client, so a test sees exactly which
``show`` and ``logs`` requests it sends: the daemon's long-poll arguments while it
takes them, today's polling once it refuses them.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from sloopctl.cli import main
from sloopctl.client import Client, Reply
from sloopctl.follow import POLL_MIN_S, Progress, RunFollower
from sloopctl.layout import painter
from sloopctl.longpoll import LongPoll, epoch_of
from sloopctl.polling import LIVE_WAIT_MS, SHOW_WAIT_MS
from sloopctl.watch import LiveTable, OutputTail, columns, fit, frame
from tests.unit.test_sloopctl_cli import CLEAN_ENV, FakeDaemon
from tests.unit.test_sloopctl_follow import Scripted, run_value, sent, ticket_value

NOW = 1_700_000_100_000


def stage(name: str, attempt: int, state: str, **extra: Any) -> dict[str, Any]:
    return {"stage": name, "attempt": attempt, "state": state, **extra}


def a_run(state: str, *stages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "R3",
        "alias": "fix#1",
        "state": state,
        "terminal": state in ("merged", "failed", "needs_review", "aborted"),
        "started_at_ms": NOW - 83_000,
        "finished_at_ms": None,
        "stages": list(stages),
        **extra,
    }


def plain(lines: list[list[tuple[str, str]]], width: int = 200) -> list[str]:
    return [fit(line, width, painter(False)) for line in lines]


# --- frames -----------------------------------------------------------------------------


def test_a_frame_lists_every_stage_with_its_state_time_and_detail() -> None:
    run = a_run(
        "running",
        stage("implement", 1, "passed", duration_ms=45_000, exit_code=0),
        stage("test", 1, "failed", duration_ms=3_000, exit_code=1, reason="exited with code 1"),
        stage("implement", 2, "running", started_at_ms=NOW - 12_000),
        stage("merge", 0, "pending"),
    )
    lines = plain(frame(run, ["compiling", "linking"], "implement#2", NOW))
    assert lines == [
        "fix#1  R3  running  1m",
        "  ✓ implement#1    passed       45s  exit 0",
        "  ✗ test#1         failed        3s  exit 1  exited with code 1",
        "  ▶ implement#2    running      12s",
        "  · merge          pending",
        "",
        "  implement#2 output:",
        "    compiling",
        "    linking",
    ]
    stalled = plain(frame(a_run("running", stall={"stage": "x"}), [], None, NOW))
    assert stalled == ["fix#1  R3  running  (stalled)  1m"]


def test_text_from_the_run_is_cleaned_and_flattened_even_when_the_reply_was_not() -> None:
    # Under --raw the client keeps replies as stored: the frame cleans them itself.
    run = a_run("failed", stage("x\x1b[2Jy", 1, "failed", reason="bad\x1b]0;t\x07\nnews"))
    lines = plain(frame(run, ["\x1b[31mred\x1b[0m\tnext", "\x9b5mC1"], "x#1", NOW))
    joined = "\n".join(lines)
    assert "\x1b" not in joined
    assert "\x07" not in joined
    assert "\x9b" not in joined
    assert "  ✗ xy#1" in lines[1]
    assert "bad ⏎ news" in lines[1]
    assert lines[-2:] == ["    red    next", "    C1"]  # an 8-bit CSI goes whole too


def test_lines_are_clipped_to_the_width_in_cells_before_they_are_painted() -> None:
    paint = painter(True)
    assert fit([("abcdef", "")], 4, paint) == "abc…"
    assert fit([("ab", "red"), ("cdef", "green")], 4, paint) == (
        "\x1b[31mab\x1b[0m\x1b[32mc…\x1b[0m"
    )
    assert columns("日本") == 4
    assert columns("é") == 1
    assert columns("e\u0301") == 1
    assert fit([("日本語です", "")], 6, painter(False)) == "日本…"
    assert columns(fit([("x" * 500, "bold")], 39, painter(False))) == 39


# --- the stream -------------------------------------------------------------------------


def test_the_table_is_redrawn_over_the_last_frame_and_left_in_place() -> None:
    stream = io.StringIO()
    table = LiveTable(stream, colour=False, size=lambda: (60, 24))
    table.redraw([[("one", "")], [("two", "")]])
    table.redraw([[("one", "")], [("two", "")]])  # nothing changed: nothing written
    table.redraw([[("only", "")]])
    table.clear()
    assert stream.getvalue() == (
        "\x1b[?25l"  # the cursor hidden while the frame is drawn
        "one\x1b[K\ntwo\x1b[K\n\x1b[J"
        "\r\x1b[2Aonly\x1b[K\n\x1b[J"  # up over both lines; the longer frame's rest cleared
        "\x1b[?25h"  # the frame stays, the cursor comes back
    )


def test_a_frame_taller_than_the_terminal_keeps_its_last_lines() -> None:
    stream = io.StringIO()
    table = LiveTable(stream, colour=False, size=lambda: (40, 4))
    table.redraw([[(f"line {n}", "")] for n in range(10)])
    assert stream.getvalue().split("\x1b[?25l")[1].split("\x1b[K\n")[:3] == [
        "line 7",
        "line 8",
        "line 9",
    ]


def test_the_output_tail_reads_the_running_execution_then_its_news() -> None:
    tail = OutputTail(keep=2)
    run = a_run("running", stage("implement", 1, "passed"), stage("test", 1, "running"))
    assert tail.request(run) == {"run": "R3", "stage": "test#1", "tail": 2}
    page = {"records": [{"stream": "stdout", "text": "a"}, {"stream": "system", "text": "s"}]}
    assert tail.take({**page, "next_cursor": "9", "complete": True})
    assert tail.request(run) == {"run": "R3", "stage": "test#1", "after": "9"}
    tail.take({"records": [{"text": "b"}, {"text": "c"}], "next_cursor": "20", "complete": False})
    assert list(tail.lines) == ["b", "c"]
    assert tail.request(run) == {"run": "R3", "stage": "test#1", "tail": 2}  # far behind: jump
    moved = a_run("running", stage("test", 1, "passed"), stage("merge", 1, "running"))
    assert tail.request(moved) == {"run": "R3", "stage": "merge#1", "tail": 2}
    assert list(tail.lines) == []
    assert tail.request(a_run("merged", stage("merge", 1, "passed"))) is None


# --- the follower and the long-poll -----------------------------------------------------


class ScriptedClient(Client):
    """The follower's client, answering from a script (``Scripted`` replies by verb)."""

    def __init__(self, script: dict[str, list[Any]]) -> None:
        super().__init__(Path("/nonexistent.sock"))
        self.scripted = Scripted(script)
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def call(self, verb: str, args: dict[str, Any] | None = None) -> Reply:
        self.requests.append((verb, dict(args or {})))
        reply = self.scripted({"verb": verb, "id": "1", "args": args or {}})
        line = reply if isinstance(reply, bytes) else orjson.dumps(reply)
        return Reply(orjson.loads(line), line)


def with_epoch(reply: dict[str, Any], epoch: int) -> dict[str, Any]:
    return {**reply, "epoch": epoch}


def refused(field: str) -> bytes:
    body = {
        "id": "?",
        "ok": False,
        "error": {"code": "invalid_arguments", "message": "no", "details": {"field": field}},
    }
    return orjson.dumps(body) + b"\n"


def test_a_daemon_with_an_epoch_holds_the_followers_shows_instead_of_sleeps() -> None:
    running = run_value("running", [("implement", 1, "running")])
    client = ScriptedClient(
        {
            "show": [
                with_epoch(ticket_value([]), 4),
                with_epoch(ticket_value([{"id": "R3", "terminal": False}]), 5),
                with_epoch(running, 5),
                with_epoch(running, 7),
                with_epoch(run_value("merged", [("implement", 1, "passed")]), 9),
            ]
        }
    )
    naps: list[float] = []
    progress = Progress(io.StringIO(), live=False)
    follower = RunFollower(client, "fix", False, False, progress, naps.append)
    assert follower.run() == 0
    wait = {"since": 4, "wait_ms": SHOW_WAIT_MS}
    assert client.requests == [
        ("show", {"ref": "fix"}),
        ("show", {"ref": "fix", **wait}),
        ("show", {"ref": "R3"}),  # a new target is looked at at once
        ("show", {"ref": "R3", "since": 5, "wait_ms": SHOW_WAIT_MS}),
        ("show", {"ref": "R3", "since": 7, "wait_ms": SHOW_WAIT_MS}),
    ]
    assert naps == []


def test_a_daemon_refusing_since_is_polled_as_before() -> None:
    running = run_value("running", [("implement", 1, "running")])
    client = ScriptedClient(
        {
            "show": [
                with_epoch(running, 1),
                refused("since"),
                running,
                running,
                run_value("failed", [("implement", 1, "failed")], reason="x"),
            ]
        }
    )
    naps: list[float] = []
    follower = RunFollower(client, "R3", True, False, Progress(io.StringIO(), False), naps.append)
    assert follower.run() == 10
    assert [args for _, args in client.requests] == [
        {"ref": "R3"},
        {"ref": "R3", "since": 1, "wait_ms": SHOW_WAIT_MS},
        {"ref": "R3"},  # the same look again, without what was refused
        {"ref": "R3"},
        {"ref": "R3"},
    ]
    assert naps == [POLL_MIN_S, POLL_MIN_S]


def test_the_live_view_waits_on_the_running_stages_output_where_the_daemon_can() -> None:
    running = run_value("running", [("implement", 1, "running")])
    running["value"]["id"] = "R3"
    page = {"records": [{"stream": "stdout", "text": "hi"}], "next_cursor": "5", "complete": True}
    quiet = {"records": [], "next_cursor": "5", "complete": True}
    client = ScriptedClient(
        {
            "show": [running, running, running, run_value("merged", [("implement", 1, "passed")])],
            "logs": [page, refused("wait_ms"), quiet, quiet],
        }
    )
    naps: list[float] = []
    stream = io.StringIO()
    table = LiveTable(stream, colour=False, size=lambda: (80, 24))
    follower = RunFollower(client, "R3", False, False, table, naps.append, LIVE_WAIT_MS)
    assert follower.run() == 0
    logs = [args for verb, args in client.requests if verb == "logs"]
    assert logs == [
        {"run": "R3", "stage": "implement#1", "tail": 6},
        {"run": "R3", "stage": "implement#1", "after": "5", "wait_ms": LIVE_WAIT_MS},
        {"run": "R3", "stage": "implement#1", "after": "5"},  # refused: sent again without
        {"run": "R3", "stage": "implement#1", "after": "5"},
    ]
    assert naps == [POLL_MIN_S] * 3  # polled as before, between every look
    assert "    hi\x1b[K" in stream.getvalue()


def test_the_live_view_holds_the_logs_request_instead_of_sleeping() -> None:
    running = run_value("running", [("implement", 1, "running")])
    page = {"records": [{"stream": "stdout", "text": "hi"}], "next_cursor": "5", "complete": True}
    client = ScriptedClient(
        {
            "show": [
                with_epoch(running, 2),
                with_epoch(running, 3),
                with_epoch(running, 3),
                run_value("merged", []),
            ],
            "logs": [page, {**page, "next_cursor": "6"}, {**page, "next_cursor": "7"}],
        }
    )
    naps: list[float] = []
    table = LiveTable(io.StringIO(), colour=False, size=lambda: (80, 24))
    follower = RunFollower(client, "R3", False, False, table, naps.append, LIVE_WAIT_MS)
    assert follower.run() == 0
    shows = [args for verb, args in client.requests if verb == "show"]
    # After a held logs request the next show answers at once; only after the first
    # (a tail, never held) does a show wait, a second at most (the clock on screen).
    assert shows == [
        {"ref": "R3"},
        {"ref": "R3", "since": 2, "wait_ms": LIVE_WAIT_MS},
        {"ref": "R3"},
        {"ref": "R3"},
    ]
    assert all(0 <= nap <= 0.1 for nap in naps)  # at most ten frames a second


def test_the_plain_follow_is_unchanged_off_a_terminal(tmp_path: Path) -> None:
    # CliRunner's stdout is no terminal: the transitions on stderr, as before.
    daemon = FakeDaemon(
        tmp_path / "d.sock",
        Scripted({"show": [run_value("merged", [("implement", 1, "passed")])]}),
    )
    try:
        result = CliRunner().invoke(
            main, ["--socket", str(daemon.path), "show", "R3", "--follow"], env=CLEAN_ENV
        )
    finally:
        daemon.close()
    assert (result.exit_code, result.stdout) == (0, "R3 merged\n")
    assert result.stderr.splitlines() == ["R3 implement#1 passed", "R3 merged"]
    assert sent(daemon, "show") == [{"ref": "R3"}]


@pytest.mark.parametrize("value", [None, "7", True, 1.5])
def test_only_an_integer_epoch_is_taken(value: Any) -> None:
    poll = LongPoll()
    assert epoch_of({"epoch": value}) is None
    assert poll.held("show", 10, epoch_of({"epoch": value})) == {}
    assert poll.held("show", 10, epoch_of({"epoch": 3})) == {"since": 3, "wait_ms": 10}
