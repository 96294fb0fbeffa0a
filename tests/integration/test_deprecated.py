"""What the protocol text keeps for older clients ("Stability"): the v1 verbs
``status``, ``list`` and ``wait``; ``queued_activations`` (deprecated in 0.4.0)
is no longer emitted since 0.5.0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tickets import (
    STATUS_KEYS,
    Operator,
    ids,
    later,
    queue_repo,
    ticket_text,
)


@pytest.fixture
def op(sandbox: Path) -> Iterator[Operator]:
    operator = Operator(sandbox, queue_repo(sandbox))
    try:
        yield operator
    finally:
        operator.stop()


def register(op: Operator, name: str, **args: Any) -> None:
    op.write(f"tickets/{name}.md", ticket_text(name))
    op.post(f"tickets/{name}.md", **(args or {"manual": True}))


@pytest.fixture
def queue(op: Operator) -> Operator:
    """T1 failed-login (failed after its run), T2 held-login, T3 soon, T4 later-one."""
    register(op, "failed-login", trigger={"at_ms": 0})
    op.settle()
    register(op, "held-login", hold=True)
    register(op, "soon", trigger=later(600_000))
    register(op, "later-one", trigger=later())
    return op


def without_clock(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields with the daemon's uptime left out (it moves between two calls)."""
    daemon = {k: v for k, v in fields["daemon"].items() if k != "uptime_ms"}
    return {**fields, "daemon": daemon}


# --- status ------------------------------------------------------------------------


def test_status_answers_the_dashboard_status_fields(queue: Operator) -> None:
    status = queue.ok("status")
    board = queue.dashboard()
    assert set(status) == STATUS_KEYS | {"next_wake"}
    for dashboard_only in ("kind", "recent", "recent_total", "recent_limit"):
        assert dashboard_only not in status
    assert without_clock(status) == without_clock({k: board[k] for k in status})
    assert ids(status["tickets"]) == ["T4", "T3", "T2"]  # non-terminal, newest first
    assert status["next_wake"] == status["queued_triggers"][0]["due_at_ms"]


def test_status_has_no_next_wake_without_a_future_trigger(op: Operator) -> None:
    register(op, "manual")
    status = op.ok("status")
    assert set(status) == STATUS_KEYS
    assert status["queued_triggers"] == []
    assert "queued_activations" not in status


def test_status_takes_no_arguments(op: Operator) -> None:
    for args in ({"ref": "x"}, {"limit": 1}):
        err = op.error("status", args)
        assert (err["code"], err["details"]["field"]) == ("invalid_arguments", next(iter(args)))


def test_queued_activations_is_gone_and_queued_triggers_carries_the_value(
    queue: Operator,
) -> None:
    queue.ok("run", {"ref": "held-login"})  # held: its due trigger stays queued
    for fields in (queue.dashboard(), queue.ok("status")):
        assert len(fields["queued_triggers"]) == 3
        assert "queued_activations" not in fields
        assert all(t["id"].startswith("TR") for t in fields["queued_triggers"])


# --- list ------------------------------------------------------------------------------


def test_list_answers_the_non_terminal_ticket_rows(queue: Operator) -> None:
    listed = queue.ok("list")
    assert set(listed) == {"tickets"}
    assert listed["tickets"] == queue.dashboard()["tickets"]
    assert ids(queue.ok("list", {"limit": 2})["tickets"]) == ["T4", "T3"]


def test_list_with_a_ref_is_the_pattern_rung_over_every_ticket(queue: Operator) -> None:
    # Terminal tickets are matched too, as by show's pattern rung.
    assert ids(queue.ok("list", {"ref": "login"})["tickets"]) == ["T2", "T1"]
    assert ids(queue.ok("list", {"ref": "LOGIN", "limit": 1})["tickets"]) == ["T2"]
    assert ids(queue.ok("list", {"ref": "^(soon|later)"})["tickets"]) == ["T4", "T3"]
    assert queue.ok("list", {"ref": "nothing"})["tickets"] == []
    assert (
        queue.ok("list", {"ref": "login"})["tickets"]
        == queue.ok("show", {"ref": "login"})["tickets"]
    )
    err = queue.error("list", {"ref": "(("})
    assert (err["code"], err["details"]["field"]) == ("invalid_arguments", "ref")


# --- wait ------------------------------------------------------------------------------


def test_wait_refuses_what_is_not_a_run(queue: Operator) -> None:
    for ref in ("R9", "T1", "failed-login", "failed-login#2", "nope"):
        err = queue.error("wait", {"run": ref, "timeout_ms": 0})
        assert (err["code"], err["details"]) == ("not_found", {"ref": ref}), ref
    for args in ({}, {"timeout_ms": 10}, {"ref": "R1"}):
        err = queue.error("wait", args)
        assert err["code"] == "invalid_arguments", args
    err = queue.error("wait", {"run": "R1", "timeout_ms": -1})
    assert err["details"]["field"] == "timeout_ms"


def test_wait_answers_a_settled_run_at_once(queue: Operator) -> None:
    for ref in ("R1", "failed-login#1"):
        data = queue.ok("wait", {"run": ref})
        assert data["kind"] == "run"
        value = data["value"]
        assert (value["id"], value["ticket"], value["state"], value["terminal"]) == (
            "R1",
            "T1",
            "failed",
            True,
        )
        assert value == queue.ok("show", {"ref": "R1"})["value"]
