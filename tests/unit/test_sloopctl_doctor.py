"""The pure parts of ``sloopctl doctor``: report lines, findings, and the parsers.

The checks themselves run against real daemons in tests/integration/test_doctor.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from sloopctl.diagnosis import (
    Check,
    Doctor,
    Findings,
    Probe,
    check_clock,
    metrics_summary,
    parse_exposition,
    parse_worktrees,
)
from sloopctl.layout import painter

EXPOSITION = """\
# HELP sloop_runs_in_flight Runs claimed or running.
# TYPE sloop_runs_in_flight gauge
sloop_runs_in_flight 2.0
sloop_triggers_queued 3.0
sloop_triggers_due 1.0
sloop_gate_state{state="open"} 0.0
sloop_gate_state{state="cooldown"} 1.0
sloop_gate_state{state="paused"} 0.0
sloop_runs_finished_total{state="merged"} 4.0
sloop_runs_finished_total{state="failed"} 1.0
sloop_requests_total{code="ok",verb="show"} 10.0
sloop_requests_total{code="not_found",verb="show"} 2.0
sloop_requests_total{code="not_found",verb="run"} 1.0
sloop_requests_total{code="internal",verb="post"} 1.0
sloop_odd{note="a \\"quoted\\", comma"} 1.5
"""


def test_report_lines() -> None:
    plain = painter(False)
    assert Check("socket", "ok", "fine").line(plain) == "ok    socket     fine"
    failed = Check("groups", "fail", "pid 7 still runs", "kill 7")
    assert failed.line(plain) == "FAIL  groups     pid 7 still runs; fix: kill 7"
    assert Check("clock", "warn", "off").as_json() == {
        "name": "clock",
        "status": "warn",
        "detail": "off",
        "fix": None,
    }


def test_findings_report_the_worst_first_with_distinct_fixes() -> None:
    assert Findings().result("x", "all good") == Check("x", "ok", "all good")
    found = Findings()
    found.add("warn", "a stale one", "sloopctl gc")
    found.add("fail", "a missing one", "sloopctl abort R1")
    found.add("warn", "another stale one", "sloopctl gc")
    assert found.result("worktrees", "3 run worktrees") == Check(
        "worktrees",
        "fail",
        "a missing one; a stale one; another stale one; 3 run worktrees",
        "sloopctl abort R1; sloopctl gc",
    )


def test_exposition_samples_and_labels() -> None:
    samples = parse_exposition(EXPOSITION)
    assert ("sloop_runs_in_flight", {}, 2.0) in samples
    assert ("sloop_odd", {"note": 'a "quoted", comma'}, 1.5) in samples
    assert not any(name.startswith("#") for name, _, _ in samples)


def test_metrics_summary_names_the_key_series() -> None:
    assert metrics_summary(parse_exposition(EXPOSITION)) == (
        "runs in flight 2, triggers queued 3 (due 1), gate cooldown, "
        "runs finished failed=1 merged=4, request errors 4 (internal=1, not_found=3)"
    )
    assert metrics_summary([]) == (
        "runs in flight n/a, triggers queued n/a (due n/a), gate n/a, "
        "runs finished none, request errors 0"
    )


def test_worktree_porcelain() -> None:
    porcelain = (
        "worktree /r\nHEAD 1111\nbranch refs/heads/main\n\n"
        "worktree /r/.git/sloop/worktrees/R1\nHEAD 2222\nbranch refs/heads/sloop/a/1\n\n"
        "worktree /r/.git/sloop/worktrees/R2\nHEAD 3333\ndetached\nprunable gitdir file "
        "points to non-existent location\n\n"
    )
    entries = parse_worktrees(porcelain)
    assert [(e.path, e.branch, e.prunable) for e in entries] == [
        (Path("/r"), "refs/heads/main", False),
        (Path("/r/.git/sloop/worktrees/R1"), "refs/heads/sloop/a/1", False),
        (Path("/r/.git/sloop/worktrees/R2"), None, True),
    ]


@dataclass
class FakeDoctor:
    """What check_clock reads of a Doctor."""

    daemon: dict[str, Any]
    probe: Probe
    up: bool = True


def clock(daemon_now_ms: int, here_ms: int) -> Check:
    fake = FakeDoctor(
        {"started_at_ms": daemon_now_ms - 60_000, "uptime_ms": 60_000},
        Probe(midpoint_ms=here_ms),
    )
    return check_clock(cast(Doctor, fake))


def test_clock_skew_warns_past_five_seconds() -> None:
    now = time.time_ns() // 1_000_000
    assert clock(now + 1_500, now).status == "ok"
    assert "daemon's clock 2s ahead of this host's" in clock(now + 1_500, now).detail
    behind = clock(now - 7 * 60_000, now)
    assert behind.status == "warn"
    assert behind.detail == "daemon's clock 7m behind this host's"
    assert behind.fix is not None
    assert "NTP" in behind.fix


def test_a_clock_before_2020_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 86_400 * 10**9)
    result = clock(86_400_000, 86_400_000)
    assert result.status == "warn"
    assert result.detail.startswith("this host's clock reads 1970-01-02T00:00:00Z, before 2020")


def test_many_problems_stay_on_one_readable_line() -> None:
    found = Findings()
    for n in range(8):
        found.add("warn", f"stale R{n}", f"git worktree remove --force /w/R{n}")
    result = found.result("worktrees", "8 run worktrees")
    assert result.detail == (
        "stale R0; stale R1; stale R2; stale R3; stale R4; and 3 more; 8 run worktrees"
    )
    assert result.fix == (
        "git worktree remove --force /w/R0; git worktree remove --force /w/R1; "
        "git worktree remove --force /w/R2; and 5 more"
    )
