"""``show`` through the real operator socket: the dashboard, the exact-reference
ladder and the pattern rung (protocol: "Build a dashboard or search tickets").

Ladder: exact ticket id → run id → run alias → ticket name or path →
``project:<name>`` → case-insensitive pattern over ticket ids and names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tickets import (
    DASHBOARD_KEYS,
    TICKET_ROW_KEYS,
    Operator,
    ids,
    later,
    queue_repo,
    ticket_text,
)

RUN_SUMMARY_KEYS = {
    "id",
    "alias",
    "attempt",
    "state",
    "terminal",
    "started_at_ms",
    "finished_at_ms",
    "reason",
    "stall",
    "stages",
}


@pytest.fixture
def op(sandbox: Path) -> Iterator[Operator]:
    operator = Operator(sandbox, queue_repo(sandbox))
    try:
        yield operator
    finally:
        operator.stop()


def register(op: Operator, name: str, folder: str = "tickets", **args: Any) -> dict[str, Any]:
    """Write and post ``<folder>/<name>.md``; ``manual`` unless told otherwise."""
    path = f"{folder}/{name}.md"
    op.write(path, ticket_text(f"Title of {name}"))
    if not args:
        args = {"manual": True}
    ticket: dict[str, Any] = op.post(path, **args)["ticket"]
    return ticket


def show(op: Operator, ref: str, **args: Any) -> dict[str, Any]:
    data: dict[str, Any] = op.ok("show", {"ref": ref, **args})
    return data


def matched(op: Operator, ref: str, **args: Any) -> list[str]:
    """Names the pattern rung returns for ``ref``, in the order given."""
    data = show(op, ref, **args)
    assert data["kind"] == "matches", data
    assert data["ref"] == ref
    assert data["total"] >= len(data["tickets"])
    return [row["name"] for row in data["tickets"]]


# --- the dashboard ------------------------------------------------------------------


def test_an_empty_dashboard_has_every_field(op: Operator) -> None:
    board = op.dashboard()
    assert set(board) >= DASHBOARD_KEYS
    assert board["kind"] == "dashboard"
    assert (board["runs"], board["queued_triggers"]) == ([], [])
    assert "queued_activations" not in board
    assert board["tickets"] == []
    assert (board["recent"], board["recent_total"], board["recent_limit"]) == ([], 0, 10)
    assert board.get("next_wake") is None
    assert board["gate"]["state"] == "open"
    assert board["daemon"]["version"] == "0.8.0"
    assert op.dashboard(limit=3)["recent_limit"] == 3


def test_limit_must_be_an_integer_of_at_least_one(op: Operator) -> None:
    register(op, "login")
    for limit in (0, -1, True, False, "2", 1.5, [1]):
        for verb, args in (
            ("show", {"limit": limit}),
            ("show", {"ref": "login", "limit": limit}),
            ("show", {"ref": "log", "limit": limit}),
            ("list", {"limit": limit}),
        ):
            err = op.error(verb, args)
            assert (err["code"], err["details"]["field"]) == ("invalid_arguments", "limit"), args
    assert op.ok("show", {"limit": 1})["recent_limit"] == 1


def test_the_dashboard_lists_live_tickets_newest_first_and_recent_runs(op: Operator) -> None:
    register(op, "first", trigger={"at_ms": 0})  # due: claimed, its run fails
    op.settle()
    register(op, "second", trigger={"at_ms": 0})
    op.settle()
    register(op, "manual")
    register(op, "held", hold=True)
    register(op, "scheduled", trigger=later())

    board = op.dashboard()
    # Non-terminal tickets only, newest first.
    assert ids(board["tickets"]) == ["T5", "T4", "T3"]
    assert all(set(row) >= TICKET_ROW_KEYS for row in board["tickets"])
    assert board["runs"] == []
    assert [run["id"] for run in board["recent"]] == ["R2", "R1"]
    assert all(run["terminal"] for run in board["recent"])
    assert (board["recent_total"], board["recent_limit"]) == (2, 10)
    assert board["next_wake"] == board["queued_triggers"][0]["due_at_ms"]

    limited = op.dashboard(limit=1)
    assert [run["id"] for run in limited["recent"]] == ["R2"]
    assert (limited["recent_total"], limited["recent_limit"]) == (2, 1)
    assert limited["tickets"] == board["tickets"]  # limit narrows recent runs only


# --- exact references ----------------------------------------------------------------


def test_a_ticket_detail_is_its_row_plus_body_manual_trigger_and_runs(op: Operator) -> None:
    op.write("tickets/login.md", ticket_text("Log in", "Body of the ticket."))
    posted = op.post("tickets/login.md", trigger=later())
    data = show(op, "T1")
    assert data["kind"] == "ticket"
    value = data["value"]
    assert set(value) >= TICKET_ROW_KEYS | {"body", "manual", "trigger", "runs"}
    assert {k: value[k] for k in TICKET_ROW_KEYS} == posted["ticket"]
    assert value["body"] == "Body of the ticket."
    assert (value["manual"], value["trigger"], value["runs"]) == (False, posted["trigger"], [])


def test_name_relative_path_and_absolute_path_reach_the_same_ticket(op: Operator) -> None:
    register(op, "other")
    register(op, "fix.login", folder="tickets/auth")
    for ref in (
        "T2",
        "fix.login",
        "tickets/auth/fix.login.md",
        str(op.repo / "tickets/auth/fix.login.md"),
    ):
        data = show(op, ref)
        assert (data["kind"], data["value"]["id"]) == ("ticket", "T2"), ref


def legacy_names(op: Operator, names: dict[str, str]) -> None:
    """Rename tickets (at rest) to names ``post`` refuses since 0.6.0 because they are
    shaped like ids: a store registered by an older release may hold them, and the
    ladder still resolves them in its fixed order."""
    op.restart(
        extra=[
            ("UPDATE tickets SET name = ? WHERE id = ?", (name, ticket_id))
            for ticket_id, name in names.items()
        ]
    )


def test_a_ticket_id_wins_over_a_ticket_named_like_it(op: Operator) -> None:
    register(op, "old-t2")  # id T1, renamed "T2" below
    register(op, "plain")  # id T2
    legacy_names(op, {"T1": "T2"})
    assert show(op, "T2")["value"]["name"] == "plain"
    assert show(op, "tickets/old-t2.md")["value"]["id"] == "T1"
    assert show(op, "T1")["value"]["name"] == "T2"


def test_names_shaped_like_missing_ids_resolve_by_name(op: Operator) -> None:
    register(op, "old-t99")
    register(op, "old-r1")
    legacy_names(op, {"T1": "T99", "T2": "R1"})
    assert show(op, "T99")["value"]["id"] == "T1"  # no ticket T99
    assert show(op, "R1")["value"]["id"] == "T2"  # no run R1 yet


def test_run_id_and_alias_come_before_ticket_names(op: Operator) -> None:
    register(op, "old-r1")  # T1, renamed like the run about to exist
    legacy_names(op, {"T1": "R1"})
    register(op, "work", trigger={"at_ms": 0})  # T2: claimed as run R1, which fails
    op.settle()

    run = show(op, "R1")
    assert run["kind"] == "run"
    assert (run["value"]["id"], run["value"]["ticket"], run["value"]["alias"]) == (
        "R1",
        "T2",
        "work#1",
    )
    alias = show(op, "work#1")
    assert (alias["kind"], alias["value"]["id"]) == ("run", "R1")
    # The ticket named R1 is still reachable by id and path.
    assert show(op, "tickets/old-r1.md")["value"]["id"] == "T1"
    # An alias of an attempt that does not exist falls through to the pattern rung.
    assert matched(op, "work#2") == []

    detail = show(op, "work")["value"]
    assert [entry["id"] for entry in detail["runs"]] == ["R1"]
    entry = detail["runs"][0]
    assert set(entry) >= RUN_SUMMARY_KEYS
    assert (entry["alias"], entry["attempt"], entry["state"], entry["terminal"]) == (
        "work#1",
        1,
        "failed",
        True,
    )
    assert all(
        set(stage) >= {"stage", "state", "attempt", "advisory", "silent_for_ms"}
        for stage in entry["stages"]
    )


def test_a_ticket_run_history_is_newest_attempt_first(op: Operator) -> None:
    register(op, "again", trigger={"at_ms": 0})
    op.settle()
    op.ok("run", {"ref": "again"})
    op.settle()
    runs = show(op, "again")["value"]["runs"]
    assert [(r["id"], r["attempt"]) for r in runs] == [("R2", 2), ("R1", 1)]


def test_project_rung(op: Operator) -> None:
    register(op, "invoice", folder="tickets/billing")
    register(op, "refund", folder="tickets/billing", hold=True)
    register(op, "unrelated")
    data = show(op, "project:billing")
    assert data["kind"] == "project"
    value = data["value"]
    assert value["name"] == "billing"
    assert ids(value["tickets"]) == ["T2", "T1"]
    assert value["counts"] == {
        "ready": 1,
        "held": 1,
        "running": 0,
        "merged": 0,
        "failed": 0,
        "needs_review": 0,
    }
    for ref in ("project:accounting", "project:", "project:BILLING"):
        assert matched(op, ref) == [], ref


# --- the pattern rung ------------------------------------------------------------------


@pytest.fixture
def names(op: Operator) -> Operator:
    """T1 add-login, T2 fix.login, T3 fixXlogin, T4 other-thing (fix.login in billing)."""
    register(op, "add-login")
    register(op, "fix.login", folder="tickets/billing")
    register(op, "fixXlogin")
    register(op, "other-thing")
    return op


def test_an_exact_name_wins_over_the_same_text_as_a_pattern(names: Operator) -> None:
    data = show(names, "fix.login")
    assert (data["kind"], data["value"]["id"]) == ("ticket", "T2")
    # One character short it is a regular expression: '.' matches any character.
    assert matched(names, "fix.log") == ["fixXlogin", "fix.login"]


def test_plain_text_is_a_case_insensitive_substring_of_id_or_name(names: Operator) -> None:
    assert matched(names, "LOGIN") == ["fixXlogin", "fix.login", "add-login"]
    assert matched(names, "Other") == ["other-thing"]
    assert matched(names, "xlog") == ["fixXlogin"]
    # Ids match too: 't3' is no exact id (ids are upper case) but is a substring of T3.
    assert matched(names, "t3") == ["fixXlogin"]
    assert matched(names, "nothing-like-it") == []


def test_metacharacters_make_an_unanchored_case_insensitive_regex(names: Operator) -> None:
    assert matched(names, "^add") == ["add-login"]
    assert matched(names, "login$") == ["fixXlogin", "fix.login", "add-login"]
    assert matched(names, "a.d") == ["add-login"]
    assert matched(names, "^T[24]$") == ["other-thing", "fix.login"]
    assert matched(names, "^t[24]$") == ["other-thing", "fix.login"]
    assert matched(names, "X.*G") == ["fixXlogin", "fix.login"]
    assert matched(names, "fix\\.login") == ["fix.login"]
    assert matched(names, "^zz+$") == []


def test_matches_carry_rows_total_and_respect_limit(names: Operator) -> None:
    data = show(names, "login", limit=2)
    assert set(data) >= {"kind", "ref", "tickets", "total"}
    assert (data["kind"], data["ref"], data["total"]) == ("matches", "login", 3)
    assert [row["name"] for row in data["tickets"]] == ["fixXlogin", "fix.login"]
    assert all(set(row) >= TICKET_ROW_KEYS for row in data["tickets"])
    assert show(names, "login", limit=10)["total"] == 3
    assert len(show(names, "login", limit=10)["tickets"]) == 3


def test_an_invalid_regex_is_invalid_arguments(names: Operator) -> None:
    for ref in ("((", "[", "a(b", "*login", "fix)"):
        err = names.error("show", {"ref": ref})
        assert err["code"] == "invalid_arguments", ref
        assert err["details"] == {"field": "ref", "ref": ref}
        assert "regular expression" in err["message"]


def test_the_pattern_rung_covers_terminal_tickets(op: Operator) -> None:
    register(op, "gone-login", trigger={"at_ms": 0})  # claimed; its run fails
    op.settle()
    register(op, "live-login")
    assert [row["name"] for row in op.dashboard()["tickets"]] == ["live-login"]
    data = show(op, "login")
    assert [(row["name"], row["state"]) for row in data["tickets"]] == [
        ("live-login", "ready"),
        ("gone-login", "failed"),
    ]


def test_an_empty_or_missing_ref_is_the_dashboard_or_refused(op: Operator) -> None:
    assert op.ok("show", {"ref": None})["kind"] == "dashboard"
    for ref in ("", "   "):
        err = op.error("show", {"ref": ref})
        assert (err["code"], err["details"]["field"]) == ("invalid_arguments", "ref")
    assert op.error("show", {"ref": 7})["details"]["field"] == "ref"
    assert op.error("show", {"refs": "x"})["details"]["field"] == "refs"


def test_a_limit_beyond_64_bits_is_invalid(op: Operator) -> None:
    err = op.error("show", {"limit": 2**63})
    assert err["code"] == "invalid_arguments"
