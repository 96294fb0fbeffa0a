"""The terminal's small items of issue 33, with sloopctl as a process on a pseudo-terminal.

``doctor`` and errors on standard error fold at words instead of letting the terminal
break a word at its last column; ``show --follow``'s outcome line folds at words;
``--follow`` prints the run's settling once when standard output and standard error are
the same terminal; in the follow view a panel seat's reason is folded, not cut, and the
seats are numbered as ``show`` numbers them.  A fake daemon (in this process) answers,
so only the client's output is under test.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopctl.render import render
from sloopctl.watch import frame
from tests.support.daemon import sloopctl_env
from tests.support.terminal import PtyRun, Screen, run_in_pty
from tests.unit.test_sloopctl_cli import FakeDaemon
from tests.unit.test_sloopctl_follow import Scripted

ROOT = Path(__file__).resolve().parents[2]
LONG_REASON = (
    "stage 'test' failed on execution 3 (exited with code 1: FAILED: answer.txt "
    "WANT=Z1a2b GOT=guess) and its return_to 'implement' budget of 2 is spent"
)
SEAT_REASON = (
    "answer.txt must say WANT=Z1a2b on its first line, as the ticket asks; it says "
    "guess, which no test accepts, and the second paragraph of the ticket is ignored"
)


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake(folder: Path) -> Iterator[Callable[[dict[str, list[Any]]], FakeDaemon]]:
    daemons: list[FakeDaemon] = []

    def start(script: dict[str, list[Any]]) -> FakeDaemon:
        daemon = FakeDaemon(folder / f"f{len(daemons)}.sock", Scripted(script))
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.close()


def on_pty(socket: Path, *args: str, columns: int = 100, term: str = "xterm") -> PtyRun:
    argv = [sys.executable, "-m", "sloopctl", "--socket", str(socket), *args]
    return run_in_pty(argv, sloopctl_env(TERM=term, COLUMNS=str(columns)), columns=columns)


def screen(run: PtyRun, columns: int = 100) -> Screen:
    shown = Screen(columns=columns)
    shown.feed(run.output)
    return shown


def words(lines: list[str]) -> list[str]:
    return " ".join(lines).split()


def seat(n: int, target: str, verdict: str, reason: str) -> dict[str, Any]:
    return {"reviewer": n, "target": target, "verdict": verdict, "confidence": "low",
            "reason": reason}  # fmt: skip


def settled_run(state: str, reason: str | None, panel: bool = False) -> dict[str, Any]:
    stages: list[dict[str, Any]] = [
        {"stage": "implement", "attempt": 1, "state": "passed", "duration_ms": 4000}
    ]
    if panel:
        stages.append(
            {
                "stage": "review",
                "attempt": 1,
                "state": "failed",
                "duration_ms": 3000,
                "reason": "1 of 2 reviewers passed (quorum 2)",
                "reviewers": [
                    seat(0, "careful", "pass", "reads well"),
                    seat(1, "strict", "fail", SEAT_REASON),
                ],
            }
        )
    value = {
        "id": "R3",
        "alias": "fix#1",
        "ticket": "T1",
        "state": state,
        "terminal": True,
        "reason": reason,
        "stages": stages,
    }
    return {"kind": "run", "value": value}


def test_follow_prints_the_settling_once_when_stdout_and_stderr_are_one_terminal(
    fake: Callable[[dict[str, list[Any]]], FakeDaemon],
) -> None:
    """Issue 33: `--follow` printed `R3 merged` twice (a transition on stderr, then the
    outcome on stdout) when both streams were the same terminal."""
    running = settled_run("merged", None)
    running["value"] = {**running["value"], "state": "running", "terminal": False}
    daemon = fake({"show": [running, settled_run("merged", None)]})
    run = on_pty(daemon.path, "show", "R3", "--follow", term="dumb")  # not drawn live
    assert run.code == 0, run.output
    shown = screen(run).text()
    assert [line for line in shown if line.startswith("R3 merged")] == ["R3 merged"], shown


def test_follows_outcome_line_folds_at_words_on_a_100_column_terminal(
    fake: Callable[[dict[str, list[Any]]], FakeDaemon],
) -> None:
    """Issue 33: the outcome line broke mid-word at 100 columns."""
    daemon = fake({"show": [settled_run("needs_review", LONG_REASON)]})
    run = on_pty(daemon.path, "show", "R3", "--follow")
    assert run.code == 11, run.output
    shown = screen(run)
    assert shown.wrapped == [], shown.text()  # no line reached the terminal's last column
    lines = shown.text()
    start = next(i for i, line in enumerate(lines) if line.startswith("R3 needs_review: "))
    end = next(i for i, line in enumerate(lines) if line.startswith("next: "))
    assert words(lines[start:end]) == f"R3 needs_review: {LONG_REASON}".split()
    assert all(len(line) < 100 for line in lines)


def test_a_seats_reason_is_folded_not_cut_and_seats_are_numbered_as_show_numbers_them(
    fake: Callable[[dict[str, list[Any]]], FakeDaemon],
) -> None:
    """Issue 33: in the follow view a seat's reason was cut at 100 columns."""
    data = settled_run("needs_review", "the panel did not reach its quorum", panel=True)
    daemon = fake({"show": [data]})
    run = on_pty(daemon.path, "show", "R3", "--follow")
    assert run.code == 11
    lines = screen(run).text()
    assert not any("…" in line for line in lines), lines
    start = next(i for i, line in enumerate(lines) if "seat 1 strict" in line)
    seat_line = lines[start]
    assert seat_line.startswith("      ✗ seat 1 strict  fail  low  answer.txt must say")
    column = seat_line.index("answer.txt")
    following = []
    for line in lines[start + 1 :]:
        if not line.startswith(" " * column) or not line.strip():
            break
        following.append(line)
    assert following, lines  # the rest of the reason, under its first words
    assert words([seat_line[column:], *following]) == SEAT_REASON.split()
    # The seat's number is the one `show`'s table of the panel gives it.
    table = render("show", data, 0, colour=False)
    assert any(row.split()[:2] == ["1", "strict"] for row in table.splitlines())
    assert any("seat 0 careful  pass" in line for line in lines)


