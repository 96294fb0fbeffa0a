"""Long-poll through the real socket: ``logs`` and ``events`` with ``wait_ms``.

A held request must answer as soon as its feed has news for it (a line the
agent prints, the run settling, an event of its scope), answer its empty page
when the wait ends, answer at once when there is something to say already
(a page with records, a terminal run), refuse bad values with the request's
id, never block other connections, keep replies in request order on its own,
end cleanly when its client goes away or the daemon stops, and cost nothing
while it waits.  The agent here prints, then waits on a flag file the test
creates, then prints again: whatever the daemon answers before the flag, the
agent had not printed.
"""

from __future__ import annotations

import select
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import orjson
import pytest

from tests.support.agents import Bench, printer_argv, sloop_toml, start_with_args, ticket_text
from tests.support.daemon import (
    free_loopback_port,
    metrics_sample,
    sloopctl_start,
    wait_until,
)

WAIT_MS = 30_000  # longer than any socket timeout here: an answer came from news, not the end
REPLY_TIMEOUT_S = 10.0


class Held:
    """One connection carrying one (or a few pipelined) requests, read later."""

    def __init__(self, path: Path, *requests: dict[str, Any]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.sock.connect(str(path))
        self.buffer = b""
        self.ids = [f"h{i}" for i in range(len(requests))]
        lines = [
            orjson.dumps({"v": 1, "id": rid, "verb": verb, "args": args})
            for rid, (verb, args) in zip(self.ids, [_split(r) for r in requests], strict=True)
        ]
        self.sock.sendall(b"\n".join(lines) + b"\n")

    def answered(self) -> bool:
        """Whether the daemon wrote anything on this connection yet."""
        if self.buffer:
            return True
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable)

    def reply(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the daemon closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        result: dict[str, Any] = orjson.loads(line)
        return result

    def data(self) -> dict[str, Any]:
        reply = self.reply()
        assert reply["ok"] is True, reply
        assert reply["id"] == self.ids[0], reply
        data: dict[str, Any] = reply["data"]
        return data

    def closed(self) -> bool:
        """True once the daemon has closed the connection (after what it wrote)."""
        return self.sock.recv(65536) == b""

    def close(self) -> None:
        self.sock.close()


def _split(request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return request["verb"], {k: v for k, v in request.items() if k != "verb"}


def texts(records: list[dict[str, Any]]) -> list[str]:
    return [r["text"] for r in records]


def live(bench: Bench, extra_steps: list[dict[str, Any]] | None = None) -> None:
    """One run whose agent prints 'first 1..3', waits for 'go', prints 'second 1',
    waits for 'end' and exits (the flow has no merge stage: it settles needs_review)."""
    printer = printer_argv(
        bench,
        [
            {"do": "lines", "text": "first {n}", "first": 1, "last": 3},
            {"do": "wait", "path": bench.flag("go")},
            {"do": "lines", "text": "second {n}", "first": 1, "last": 1},
            {"do": "wait", "path": bench.flag("end")},
            *(extra_steps or []),
        ],
    )
    flows = {"default": [{"name": "implement", "action": "agent", "command": printer}]}
    bench.setup(
        sloop_toml(bench.argv(), flows=flows),
        {"live": ticket_text("Live"), "other": ticket_text("Other", project="else")},
    )


def caught_up(bench: Bench, text: str = "first 3") -> str:
    """The cursor past everything the run has logged, once ``text`` is among it."""

    def printed() -> str | None:
        cursor, seen = None, []
        while True:
            page = bench.ok("logs", {"run": "R1", **({"after": cursor} if cursor else {})})
            seen += texts(page["records"])
            cursor = page["next_cursor"]
            if page["complete"]:
                return cursor if text in seen else None

    found = wait_until(printed)
    assert isinstance(found, str)
    return found


def socket_of(bench: Bench) -> Path:
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    return bench.daemon.socket


@contextmanager
def holding(bench: Bench, *requests: dict[str, Any]) -> Iterator[Held]:
    held = Held(socket_of(bench), *requests)
    try:
        yield held
    finally:
        held.close()


def round_trip(bench: Bench) -> None:
    """One request answered on another connection: whatever the loop had queued
    before it (a woken waiter reading its page again) has run by then."""
    bench.ok("events", {"tail": 1})


# --- logs ----------------------------------------------------------------------------


def test_a_held_logs_request_answers_with_the_line_the_agent_prints(bench: Bench) -> None:
    live(bench)
    bench.start()
    bench.post("live")
    cursor = caught_up(bench)
    args = {"verb": "logs", "run": "R1", "after": cursor, "wait_ms": WAIT_MS}
    with (
        holding(bench, args) as every,
        holding(bench, {**args, "stage": "implement"}) as staged,
        holding(bench, {**args, "stage": "implement#1", "tail": 5}) as tailed,
    ):
        # Nothing new yet: other requests (and connections) are answered meanwhile.
        page = bench.ok("logs", {"run": "R1", "after": cursor})
        assert page["records"] == []
        assert page["terminal"] is False
        round_trip(bench)
        assert not every.answered()
        assert not staged.answered()
        assert not tailed.answered()
        bench.release("go")
        for held in (every, staged, tailed):
            data = held.data()
            assert texts(data["records"]) == ["second 1"], data
            assert data["complete"] is True
            assert data["terminal"] is False
            assert data["elided"] == 0
            assert data["next_cursor"] == data["records"][-1]["cursor"]
            assert int(data["next_cursor"]) == int(cursor) + 1
    bench.release("end")
    bench.wait_run("live#1")


def test_a_held_logs_request_ends_with_an_empty_page_and_a_terminal_run_answers_at_once(
    bench: Bench,
) -> None:
    live(bench)
    bench.start()
    bench.post("live")
    cursor = caught_up(bench)
    for args in (
        {"run": "R1", "after": cursor},
        {"run": "R1", "after": cursor, "tail": 5},
        {"run": "R1", "after": cursor, "stage": "implement#1"},
    ):
        began = time.monotonic()
        page = bench.ok("logs", {**args, "wait_ms": 300})
        # Held for its wait (the loop's timers run on its cached clock: a little slack).
        assert time.monotonic() - began >= 0.2, args
        assert page == {
            "records": [],
            "next_cursor": cursor,
            "complete": True,
            "elided": 0,
            "terminal": False,
        }, args
    # A page that has records is answered at once, however long the wait asked.
    first = bench.ok("logs", {"run": "R1", "wait_ms": WAIT_MS})
    assert texts(first["records"])[-3:] == ["first 1", "first 2", "first 3"]
    bench.release("go")
    bench.release("end")
    bench.wait_run("live#1")
    end = caught_up(bench, "second 1")
    for args in ({"run": "R1", "after": end}, {"run": "R1", "stage": "implement#7"}):
        settled = bench.ok("logs", {**args, "wait_ms": 60_000})  # the socket times out in 10 s
        assert settled["records"] == [], args
        assert settled["terminal"] is True, args


def test_a_held_logs_request_wakes_when_the_run_settles(bench: Bench) -> None:
    live(bench)
    bench.start()
    bench.post("live")
    cursor = caught_up(bench)
    never = {"verb": "logs", "run": "R1", "stage": "implement#2", "wait_ms": WAIT_MS}
    with holding(bench, never) as held:
        bench.release("go")  # records of another execution are no news for this page
        caught_up(bench, "second 1")
        round_trip(bench)
        assert not held.answered()
        bench.ok("abort", {"run": "R1"})
        data = held.data()
        assert data["records"] == []
        assert data["terminal"] is True
        assert data["complete"] is True
    # The settling lines are all there for a follower that was caught up before them.
    after = bench.ok("logs", {"run": "R1", "after": cursor, "wait_ms": WAIT_MS})
    assert after["terminal"] is True
    assert after["complete"] is True
    assert texts(after["records"])[0] == "second 1"
    assert texts(after["records"])[-1].startswith("run settled aborted")


@pytest.mark.parametrize("verb", ["logs", "events"])
def test_bad_wait_ms_values_are_refused_with_the_request_id(bench: Bench, verb: str) -> None:
    live(bench)
    bench.start()
    bench.post("live")
    base = {"run": "R1"} if verb == "logs" else {}
    refused: list[Any] = [-1, 60_001, 2**53, True, False, 1.5, 100.0, "100", [], {}]
    for value in refused:
        request = {"v": 1, "id": 4242, "verb": verb, "args": {**base, "wait_ms": value}}
        reply = bench.client.request(request)
        assert reply["id"] == 4242, (value, reply)
        assert reply["ok"] is False, (value, reply)
        assert reply["error"]["code"] == "invalid_arguments", (value, reply)
        assert reply["error"]["details"]["field"] == "wait_ms", (value, reply)
    for value in (0, 60_000):  # the bounds themselves are fine
        assert bench.ok(verb, {**base, "wait_ms": value, "tail": 1}) is not None
    bench.release("go")
    bench.release("end")
    bench.wait_run("live#1")


# --- events ----------------------------------------------------------------------------


def test_a_held_events_request_answers_only_with_an_event_of_its_scope(bench: Bench) -> None:
    live(bench)
    bench.start()
    bench.post("live")
    other = bench.post("other", hold=True)["ticket"]["id"]
    caught_up(bench)
    end = bench.ok("events", {"tail": 1})["next_cursor"]
    ask = {"verb": "events", "after": end, "wait_ms": WAIT_MS}
    with (
        holding(bench, ask) as everything,
        holding(bench, {**ask, "scope": other}) as by_ticket,
        holding(bench, {**ask, "scope": "project:else"}) as by_project,
        holding(bench, {**ask, "scope": "^oth"}) as by_pattern,
        holding(bench, {**ask, "scope": "R1"}) as by_run,
    ):
        round_trip(bench)
        assert not any(h.answered() for h in (everything, by_ticket, by_project, by_pattern))
        bench.ok("pause", {"reason": "a repository-wide event"})
        gate = everything.data()
        assert [e["kind"] for e in gate["events"]] == ["gate_changed"]
        round_trip(bench)  # the scoped waiters were woken, read their pages, and wait on
        assert not any(h.answered() for h in (by_ticket, by_project, by_pattern, by_run))
        bench.ok("resume")
        bench.ok("ready", {"ref": other})  # queued behind the run in flight
        bench.release("go")
        bench.release("end")
        settled = by_run.data()
        assert {e["run"] for e in settled["events"]} == {"R1"}
        assert settled["events"][-1]["kind"] == "run_finished"
        for held in (by_ticket, by_project, by_pattern):
            data = held.data()
            assert data["events"], data
            assert {e["ticket"] for e in data["events"]} == {other}, data
            assert data["events"][0]["kind"] == "run_claimed"
    bench.wait_run("other#1")


# --- connections: order, bounds, going away, stopping -----------------------------------


def test_held_requests_keep_reply_order_end_on_half_close_and_cost_nothing_idle(
    bench: Bench,
) -> None:
    port = free_loopback_port()
    live(bench)
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    bench.post("live")
    cursor = caught_up(bench)

    def held_now() -> float | None:
        return metrics_sample(port, "sloop_requests_held")

    # Pipelined behind a held request, a quick one is answered after it, in order.
    short = {"verb": "logs", "run": "R1", "after": cursor, "wait_ms": 400}
    with holding(bench, short, {"verb": "gc"}) as pipelined:
        first, second = pipelined.reply(), pipelined.reply()
        assert (first["id"], second["id"]) == ("h0", "h1")
        assert first["data"]["records"] == []
        assert second["data"] == {"removed": []}
    # The request metrics count answering, not the wait the client asked for.
    spent = metrics_sample(port, 'sloop_request_duration_seconds_sum{verb="logs"}')
    assert spent is not None
    assert spent < 0.4

    # A connection holds at most 16; the rest of its requests answer in their turn.
    events = {"verb": "events", "after": bench.ok("events", {"tail": 1})["next_cursor"]}
    with holding(bench, *([{**events, "wait_ms": WAIT_MS}] * 20)) as many:
        assert wait_until(lambda: held_now() == 16)
        # Half-closing ends every wait: all twenty answer (empty), then the daemon closes.
        many.sock.shutdown(socket.SHUT_WR)
        replies = [many.reply() for _ in range(20)]
        assert [r["id"] for r in replies] == many.ids
        assert all(r["ok"] and r["data"]["events"] == [] for r in replies)
        assert many.closed()
    assert wait_until(lambda: held_now() == 0)

    # Clients that vanish mid-wait are forgotten; the daemon serves on.
    ask = {"verb": "logs", "run": "R1", "after": cursor, "wait_ms": WAIT_MS}
    gone = [Held(socket_of(bench), ask) for _ in range(30)]
    staying = [Held(socket_of(bench), ask) for _ in range(30)]
    try:
        assert wait_until(lambda: held_now() == 60)
        for held in gone:
            held.close()
        assert wait_until(lambda: held_now() == 30)
        # An idle follower costs nothing: no request is answered while nothing happens.
        answered = metrics_sample(port, 'sloop_requests_total{code="ok",verb="logs"}')
        time.sleep(1.0)
        assert metrics_sample(port, 'sloop_requests_total{code="ok",verb="logs"}') == answered
        bench.release("go")
        for held in staying:
            assert texts(held.data()["records"]) == ["second 1"]
    finally:
        for held in gone + staying:
            held.close()
    assert wait_until(lambda: held_now() == 0)
    bench.release("end")
    bench.wait_run("live#1")


def test_a_stopping_daemon_answers_held_requests_then_closes(bench: Bench) -> None:
    live(bench)
    bench.start()
    bench.post("live")
    cursor = caught_up(bench)
    logs = {"verb": "logs", "run": "R1", "after": cursor, "wait_ms": WAIT_MS}
    events = {"verb": "events", "after": bench.ok("events", {"tail": 1})["next_cursor"]}
    assert bench.daemon is not None
    assert bench.daemon.proc is not None
    daemon = bench.daemon.proc
    with holding(bench, logs) as held_logs, holding(bench, {**events, "wait_ms": WAIT_MS}) as ev:
        round_trip(bench)
        daemon.send_signal(signal.SIGTERM)
        data = held_logs.data()
        assert data["records"] == []
        assert data["next_cursor"] == cursor
        assert held_logs.closed()
        assert ev.data()["events"] == []
        assert ev.closed()
    # It stops its run (whose agent still waits) and exits cleanly: one signal was enough.
    assert daemon.wait(20) == 0
    assert bench.stop() == 0


# --- sloopctl --------------------------------------------------------------------------


def test_sloopctl_logs_follow_prints_a_new_line_while_the_run_is_in_flight(bench: Bench) -> None:
    port = free_loopback_port()
    live(bench)
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    bench.post("live")
    caught_up(bench)
    follower = sloopctl_start(socket_of(bench), "logs", "R1", "-f")
    lines: Queue[str] = Queue()

    def read() -> None:
        assert follower.stdout is not None
        for line in follower.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def next_line() -> str:
        try:
            return lines.get(timeout=REPLY_TIMEOUT_S)
        except Empty:
            raise AssertionError("the follower printed nothing") from None

    try:
        seen = [next_line() for _ in range(4)]  # the start line and first 1..3
        assert seen[-3:] == [f"[implement#1 stdout] first {n}" for n in (1, 2, 3)]
        assert wait_until(lambda: metrics_sample(port, "sloop_requests_held") == 1)
        bench.release("go")
        # The agent still waits for 'end': the run is in flight, and the line is there.
        assert next_line() == "[implement#1 stdout] second 1"
        run = bench.show_run("R1")
        assert run is not None
        assert run["terminal"] is False
        bench.release("end")
        code = follower.wait(timeout=20)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
        reader.join(5)
        assert follower.stdout is not None
        assert follower.stderr is not None
        problems = follower.stderr.read()
        follower.stdout.close()
        follower.stderr.close()
    assert code == 0, problems
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert rest[-1].startswith("[implement#1 system] run settled needs_review")


# --- show ------------------------------------------------------------------------------


def test_a_held_show_answers_when_a_run_in_flight_becomes_stalled(bench: Bench) -> None:
    """A stall is read off a clock, not written by anyone: a ``show`` held past the
    dashboard's epoch must still answer when a run crosses its ``stall_after`` (the web
    view and ``show --follow`` hold one), not only when the wait ends (30 s here; the
    connection gives up after 10 s, so a missed wake-up fails the test)."""
    agent = bench.argv("--say", "working", "--wait-for", bench.flag("done"))
    bench.setup(sloop_toml(agent, extra='stall_after = "2s"'), {"slow": ticket_text("Slow")})
    bench.start()
    bench.post("slow")
    bench.wait_stage_running("slow#1", "implement")
    shown = bench.dashboard()
    for _ in range(20):  # other revisions (the line stored, the stage's row) may come first
        if any(run["stall"] for run in shown["runs"]):
            break
        since = shown["epoch"]
        with holding(bench, {"verb": "show", "since": since, "wait_ms": WAIT_MS}) as held:
            shown = held.data()
        assert shown["epoch"] > since, shown
    assert [run["stall"]["stage"] for run in shown["runs"] if run["stall"]] == ["implement"]
    bench.release("done")
    bench.wait_run("slow#1")
