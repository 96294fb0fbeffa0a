"""Readable output: every shape the daemon sends renders, unknown fields included."""

from __future__ import annotations

import io
import re
from typing import Any

from sloopctl.layout import Cell, colour_enabled, relative, span, table
from sloopctl.render import render

NOW = 1_800_000_000_000
MIN = 60_000
ESC = re.compile(r"\x1b\[")


def ticket(n: int, name: str, state: str, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": f"T{n}",
        "name": name,
        "title": name.replace("-", " ").title(),
        "path": f"tickets/{name}.md",
        "project": "default",
        "flow": "default",
        "priority": 0,
        "state": state,
        "created_at_ms": NOW - 60 * MIN,
        "updated_at_ms": NOW - 2 * MIN,
        "waiting": None,
    }
    row.update(extra)
    return row


def run_row(n: int, alias: str, state: str, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": f"R{n}",
        "alias": alias,
        "ticket": "T1",
        "attempt": int(alias.rsplit("#", 1)[1]),
        "state": state,
        "terminal": state not in ("claimed", "running"),
        "started_at_ms": NOW - 5 * MIN,
        "finished_at_ms": None if state in ("claimed", "running") else NOW - MIN,
        "reason": None,
    }
    row.update(extra)
    return row


DASHBOARD: dict[str, Any] = {
    "kind": "dashboard",
    "daemon": {"version": "0.5.0", "pid": 4242, "started_at_ms": NOW - 3 * 3600_000},
    "gate": {"state": "cooldown", "until_ms": NOW + 20 * MIN, "reason": "rate limit"},
    "runs": [run_row(7, "fix-login#2", "running", stall={"silent_for_ms": 1_500_000})],
    "queued_triggers": [
        {"id": "TR3", "ticket": "T2", "due_at_ms": NOW + 5 * MIN, "created_at_ms": NOW},
        {"id": "TR4", "ticket": "T3", "due_at_ms": NOW - MIN, "created_at_ms": NOW},
    ],
    "tickets": [
        ticket(1, "fix-login", "running"),
        ticket(
            2,
            "add-search",
            "ready",
            waiting={"reason": "scheduled", "message": "trigger due later", "until_ms": NOW},
        ),
        ticket(3, "docs", "held", waiting={"reason": "held", "message": "held by operator"}),
    ],
    "recent": [run_row(6, "fix-login#1", "failed", reason="stage test failed (exit 2)")],
    "recent_total": 17,
    "recent_limit": 10,
    "next_wake": NOW + 20 * MIN,
    "some_future_field": {"nested": [1, 2]},
}


def test_dashboard_renders_every_section_without_colour() -> None:
    out = render("show", DASHBOARD, NOW, colour=False)
    assert not ESC.search(out)
    assert out.splitlines()[0].startswith("sloopd 0.5.0 · pid 4242 · up 3h · gate cooldown")
    assert "gate cooldown (ends in 20m) (rate limit)" in out
    assert "next wake in 20m" in out
    for expected in ("R7", "fix-login#2", "running (stalled)", "5m ago"):
        assert expected in out
    assert re.search(r"TR3\s+T2 add-search\s+in 5m", out)
    assert re.search(r"TR4\s+T3 docs\s+now", out)
    assert "held: held by operator" in out
    assert "Recent runs (1 of 17)" in out
    assert "stage test failed (exit 2)" in out


def test_table_columns_align_even_with_colour() -> None:
    rows: list[list[Cell]] = [["T1", ("running", "blue")], ["T10", ("ready", "cyan")]]
    plain = table(["ID", "STATE"], rows, lambda text, style: text)
    assert [line.index(s) for line, s in zip(plain[1:], ("running", "ready"), strict=True)] == [
        5,
        5,
    ]
    coloured = render("show", DASHBOARD, NOW, colour=True)
    assert ESC.search(coloured)
    assert ESC.sub("", re.sub(r"\x1b\[[0-9]+m", "", coloured)) == render(
        "show", DASHBOARD, NOW, colour=False
    )


def test_matches_list_tickets_and_count() -> None:
    data: dict[str, Any] = {
        "kind": "matches",
        "ref": "log",
        "tickets": [ticket(1, "fix-login", "ready")],
    }
    out = render("show", data, NOW, colour=False)
    assert "T1" in out
    assert "fix-login" in out
    assert out.splitlines()[-1] == "1 match for 'log'"
    data["total"] = 3
    assert render("show", data, NOW, colour=False).endswith("\n1 of 3 matches for 'log'")
    empty = render("show", {"kind": "matches", "ref": "zzz", "tickets": []}, NOW, False)
    assert empty == "0 matches for 'zzz'"