def test_the_frame_folds_a_seats_reason_to_the_width_it_is_given() -> None:
    data = settled_run("needs_review", "x", panel=True)["value"]
    lines = frame(data, [], None, 0, width=60)
    plain = ["".join(text for text, _ in line) for line in lines]
    seats = plain[plain.index("      ✓ seat 0 careful  pass  low  reads well") :]
    assert all(len(line) <= 60 for line in seats), seats
    # Wider than half the line, the seat's words leave the reason's continuations
    # a small indent, not the room after them.
    assert seats[1].startswith("      ✗ seat 1 strict  fail  low  answer.txt")
    assert seats[2].startswith(" " * 10 + "WANT=Z1a2b")
    assert words(plain).count("ignored") == 1
    unfolded = ["".join(text for text, _ in line) for line in frame(data, [], None, 0)]
    assert any(line.endswith(SEAT_REASON) for line in unfolded)  # no width: one line


def test_an_error_on_stderr_folds_at_words(folder: Path) -> None:
    """Issue 33: errors on stderr broke mid-word."""
    run = on_pty(folder / "nobody-listens-here.sock", "show", columns=60)
    assert run.code == 3
    shown = screen(run, columns=60)
    assert shown.wrapped == [], shown.text()
    assert "sloopctl daemon" in " ".join(shown.text())
    assert all(len(line) < 60 for line in shown.text())


def test_doctor_folds_at_words(folder: Path) -> None:
    """Issue 33: doctor's lines broke mid-word."""
    subprocess.run(["git", "init", "-q", str(folder / "repo")], check=True)
    argv = [sys.executable, "-m", "sloopctl", "doctor", "--socket", str(folder / "none.sock")]
    env = sloopctl_env(TERM="xterm", COLUMNS="60")
    in_repo = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "-", str(folder / "repo")]
    run = run_in_pty([*in_repo, *argv], env, columns=60)
    shown = screen(run, columns=60)
    assert run.code == 1, shown.text()
    assert shown.wrapped == [], shown.text()
    assert any(line.startswith("FAIL  socket") for line in shown.text()), shown.text()
