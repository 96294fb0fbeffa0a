"""logs, events, pause/resume and show --follow against a fake daemon that scripts its pages.

The fake answers each request with the next scripted reply for its verb, so
a test says exactly which pages a follower sees and checks which requests it
sent, where it slept, what it printed and how it exited.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from sloopctl.cli import main
from sloopctl.client import Client
from sloopctl.follow import (
    POLL_MAX_S,
    POLL_MIN_S,
    Progress,
    event_line,
    record_line,
    transitions,
)
from sloopctl.layout import painter
from sloopctl.polling import FOLLOW_WAIT_MS, SHOW_WAIT_MS
from tests.unit.test_sloopctl_cli import CLEAN_ENV, FakeDaemon

Script = dict[str, list[dict[str, Any] | bytes]]


class Scripted:
    """Replies in order, per verb; a request past the script fails the test."""

    def __init__(self, script: Script) -> None:
        self.script = {verb: list(replies) for verb, replies in script.items()}

    def __call__(self, request: dict[str, Any]) -> dict[str, Any] | bytes:
        replies = self.script.get(request["verb"])
        assert replies, f"unscripted request: {request}"
        reply = replies.pop(0)
        if isinstance(reply, bytes):
            return reply.replace(b'"id":"?"', b'"id":"' + request["id"].encode() + b'"')
        return {"id": request["id"], "ok": True, "data": reply}


def error(code: str, message: str = "no", **details: Any) -> bytes:
    """An error envelope (its id filled in when sent)."""
    body = {"id": "?", "ok": False, "error": {"code": code, "message": message, "details": details}}
    return orjson.dumps(body) + b"\n"


# What a daemon older than 0.7.0 answers to wait_ms (it rejects unknown arguments).
NO_LONG_POLL = error(
    "invalid_arguments",
    "unknown argument 'wait_ms' for verb 'logs'",
    field="wait_ms",
    allowed=["after", "run", "stage", "tail"],
)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every sleep the command asked for (the follower never really waits)."""
    asked: list[float] = []
    monkeypatch.setattr(time, "sleep", asked.append)
    return asked


@pytest.fixture
def fake() -> Iterator[Callable[[Script], FakeDaemon]]:
    folder = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    daemons: list[FakeDaemon] = []

    def start(script: Script) -> FakeDaemon:
        daemon = FakeDaemon(folder / f"f{len(daemons)}.sock", Scripted(script))
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.close()
    shutil.rmtree(folder, ignore_errors=True)


def sloopctl(daemon: FakeDaemon, *args: str) -> Result:
    return CliRunner().invoke(main, ["--socket", str(daemon.path), *args], env=CLEAN_ENV)


def rec(n: int, stage: str = "implement", attempt: int = 1, stream: str = "stdout") -> Any:
    return {
        "cursor": str(n),
        "ts_ms": 1_700_000_000_000 + n,
        "stage": stage,
        "attempt": attempt,
        "stream": stream,
        "text": f"line {n}",
    }


def page(
    numbers: list[int], cursor: int, complete: bool, terminal: bool, elided: int = 0
) -> dict[str, Any]:
    return {
        "records": [rec(n) for n in numbers],
        "next_cursor": str(cursor),
        "complete": complete,
        "elided": elided,
        "terminal": terminal,
    }


def sent(daemon: FakeDaemon, verb: str) -> list[dict[str, Any]]:
    return [r["args"] for r in daemon.requests if r["verb"] == verb]


# --- logs -----------------------------------------------------------------------------


FOLLOW_PAGES = [
    page([1, 2], 2, complete=False, terminal=False),
    page([3], 3, complete=True, terminal=False),  # caught up, run in flight
    page([], 3, complete=True, terminal=False),
    page([], 3, complete=True, terminal=False),
    page([4], 4, complete=False, terminal=True),  # settled, but more to read
    page([5], 5, complete=True, terminal=True),  # the last page
    page([6], 6, complete=True, terminal=True),  # never asked for
]