def test_ticket_and_run_details_render_nested_rows() -> None:
    stages = [
        {"stage": "implement", "state": "passed", "attempt": 1, "advisory": False},
        {"stage": "test", "state": "failed", "attempt": 1, "advisory": False},
        {"stage": "implement", "state": "passed", "attempt": 2},
        {"stage": "lint", "state": "failed", "attempt": 1, "advisory": True},
    ]
    value = ticket(1, "fix-login", "failed", runs=[run_row(3, "fix-login#1", "failed")])
    value["runs"][0]["stages"] = stages
    out = render("show", {"kind": "ticket", "value": value}, NOW, colour=False)
    assert out.splitlines()[0] == "ticket T1"
    assert re.search(r"^state\s+failed$", out, re.M)
    assert "implement✓ test✗ implement#2✓ lint✗" in out

    detail = run_row(3, "fix-login#1", "needs_review", halt="return_budget_exhausted")
    detail["stages"] = [
        {
            "stage": "review",
            "state": "failed",
            "attempt": 1,
            "duration_ms": 95_000,
            "reviewers": [
                {"reviewer": 0, "target": "claude", "verdict": "fail", "confidence": None},
                {"reviewer": 1, "target": "codex", "verdict": "pass", "confidence": "high"},
            ],
            "brand_new": "ignored or shown, never fatal",
        }
    ]
    out = render("show", {"kind": "run", "value": detail}, NOW, colour=False)
    assert "return_budget_exhausted" in out
    assert re.search(r"review\s+1\s+failed", out)
    assert "Reviewers of review#1" in out
    assert "codex" in out


def test_unknown_kinds_and_fields_are_tolerated() -> None:
    data = {
        "kind": "project",
        "value": {"name": "web", "tickets": [ticket(1, "a", "ready", extra={"x": 1})], "n": 3},
    }
    assert "web" in render("show", data, NOW, colour=False)
    odd = {"kind": "galaxy", "stars": [{"id": 1, "mass": 2.5}], "when_at_ms": NOW - 3000}
    out = render("show", odd, NOW, colour=False)
    assert "MASS" in out
    assert "3s ago" in out
    assert render("show", ["not", "a", "dict"], NOW, colour=False)
    assert render("brief", {"ticket": {"name": "x"}, "definition_of_done": ["a"]}, NOW, False)


def test_post_lines_tell_created_refreshed_and_suppressed() -> None:
    queued = {
        "ticket": ticket(3, "fix-login", "ready"),
        "created": True,
        "trigger": {"id": "TR7", "ticket": "T3", "due_at_ms": NOW, "created_at_ms": NOW},
        "trigger_suppressed": None,
    }
    assert (
        render("post", queued, NOW, False) == "T3 fix-login ready · created · trigger TR7 due now"
    )
    refused = {
        "ticket": ticket(3, "fix-login", "merged"),
        "created": False,
        "trigger": None,
        "trigger_suppressed": {"reason": "terminal_ticket", "state": "merged"},
    }
    assert render("post", refused, NOW, False) == (
        "T3 fix-login merged · refreshed · not queued: ticket is merged"
    )
    aborted = {"run": run_row(9, "fix-login#2", "aborted", reason="aborted by operator")}
    assert render("abort", aborted, NOW, False) == "R9 fix-login#2 aborted · aborted by operator"


def test_relative_times() -> None:
    assert relative(NOW - 3000, NOW) == "3s ago"
    assert relative(NOW + 10 * MIN, NOW) == "in 10m"
    assert relative(NOW - 2 * 3600_000, NOW) == "2h ago"
    assert relative(NOW, NOW) == "now"
    assert relative(None, NOW) == "-"
    assert span(93_784_000) == "1d2h"
    assert span(599_900) == "10m"  # --at 10m, read a moment later
    assert span(59_700) == "1m"
    assert span(3_599_000) == "1h"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_tty_without_no_color() -> None:
    assert colour_enabled(Tty(), {})
    assert not colour_enabled(Tty(), {"NO_COLOR": "1"})
    assert colour_enabled(Tty(), {"NO_COLOR": ""})  # no-color.org: empty means unset
    assert not colour_enabled(io.StringIO(), {})


def test_a_store_fault_is_named_on_the_dashboard() -> None:
    fault = {"reason": "full", "detail": "the disk is full", "since_ms": NOW - MIN, "failures": 3}
    board = {**DASHBOARD, "daemon": {**DASHBOARD["daemon"], "store_fault": fault}}
    out = render("show", board, NOW, colour=False)
    assert "STORE: cannot write (full) since" in out
    assert "the disk is full" in out
    assert "STORE:" not in render("show", DASHBOARD, NOW, colour=False)


# --- issue 33: Needs attention, resolved runs ------------------------------------


def resolution(what: str, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "resolution": what,
        "by": "alice",
        "reason": None,
        "at_ms": NOW - 2 * MIN,
        "auto": False,
    }
    found.update(extra)
    return found


