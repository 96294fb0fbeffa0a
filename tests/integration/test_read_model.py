"""The read model's epoch and ``show {since, wait_ms}`` against a real daemon.

Every ``show`` reply carries the epoch; it grows with every kind of change a reply
can show; a held ``show`` answers as soon as the epoch passes ``since`` (a post, a
run's progress, the gate), or when its wait ends, and keeps the connection's
reply order; a refused write leaves the model equal to the store; a restart
derives it again.  The daemon runs with ``SLOOPD_READ_MODEL_AUDIT`` wherever the
model is compared with the store (sloopd/views/audit.py).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.daemon import Client, wait_until
from tests.support.tickets import (
    Operator,
    holding_write_lock,
    later,
    queue_repo,
    ticket_text,
)

AUDIT_FILE = "audit.jsonl"


@pytest.fixture
def op(sandbox: Path) -> Iterator[Operator]:
    operator = Operator(
        sandbox, queue_repo(sandbox), SLOOPD_READ_MODEL_AUDIT=str(sandbox / AUDIT_FILE)
    )
    try:
        yield operator
    finally:
        operator.stop()


def audits(op: Operator) -> list[dict[str, Any]]:
    path = op.root / AUDIT_FILE
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def assert_model_equals_store(op: Operator) -> None:
    op.dashboard()  # compared as it is served
    found = audits(op)
    assert any(a["at"] == "show" for a in found)
    assert [a for a in found if not a["equal"]] == []


def epoch(op: Operator) -> int:
    value: int = op.dashboard()["epoch"]
    return value


def post_later(op: Operator, name: str, **args: Any) -> dict[str, Any]:
    op.write(f"tickets/{name}.md", ticket_text(f"Ticket {name}"))
    return op.post(f"tickets/{name}.md", trigger=later(), **args)


def send(client: Client, request_id: str, verb: str, args: dict[str, Any]) -> None:
    line = {"v": 1, "id": request_id, "verb": verb, "args": args}
    client.send_raw(orjson.dumps(line) + b"\n")


def held_show(op: Operator, since: int, wait_ms: int, **args: Any) -> tuple[Client, float]:
    client = op.process.client()
    send(client, "held", "show", {"since": since, "wait_ms": wait_ms, **args})
    time.sleep(0.1)  # the daemon has the request, and holds it
    return client, time.monotonic()


def test_every_show_reply_carries_the_epoch(op: Operator) -> None:
    op.write("tickets/billing/a.md", ticket_text("A"))
    op.post("tickets/billing/a.md")
    op.settle()
    board = op.dashboard()
    now = board["epoch"]
    assert isinstance(now, int)
    assert now >= 0
    for ref, kind in (
        ("T1", "ticket"),
        ("R1", "run"),
        ("project:billing", "project"),
        ("^a", "matches"),
    ):
        data = op.ok("show", {"ref": ref})
        assert (data["kind"], data["epoch"]) == (kind, now), data
    # The deprecated status keeps its fields, and only those.
    assert "epoch" not in op.ok("status")


def test_the_epoch_grows_with_every_kind_of_change(op: Operator) -> None:
    seen = [epoch(op)]

    def grew(what: str) -> None:
        seen.append(epoch(op))
        assert seen[-1] > seen[-2], what

    post_later(op, "a")
    grew("a post")
    op.ok("hold", {"ref": "a"})
    grew("a hold")
    op.ok("ready", {"ref": "a"})
    grew("a ready")
    op.ok("pause", {})
    grew("a pause")
    op.ok("resume", {})
    grew("a resume")
    op.write("tickets/b.md", ticket_text("B"))
    op.post("tickets/b.md", manual=True)  # ready, and only 'run' queues it
    grew("a manual post")
    op.ok("run", {"ref": "b"})  # due now: claimed, run, settled failed
    op.settle()
    grew("a run")
    assert op.dashboard()["recent_total"] == 1
    op.ok("gc", {})
    op.process.signal(signal.SIGHUP)
    wait_until(lambda: epoch(op) > seen[-1], timeout=10)
    grew("a reload")
    with holding_write_lock(op.state_dir):
        assert op.error("pause", {})["code"] == "daemon_unavailable"
        grew("a refused write (the store fault shows)")
        assert op.dashboard()["daemon"]["store_fault"] is not None
    op.ok("pause", {})
    grew("the first write after (the fault clears)")
    assert op.dashboard()["daemon"]["store_fault"] is None
    assert_model_equals_store(op)


def test_a_held_show_answers_when_a_post_lands(op: Operator) -> None:
    since = epoch(op)
    client, asked = held_show(op, since, 20_000)
    post_later(op, "woken")
    reply = client.read()
    took = time.monotonic() - asked
    assert reply["id"] == "held", reply
    assert reply["ok"], reply
    assert reply["data"]["epoch"] > since
    assert "woken" in {t["name"] for t in reply["data"]["tickets"]}
    assert took < 5, "the post did not wake the held request"
    client.close()


def test_a_held_show_follows_a_run_to_its_end(op: Operator) -> None:
    """A follower that always asks past the epoch it saw sees the run claimed and
    settled, each step as it happens, without polling."""
    since = epoch(op)
    op.write("tickets/r.md", ticket_text("Run"))
    op.post("tickets/r.md")  # due now: the scheduler claims it at once
    client = op.process.client()
    states: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        send(client, "follow", "show", {"since": since, "wait_ms": 20_000})
        data = client.read()["data"]
        assert data["epoch"] > since
        since = data["epoch"]
        states += [run["state"] for run in data["runs"]]
        if data["recent_total"] == 1:
            break
    assert data["recent_total"] == 1, "the run never settled for the follower"
    assert data["recent"][0]["state"] == "failed"
    assert states, "the follower never saw the run in flight"
    client.close()
    assert_model_equals_store(op)


def test_a_held_show_answers_when_the_gate_changes(op: Operator) -> None:
    since = epoch(op)
    client, _ = held_show(op, since, 20_000)
    op.ok("pause", {"reason": "held"})
    reply = client.read()["data"]
    assert reply["gate"]["state"] == "paused"
    assert reply["epoch"] > since
    client.close()


def test_a_held_ticket_show_answers_when_its_ticket_changes(op: Operator) -> None:
    post_later(op, "t")
    since = epoch(op)
    client, _ = held_show(op, since, 20_000, ref="T1")
    op.ok("hold", {"ref": "T1"})
    reply = client.read()["data"]
    assert (reply["kind"], reply["value"]["state"]) == ("ticket", "held")
    assert reply["epoch"] > since
    client.close()


def test_a_held_show_answers_the_current_state_when_its_wait_ends(op: Operator) -> None:
    since = epoch(op)
    client, asked = held_show(op, since, 600)
    reply = client.read()
    took = time.monotonic() - asked
    assert reply["ok"]
    assert reply["data"]["epoch"] == since
    assert 0.35 <= took < 5, took
    client.close()


def test_a_show_behind_the_epoch_or_without_a_wait_answers_at_once(op: Operator) -> None:
    post_later(op, "x")
    now = epoch(op)
    # Nothing changes meanwhile, so a held request would answer only when its wait
    # ends, a minute on (the most wait_ms allows): past the test client's patience
    # (10 s).  Answered at all is answered at once, and no clock bound is there for a
    # busy host to fail.
    for args in (
        {"since": now - 1, "wait_ms": 60_000},  # behind: something newer exists
        {"wait_ms": 60_000},  # no since: nothing to wait for
        {"since": now},  # no wait_ms: the same as 0
        {"since": now, "wait_ms": 0},
        {"since": now + 10, "ref": "T1"},
    ):
        data = op.ok("show", args)
        assert data["epoch"] == now, args


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("since", -1),
        ("since", "3"),
        ("since", True),
        ("since", 2**53),
        ("wait_ms", -1),
        ("wait_ms", 60_001),
        ("wait_ms", 1.5),
        ("wait_ms", "10"),
    ],
)
def test_a_bad_since_or_wait_ms_is_refused_with_the_request_id(
    op: Operator, field: str, value: Any
) -> None:
    response = op.client.request(
        {"v": 1, "id": "bad-wait", "verb": "show", "args": {"since": 0, field: value}}
    )
    assert response["id"] == "bad-wait"
    assert response["ok"] is False
    assert response["error"]["code"] == "invalid_arguments"
    assert response["error"]["details"]["field"] == field


def test_a_held_show_holds_the_replies_pipelined_behind_it(op: Operator) -> None:
    since = epoch(op)
    client = op.process.client()
    send(client, "first", "show", {"since": since, "wait_ms": 700})
    send(client, "second", "show", {})
    started = time.monotonic()
    first, second = client.read(), client.read()
    assert (first["id"], second["id"]) == ("first", "second")
    assert time.monotonic() - started >= 0.5  # the second waited behind the first
    client.close()


def test_a_client_that_hangs_up_while_held_costs_nothing_after(op: Operator) -> None:
    since = epoch(op)
    for _ in range(20):
        client, _ = held_show(op, since, 60_000)
        client.close()
    # The daemon answers as before, and a new follower still wakes on the next change.
    follower, _ = held_show(op, since, 20_000)
    post_later(op, "after")
    assert follower.read()["data"]["epoch"] > since
    follower.close()


def test_a_stopping_daemon_answers_its_held_requests(op: Operator) -> None:
    since = epoch(op)
    assert op.process.socket is not None
    # Clients of their own: stopping the test daemon closes the ones it handed out.
    clients = [Client(op.process.socket) for _ in range(3)]
    for client in clients:
        send(client, "held", "show", {"since": since, "wait_ms": 60_000})
    time.sleep(0.2)
    stopping = threading.Thread(target=op.stop)
    started = time.monotonic()
    stopping.start()
    try:
        for client in clients:
            reply = client.read()
            assert reply["id"] == "held", reply
            assert reply["ok"], reply
            assert reply["data"]["kind"] == "dashboard"
            client.close()
        assert time.monotonic() - started < 10
    finally:
        stopping.join(30)


def test_a_restart_derives_the_same_model_again(op: Operator) -> None:
    post_later(op, "kept")
    post_later(op, "held", hold=True)
    op.write("tickets/ran.md", ticket_text("Ran"))
    op.post("tickets/ran.md")
    before = op.settle()
    op.restart()
    after = op.settle()
    assert after["epoch"] > before["epoch"]  # a new sequence, above the old one
    for key in ("gate", "runs", "queued_triggers", "tickets", "recent_total", "usage"):
        assert after[key] == before[key], key
    # The restart settled nothing new, so the recent runs are the same rows.
    assert [r["id"] for r in after["recent"]] == [r["id"] for r in before["recent"]]
    assert_model_equals_store(op)


def test_a_write_refused_for_a_busy_store_leaves_the_model_equal_to_the_store(
    op: Operator,
) -> None:
    post_later(op, "before")
    with holding_write_lock(op.state_dir):
        op.write("tickets/refused.md", ticket_text("Refused"))
        assert op.error("post", {"path": "tickets/refused.md"})["code"] == "daemon_unavailable"
        names = {t["name"] for t in op.dashboard()["tickets"]}
        assert names == {"before"}
    assert_model_equals_store(op)


@pytest.fixture
def full_disk_op(sandbox: Path) -> Iterator[Operator]:
    state = sandbox / "state"
    state.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "sloop-test", str(state)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): needs root")
    try:
        operator = Operator(
            sandbox, queue_repo(sandbox), SLOOPD_READ_MODEL_AUDIT=str(sandbox / AUDIT_FILE)
        )
        try:
            yield operator
        finally:
            operator.stop()
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as ballast:
        for size in (64 * 1024, 512):
            try:
                while True:
                    ballast.write(b"\0" * size)
            except OSError:
                pass


def test_a_transaction_rolled_back_on_a_full_disk_leaves_the_model_unchanged(
    full_disk_op: Operator,
) -> None:
    """The insert ran and named its new ticket, then COMMIT failed (SQLITE_FULL):
    the model never shows that ticket, and equals the store throughout."""
    op = full_disk_op
    post_later(op, "before")
    ballast = op.state_dir / "ballast"
    # Posts until one is refused: the first writes may still fit in the WAL.
    refused = None
    fill(ballast)
    for n in range(50):
        op.write(f"tickets/full-{n}.md", ticket_text(f"Full {n}"))
        response = op.client.call("post", {"path": f"tickets/full-{n}.md"})
        if not response["ok"]:
            refused = n
            assert response["error"]["code"] == "daemon_unavailable", response
            break
    assert refused is not None, "the full disk never refused a write"
    board = op.dashboard()
    assert f"full-{refused}" not in {t["name"] for t in board["tickets"]}
    assert board["daemon"]["store_fault"]["reason"] == "full"
    ballast.unlink()
    op.post(f"tickets/full-{refused}.md", trigger=later())
    assert f"full-{refused}" in {t["name"] for t in op.dashboard()["tickets"]}
    assert_model_equals_store(op)