def test_logs_follow_waits_in_the_daemon_once_caught_up_and_stops_at_complete_terminal(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    daemon = fake({"logs": list(FOLLOW_PAGES)})
    result = sloopctl(daemon, "logs", "R1", "--stage", "implement#1", "-f")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"[implement#1 stdout] line {n}" for n in range(1, 6)]
    base = {"run": "R1", "stage": "implement#1"}
    held = {**base, "after": "3", "wait_ms": FOLLOW_WAIT_MS}
    assert sent(daemon, "logs") == [
        base,
        {**base, "after": "2"},  # an incomplete page: read on at once, no wait
        held,  # caught up: the daemon holds the request until there is news
        held,
        held,
        {**base, "after": "4"},
    ]
    assert sleeps == []  # the client itself never waits


def test_logs_follow_polls_a_daemon_that_does_not_know_wait_ms(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    pages: list[dict[str, Any] | bytes] = list(FOLLOW_PAGES)
    pages.insert(2, NO_LONG_POLL)
    daemon = fake({"logs": pages})
    result = sloopctl(daemon, "logs", "R1", "--stage", "implement#1", "-f")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"[implement#1 stdout] line {n}" for n in range(1, 6)]
    assert result.stderr == ""  # the refusal is not the operator's business
    base = {"run": "R1", "stage": "implement#1"}
    assert sent(daemon, "logs") == [
        base,
        {**base, "after": "2"},
        {**base, "after": "3", "wait_ms": FOLLOW_WAIT_MS},  # refused: asked again without
        {**base, "after": "3"},
        {**base, "after": "3"},
        {**base, "after": "3"},
        {**base, "after": "4"},
    ]
    # Polls once refused, after each caught-up page: short first, longer while idle.
    assert len(sleeps) == 2
    assert sleeps[0] == POLL_MIN_S
    assert sleeps[0] < sleeps[1] <= POLL_MAX_S
    assert all(POLL_MIN_S <= s <= POLL_MAX_S for s in sleeps)