def attention_board() -> dict[str, Any]:
    """Two runs wait for a person; 24 tickets were posted --hold (the issue's backlog)."""
    data = {**DASHBOARD, "runs": [], "queued_triggers": []}
    waiting = run_row(
        9,
        "add-search#1",
        "needs_review",
        ticket="T2",
        reason="stage 'test' failed on execution 3 (exited with code 1: FAILED: WANT=Z1a2b)",
    )
    broken = run_row(8, "docs#2", "failed", ticket="T4", reason="exited with code 2: no docs/")
    data["attention"] = [waiting, broken]
    data["attention_total"] = 2
    data["tickets"] = [ticket(n, f"backlog-{n}", "held") for n in range(10, 34)]
    # The recent window no longer holds either run: 10 later runs merged.
    data["recent"] = [run_row(n, f"other-{n}#1", "merged") for n in range(20, 30)]
    return data


def section_of(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


def test_the_dashboard_lists_what_needs_attention_with_what_to_do_next() -> None:
    """Issue 33: `sloopctl show` had no attention section: two needs_review runs that
    dropped out of "Recent runs (10 of 18)" showed nowhere."""
    out = render("show", attention_board(), NOW, colour=False)
    attention = section_of(out, "Needs attention")
    assert attention[0] == "Needs attention (2)"
    assert re.match(
        r"R9\s+add-search#1\s+needs_review\s+1m ago\s+stage 'test' failed", attention[2]
    )
    assert attention[3] == "  next: sloopctl resolve R9 --merged|--dismissed · sloopctl run T2"
    assert re.match(r"R8\s+docs#2\s+failed\s+1m ago\s+exited with code 2: no docs/", attention[4])
    assert attention[5] == "  next: sloopctl run T4"
    # Held tickets wait by intent: counted apart, never rows of Needs attention.
    assert attention[6] == "24 tickets held, waiting by intent (sloopctl ready TICKET releases one)"
    assert not any("backlog-" in line for line in attention)
    # Before the runs in flight, where a person looks first.
    assert out.index("Needs attention") < out.index("Runs in flight")


def test_attention_says_when_it_lists_fewer_than_its_total_and_when_it_is_empty() -> None:
    data = attention_board()
    data["attention_total"] = 57
    assert section_of(render("show", data, NOW, False), "Needs attention")[0] == (
        "Needs attention (57): the newest 2 shown"
    )
    data.update(attention=[], attention_total=0, tickets=[])
    assert section_of(render("show", data, NOW, False), "Needs attention") == [
        "Needs attention: nothing needs a person now"
    ]
    del data["attention"]  # a daemon older than 0.8.0
    assert "Needs attention" not in render("show", data, NOW, False)


def test_a_resolved_run_reads_as_resolved_and_leaves_attention() -> None:
    data = attention_board()
    data["attention"][0]["resolution"] = resolution("merged")
    data["recent"] = [
        run_row(9, "add-search#1", "needs_review", resolution=resolution("merged", auto=True)),
        run_row(5, "old#1", "needs_review", resolution=resolution("dismissed", reason="moot")),
    ]
    out = render("show", data, NOW, colour=False)
    assert section_of(out, "Needs attention")[0] == "Needs attention (1)"
    recent = section_of(out, "Recent runs")
    assert re.match(r"R9\s+add-search#1\s+merged by hand\s+1m ago", recent[2])
    assert re.match(r"R5\s+old#1\s+dismissed\s+1m ago", recent[3])

    detail = run_row(9, "add-search#1", "needs_review", resolution=resolution("dismissed"))
    detail["resolution"]["reason"] = "superseded by T7"
    detail["stages"] = [{"stage": "test", "state": "failed", "attempt": 3}]
    shown = render("show", {"kind": "run", "value": detail}, NOW, colour=False).splitlines()
    assert shown[:2] == ["run R9", "resolved: dismissed (by alice, 2m ago): superseded by T7"]
    assert any(re.match(r"state\s+needs_review$", line) for line in shown)
    assert not any("next: sloopctl resolve" in line for line in shown)

    by_daemon = run_row(9, "add-search#1", "needs_review", resolution=resolution("merged"))
    by_daemon["resolution"].update(auto=True, by=None)
    shown = render("show", {"kind": "run", "value": by_daemon}, NOW, colour=False).splitlines()
    assert shown[1] == "resolved: merged by hand (found on main, 2m ago)"

    ticket_view = ticket(2, "add-search", "merged", runs=[data["recent"][0]])
    out = render("show", {"kind": "ticket", "value": ticket_view}, NOW, colour=False)
    assert re.search(r"R9\s+add-search#1\s+merged by hand", out)


def brief_with_feedback() -> dict[str, Any]:
    return {
        "run": "R7",
        "ticket": {"id": "T1", "name": "answer", "title": "Answer", "body": "Say it."},
        "worktree": "/var/lib/sloop/checkouts/R7",
        "branch": "sloop/answer/1",
        "stage": {"name": "implement", "attempt": 3, "result_check": "exit_code"},
        "definition_of_done": ["the agent exits 0"],
        "feedback": [
            {
                "run": "R7",
                "stage": "test",
                "attempt": 2,
                "kind": "failed",
                "reason": "exited with code 1: FAILED: answer.txt WANT=Z1a2b GOT=guess",
                "output": {
                    "lines": ["running 1 test", "FAILED: answer.txt WANT=Z1a2b GOT=guess"],
                    "omitted_lines": 78,
                    "clipped": False,
                },
                "seats": [],
                "paths": [],
                "candidate": {"commit": "3f2a9c1d0b12aa", "onto": ["R5"]},
            },
            {
                "run": "R7",
                "stage": "review",
                "attempt": 1,
                "kind": "panel",
                "reason": "1 of 2 reviewers passed (quorum 2)",
                "output": None,
                "seats": [
                    {"reviewer": 0, "target": "claude", "verdict": "pass", "reason": "fine"},
                    {"reviewer": 1, "target": "codex", "verdict": "fail", "reason": "say WANT"},
                ],
                "paths": [],
                "candidate": None,
            },
            {
                "run": "R7",
                "stage": "sync",
                "attempt": 1,
                "kind": "conflict",
                "reason": "merging main conflicts in: a.txt",
                "output": {"lines": [], "omitted_lines": 0, "clipped": False},
                "seats": [],
                "paths": ["a.txt", "b.txt"],
                "candidate": None,
            },
        ],
    }


def test_brief_prints_its_feedback_as_labelled_data() -> None:
    """Issue 33: `brief` had no field about the failure; now its `feedback` reads as what
    happened, each execution's output fenced behind a rule under a label."""
    out = render("brief", brief_with_feedback(), NOW, colour=False)
    assert re.search(r"^stage\.name\s+implement$", out, re.M)
    assert "FEEDBACK" not in out  # not the generic table of unknown rows
    tail = out[out.index("What happened since your last execution (3)") :].splitlines()
    assert tail == [
        "What happened since your last execution (3)",
        "test#2 of R7 failed: exited with code 1: FAILED: answer.txt WANT=Z1a2b GOT=guess",
        "  it ran on the merge queue's candidate 3f2a9c1d0b12 (main + R5): part of its "
        "output may come from the work of R5",
        "  its output, the last 2 lines (78 earlier left out):",
        "  │ running 1 test",
        "  │ FAILED: answer.txt WANT=Z1a2b GOT=guess",
        "review#1 of R7, a panel, failed: 1 of 2 reviewers passed (quorum 2)",
        "  seat 0 (claude): pass: fine",
        "  seat 1 (codex): fail: say WANT",
        "sync#1 of R7 met a conflict: merging main conflicts in: a.txt",
        "  conflicting paths: a.txt, b.txt",
        "  it printed nothing",
    ]
    previous = {
        "run": "R6",
        "stage": "test",
        "attempt": 1,
        "kind": "previous_run",
        "reason": "exited with code 2: no docs/",
        "output": None,
    }
    again = render("brief", {**brief_with_feedback(), "feedback": [previous]}, NOW, False)
    assert again.splitlines()[-1] == (
        "the previous run, R6, ended at test#1: exited with code 2: no docs/"
    )
    # No feedback (a first execution, an older daemon): the brief as before.
    plain = {k: v for k, v in brief_with_feedback().items() if k != "feedback"}
    assert render("brief", {**plain, "feedback": []}, NOW, False) == render(
        "brief", plain, NOW, False
    )
    assert "What happened" not in render("brief", plain, NOW, False)


def test_settled_tickets_do_not_read_as_none_on_the_dashboard() -> None:
    """0.8.0's tour: a merged ticket, and the dashboard said ``Tickets: none``."""
    recent = [
        {"id": "R2", "alias": "example#2", "state": "merged", "finished_at_ms": NOW},
        {"id": "R1", "alias": "example#1", "state": "aborted", "finished_at_ms": NOW - MIN},
        {"id": "R0", "alias": "other#1", "state": "failed", "finished_at_ms": NOW - 2 * MIN},
    ]
    board = {**DASHBOARD, "tickets": [], "recent": recent, "recent_total": 3}
    out = render("show", board, NOW, colour=False)
    assert "Tickets: none open; settled lately: example merged, other failed" in out
    quiet = {**DASHBOARD, "tickets": [], "recent": [], "recent_total": 0}
    assert "Tickets: none\n" in render("show", quiet, NOW, colour=False) + "\n"