def test_logs_without_follow_pages_until_complete(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    daemon = fake(
        {
            "logs": [
                page([1, 2], 2, complete=False, terminal=False),
                page([3], 3, complete=True, terminal=False),
            ]
        }
    )
    result = sloopctl(daemon, "logs", "fix#2")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 3
    assert sent(daemon, "logs") == [{"run": "fix#2"}, {"run": "fix#2", "after": "2"}]
    assert sleeps == []


def test_logs_tail_reports_elided_then_follows_from_its_cursor(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    daemon = fake(
        {
            "logs": [
                page([41, 42], 42, complete=True, terminal=False, elided=40),
                page([43], 43, complete=True, terminal=True),
            ]
        }
    )
    result = sloopctl(daemon, "logs", "R1", "--tail", "2", "--follow")
    assert result.exit_code == 0
    assert result.stderr == "… 40 earlier records elided\n"
    assert [line.rsplit(" ", 1)[1] for line in result.stdout.splitlines()] == ["41", "42", "43"]
    assert sent(daemon, "logs") == [
        {"run": "R1", "tail": 2},
        {"run": "R1", "after": "42", "wait_ms": FOLLOW_WAIT_MS},
    ]

    one = fake({"logs": [page([9], 9, complete=True, terminal=True, elided=1)]})
    assert sloopctl(one, "logs", "R1", "--tail", "1").stderr == "… 1 earlier record elided\n"


def test_logs_json_prints_each_envelope_verbatim(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    first = b'{"id":"?",  "ok": true, "data": {"records": [{"cursor": "1", "text": "a"}], "next_cursor": "1", "complete": true, "elided": 0, "terminal": false}}\n'  # noqa: E501
    idle = b'{"id":"?", "ok": true, "data": {"records": [], "next_cursor": "1", "complete": true, "elided": 0, "terminal": false}}\n'  # noqa: E501
    last = b'{"id":"?", "ok": true, "data": {"records": [], "next_cursor": "1", "complete": true, "elided": 0, "terminal": true, "new_field": 1}}\n'  # noqa: E501
    daemon = fake({"logs": [first, idle, idle, last]})
    result = sloopctl(daemon, "--json", "logs", "R1", "-f")
    assert result.exit_code == 0
    # While following, pages with nothing new are left out; the last one never is.
    expected = [first.replace(b'"?"', b'"1"'), last.replace(b'"?"', b'"4"')]
    assert result.stdout_bytes.splitlines(keepends=True) == expected


def test_logs_errors_go_through_the_one_handler(fake: Callable[[Script], FakeDaemon]) -> None:
    daemon = fake({"logs": [error("invalid_arguments", "bad stage"), error("not_found")]})
    result = sloopctl(daemon, "logs", "R1", "--stage", "x#0")
    assert result.exit_code == 1
    assert result.stderr == "error: invalid_arguments: bad stage\n"
    as_json = sloopctl(daemon, "--json", "logs", "R9")
    assert as_json.exit_code == 1
    assert orjson.loads(as_json.stdout)["error"]["code"] == "not_found"


def test_logs_unreadable_page_exits_5(fake: Callable[[Script], FakeDaemon]) -> None:
    daemon = fake({"logs": [{"records": []}]})
    result = sloopctl(daemon, "logs", "R1")
    assert result.exit_code == 5
    assert "next_cursor" in result.stderr


def test_record_line_paints_only_the_stream_and_never_stdout() -> None:
    paint = painter(True)
    assert record_line(rec(1), paint) == "[implement#1 stdout] line 1"
    line = record_line(rec(2, stream="stderr"), paint)
    assert line == "[implement#1 \x1b[33mstderr\x1b[0m] line 2"
    assert "\x1b[" not in record_line(rec(3, stream="stderr"), painter(False))
    legacy = {"stream": "stdout", "text": "old"}
    assert record_line(legacy, paint) == "[- stdout] old"


# --- events ------------------------------------------------------------------------------


def event(n: int, kind: str = "run_claimed", ticket: Any = "T1", run: Any = "R1") -> Any:
    return {
        "cursor": str(n),
        "kind": kind,
        "at_ms": 1_700_000_000_000,
        "ticket": ticket,
        "run": run,
        "data": {"state": "failed", "reason": "two words", "halt": None},
    }


def test_events_page_to_the_end_without_follow(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    daemon = fake(
        {
            "events": [
                {"events": [event(1), event(2)], "next_cursor": "2"},
                {"events": [event(3)], "next_cursor": "7"},
                {"events": [], "next_cursor": "7"},
            ]
        }
    )
    result = sloopctl(daemon, "events", "--scope", "project:web")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 3
    scope = {"scope": "project:web"}
    assert sent(daemon, "events") == [scope, {**scope, "after": "2"}, {**scope, "after": "7"}]
    assert sleeps == []


FOLLOWED_EVENTS: list[dict[str, Any] | bytes] = [
    {"events": [event(5)], "next_cursor": "5"},
    {"events": [], "next_cursor": "5"},
    {"events": [event(6, "gate_changed", None, None)], "next_cursor": "6"},
    {"events": [], "next_cursor": "6"},
]


def interrupt_after(daemon: FakeDaemon, requests: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C once the daemon has answered ``requests`` requests."""
    real = Client.call

    def call(self: Client, verb: str, args: dict[str, Any] | None = None) -> Any:
        if len(daemon.requests) >= requests:
            raise KeyboardInterrupt
        return real(self, verb, args)

    monkeypatch.setattr(Client, "call", call)


def test_events_tail_is_one_page_and_follow_waits_in_the_daemon_until_ctrl_c(
    fake: Callable[[Script], FakeDaemon], monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    daemon = fake({"events": [{"events": [event(5)], "next_cursor": "5"}]})
    result = sloopctl(daemon, "events", "--tail", "1")
    assert result.exit_code == 0
    assert sent(daemon, "events") == [{"tail": 1}]

    following = fake({"events": list(FOLLOWED_EVENTS)})
    interrupt_after(following, 4, monkeypatch)
    result = sloopctl(following, "--json", "events", "--tail", "1", "--follow")
    assert result.exit_code == 130
    pages = [orjson.loads(line)["data"] for line in result.stdout.splitlines()]
    assert [[e["cursor"] for e in p["events"]] for p in pages] == [["5"], ["6"]]
    held = FOLLOW_WAIT_MS
    assert sent(following, "events") == [
        {"tail": 1},
        {"after": "5", "wait_ms": held},
        {"after": "5", "wait_ms": held},
        {"after": "6", "wait_ms": held},
    ]
    assert sleeps == []


def test_events_follow_polls_a_daemon_that_does_not_know_wait_ms(
    fake: Callable[[Script], FakeDaemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:  # polled after both empty pages: enough
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", nap)
    replies = list(FOLLOWED_EVENTS)
    replies.insert(1, NO_LONG_POLL)
    following = fake({"events": replies})
    result = sloopctl(following, "--json", "events", "--tail", "1", "--follow")
    assert result.exit_code == 130
    pages = [orjson.loads(line)["data"] for line in result.stdout.splitlines()]
    assert [[e["cursor"] for e in p["events"]] for p in pages] == [["5"], ["6"]]
    assert sent(following, "events") == [
        {"tail": 1},
        {"after": "5", "wait_ms": FOLLOW_WAIT_MS},
        {"after": "5"},
        {"after": "5"},
        {"after": "6"},
    ]


def test_event_line_shows_time_kind_ticket_run_and_data() -> None:
    line = event_line(event(1, "run_finished"))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1_700_000_000))
    assert line == f'{stamp} run_finished   T1    R1    state=failed reason="two words"'
    wide = event_line({"kind": "gate_changed", "ticket": None, "run": None, "data": {}})
    assert wide == "- gate_changed   -     -"


def test_a_run_resolved_event_says_what_became_of_the_run() -> None:
    data = {"resolution": "dismissed", "by": "alice", "reason": "moot", "auto": False}
    line = event_line({"kind": "run_resolved", "ticket": "T3", "run": "R7", "data": data})
    assert line == "- run_resolved   T3    R7    resolved: dismissed (by alice): moot"
    data = {"resolution": "merged", "by": None, "reason": None, "auto": True}
    line = event_line({"kind": "run_resolved", "ticket": "T3", "run": "R7", "data": data})
    assert line.endswith("R7    resolved: merged by hand (found on main)")


# --- pause, resume -------------------------------------------------------------------------


def test_pause_and_resume_print_the_gate(fake: Callable[[Script], FakeDaemon]) -> None:
    daemon = fake(
        {
            "pause": [{"gate": {"state": "paused", "until_ms": None, "reason": "freeze"}}],
            "resume": [{"gate": {"state": "open", "until_ms": None, "reason": None}}],
        }
    )
    assert sloopctl(daemon, "pause", "--reason", "freeze").stdout == "gate paused (freeze)\n"
    assert sloopctl(daemon, "resume").stdout == "gate open\n"
    assert [(r["verb"], r["args"]) for r in daemon.requests] == [
        ("pause", {"reason": "freeze"}),
        ("resume", {}),
    ]
    refused = fake({"pause": [error("daemon_unavailable", "store refused")]})
    assert sloopctl(refused, "pause").exit_code == 4


# --- show --follow -------------------------------------------------------------------------


def run_value(state: str, stages: list[tuple[str, int, str]], reason: str | None = None) -> Any:
    return {
        "kind": "run",
        "value": {
            "id": "R3",
            "alias": "fix#1",
            "state": state,
            "terminal": state in ("merged", "failed", "needs_review", "aborted"),
            "reason": reason,
            "stages": [{"stage": s, "attempt": a, "state": st} for s, a, st in stages],
        },
    }


def ticket_value(runs: list[dict[str, Any]], trigger: Any = None) -> Any:
    return {
        "kind": "ticket",
        "value": {
            "id": "T1",
            "name": "fix",
            "state": "ready",
            "waiting": {"reason": "no_trigger", "message": "nothing queued"},
            "trigger": trigger,
            "runs": runs,
        },
    }


@pytest.mark.parametrize(
    ("state", "code"), [("merged", 0), ("failed", 10), ("needs_review", 11), ("aborted", 12)]
)
def test_follow_quiet_exit_codes(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float], state: str, code: int
) -> None:
    daemon = fake(
        {
            "show": [
                run_value("running", [("implement", 1, "running")]),
                run_value(state, [("implement", 1, "passed")], reason="because"),
            ]
        }
    )
    result = sloopctl(daemon, "show", "R3", "--follow", "--quiet")
    assert (result.exit_code, result.stdout, result.stderr) == (code, "", "")
    assert sent(daemon, "show") == [{"ref": "R3"}, {"ref": "R3"}]
    assert sleeps == [POLL_MIN_S]


def test_follow_holds_on_the_epoch_when_the_daemon_sends_one(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    """A 0.7.0 daemon: each ask passes the last epoch as since, and nothing sleeps;
    a new target (the ticket's run) is read at once, without since."""
    summary = {"id": "R3", "terminal": False, "state": "claimed"}
    daemon = fake(
        {
            "show": [
                {**ticket_value([]), "epoch": 7},
                {**ticket_value([summary]), "epoch": 9},
                {**run_value("running", [("implement", 1, "running")]), "epoch": 9},
                {**run_value("merged", [("implement", 1, "passed")]), "epoch": 12},
            ]
        }
    )
    result = sloopctl(daemon, "show", "fix", "--follow", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert sent(daemon, "show") == [
        {"ref": "fix"},
        {"ref": "fix", "since": 7, "wait_ms": SHOW_WAIT_MS},
        {"ref": "R3"},
        {"ref": "R3", "since": 9, "wait_ms": SHOW_WAIT_MS},
    ]
    assert sleeps == []


def test_follow_prints_transitions_on_stderr_and_the_outcome_on_stdout(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    daemon = fake(
        {
            "show": [
                run_value("claimed", [("implement", 0, "pending"), ("test", 0, "pending")]),
                run_value("running", [("implement", 1, "running"), ("test", 0, "pending")]),
                run_value("running", [("implement", 1, "running"), ("test", 0, "pending")]),
                run_value(
                    "failed",
                    [("implement", 1, "passed"), ("test", 1, "failed")],
                    reason="stage 'test' failed",
                ),
            ]
        }
    )
    result = sloopctl(daemon, "show", "fix#1", "--follow")
    assert result.exit_code == 10
    assert result.stdout == "R3 failed: stage 'test' failed\n"
    assert result.stderr.splitlines() == [
        "R3 claimed",
        "R3 running",
        "R3 implement#1 running",
        "R3 implement#1 passed",
        "R3 test#1 failed",
        "R3 failed",
        # What to run next (issue 26): the failed execution's output, the details, the diff.
        "next: sloopctl logs R3 --stage test#1",
        "next: sloopctl show R3",
        "next: sloopctl diff R3",
    ]


def test_follow_a_ticket_waits_for_its_run(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    summary = {"id": "R3", "terminal": False, "state": "claimed"}
    daemon = fake(
        {
            "show": [
                ticket_value([]),
                ticket_value([]),
                ticket_value([summary]),
                run_value("merged", [("implement", 1, "passed")]),
            ]
        }
    )
    result = sloopctl(daemon, "show", "fix", "--follow")
    assert result.exit_code == 0
    assert sent(daemon, "show") == [{"ref": "fix"}, {"ref": "fix"}, {"ref": "fix"}, {"ref": "R3"}]
    assert result.stderr.splitlines()[0] == "T1 waiting for a run: no_trigger: nothing queued"
    assert result.stdout == "R3 merged\n"


def test_follow_a_ticket_with_a_queued_trigger_skips_its_settled_run(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    old = {"id": "R2", "terminal": True, "state": "failed"}
    new = {"id": "R3", "terminal": False, "state": "running"}
    trigger = {"id": "TR4", "ticket": "T1", "due_at_ms": 0}
    daemon = fake(
        {
            "show": [
                ticket_value([old], trigger),
                ticket_value([old]),  # claimed meanwhile: the trigger is gone, no run yet
                ticket_value([new, old]),
                run_value("needs_review", []),
            ]
        }
    )
    result = sloopctl(daemon, "show", "T1", "--follow", "--quiet")
    assert result.exit_code == 11
    assert sent(daemon, "show")[-1] == {"ref": "R3"}


def test_follow_a_ticket_without_a_trigger_follows_its_settled_run(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    old = {"id": "R2", "terminal": True, "state": "failed"}
    daemon = fake({"show": [ticket_value([old]), run_value("failed", [], reason="x")]})
    result = sloopctl(daemon, "show", "T1", "--follow", "--quiet")
    assert result.exit_code == 10
    assert sleeps == []


def test_follow_json_prints_the_envelopes_that_show_a_change(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float]
) -> None:
    running = run_value("running", [("implement", 1, "running")])
    daemon = fake({"show": [running, running, running, run_value("merged", [])]})
    result = sloopctl(daemon, "--json", "show", "R3", "--follow")
    assert result.exit_code == 0
    envelopes = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [e["data"]["value"]["state"] for e in envelopes] == ["running", "merged"]
    assert [e["id"] for e in envelopes] == ["1", "4"]  # verbatim: the daemon's own ids


def test_follow_errors_and_usage(
    fake: Callable[[Script], FakeDaemon], sleeps: list[float], tmp_path: Path
) -> None:
    daemon = fake(
        {
            "show": [
                run_value("running", []),
                error("daemon_unavailable", "store refused"),
                {"kind": "project", "value": {"name": "web"}},
                {"kind": "matches", "ref": "zz", "tickets": [], "total": 0},
                {"kind": "dashboard"},
            ]
        }
    )
    refused = sloopctl(daemon, "show", "R3", "--follow", "--quiet")
    assert refused.exit_code == 4
    assert "store refused" in refused.stderr
    assert sloopctl(daemon, "show", "project:web", "--follow").exit_code == 2
    assert sloopctl(daemon, "show", "zz", "--follow").exit_code == 2
    assert sloopctl(daemon, "show", "--limit", "3").exit_code == 0  # plain show is unchanged
    assert daemon.requests[-1]["args"] == {"limit": 3}
    assert sloopctl(daemon, "show", "--follow").exit_code == 2
    assert sloopctl(daemon, "show", "R3", "--quiet").exit_code == 2
    assert sloopctl(daemon, "show", "R3", "--follow", "--limit", "2").exit_code == 2

    gone = CliRunner().invoke(
        main, ["--socket", str(tmp_path / "no.sock"), "show", "R3", "--follow", "-q"], env=CLEAN_ENV
    )
    assert gone.exit_code == 3
    assert "daemon_unavailable" in gone.stderr


def test_transitions_list_each_change_once_and_the_settling_last() -> None:
    def view(state: str, *rows: tuple[str, int, str]) -> dict[str, Any]:
        value: dict[str, Any] = run_value(state, list(rows))["value"]
        return value

    start = view("running", ("implement", 1, "running"), ("merge", 0, "pending"))
    assert transitions(None, start) == ["R3 running", "R3 implement#1 running"]
    assert transitions(start, start) == []
    end = view("merged", ("implement", 1, "passed"), ("merge", 1, "passed"))
    assert transitions(start, end) == ["R3 implement#1 passed", "R3 merge#1 passed", "R3 merged"]


def test_progress_on_a_terminal_redraws_one_line_in_place() -> None:
    stream = io.StringIO()
    progress = Progress(stream, live=True)
    running = run_value("running", [("implement", 1, "running"), ("merge", 0, "pending")])
    progress.show(running["value"])
    progress.show(running["value"])  # nothing changed: nothing drawn
    progress.show(run_value("running", [("implement", 1, "passed")])["value"])
    progress.clear()
    assert stream.getvalue() == (
        "\r\x1b[KR3 running · implement▶ merge·\r\x1b[KR3 running · implement✓\r\x1b[K"
    )


def test_the_outcome_is_said_once_when_stdout_and_stderr_are_one_file() -> None:
    """0.8.0: ``show --follow`` on one terminal (or ``2>&1``) printed ``R3 merged`` as a
    transition on stderr and again as the outcome line on stdout."""
    running = run_value("running", [("implement", 1, "running"), ("merge", 0, "pending")])
    merged = run_value("merged", [("implement", 1, "passed"), ("merge", 1, "passed")])
    merged["value"]["terminal"] = True
    one_file = io.StringIO()
    progress = Progress(one_file, live=False, echoed=True)
    progress.show(running["value"])
    progress.show(merged["value"])
    assert "R3 merged" not in one_file.getvalue()  # the outcome line on stdout says it
    assert "R3 merge#1 passed" in one_file.getvalue()
    apart = io.StringIO()
    progress = Progress(apart, live=False, echoed=False)
    progress.show(running["value"])
    progress.show(merged["value"])
    assert apart.getvalue().rstrip().endswith("R3 merged")  # stderr alone: said there too
