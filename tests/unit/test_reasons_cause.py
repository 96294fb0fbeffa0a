"""The outcome names the cause (issue 33): pure pieces, pinned case by case.

What a failing child said last (``LastWords``), the quote a diagnosis takes the place
of (``StageResult.saying``/``unsaid``, ``diagnosed``), a run's reason over a reported
verdict, a panel, a conflict, and what an execution's record says of its end.
The same through a real daemon: tests/integration/test_reasons_cause.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sloopd.flows.diagnosed import diagnosed
from sloopd.flows.explain import QUOTED_REASON_CHARS, ended_words, panel_reason, run_reason
from sloopd.flows.flow import Reviewer, Stage
from sloopd.flows.results import StageResult
from sloopd.flows.walk import ENDED_BY_INTERRUPTED, Execution, Walk
from sloopd.proc.lines import MAX_LINE_BYTES, SAID_CHARS, LastWords

FAILED_LINE = "FAILED: answer.txt WANT=Z1a2b GOT=guess"


# --------------------------------------------------------------------------- LastWords


def test_stderr_is_quoted_first_and_blank_lines_do_not_count() -> None:
    words = LastWords()
    words.heard("stdout", ["noise"])
    words.heard("stderr", [FAILED_LINE, "", "  \t"])
    words.heard("stdout", ["later noise", ""])
    assert words.said() == FAILED_LINE
    assert words.said(("stdout",)) == "later noise"
    words.clear()
    assert words.said() is None


def test_stdout_is_quoted_when_stderr_said_nothing() -> None:
    words = LastWords()
    words.heard("stderr", ["\x1b[0m", "   "])  # only an escape: nothing said
    words.heard("stdout", ["first", "last"])
    assert words.said() == "last"


def test_escapes_and_controls_are_stripped_and_the_quote_is_one_line() -> None:
    words = LastWords()
    words.heard("stderr", ["\x1b[1;31mFAILED\x1b[0m:\x1b]8;;http://x\x07 two\rthree\x00"])
    said = words.said()
    assert said is not None
    assert not {"\x1b", "\r", "\x00"} & set(said)
    assert said == "FAILED: two three\ufffd"


def test_a_ten_megabyte_line_is_quoted_in_a_line() -> None:
    words = LastWords()
    words.heard("stderr", ["y" * (10 * 1024 * 1024)])
    said = words.said()
    assert said is not None
    assert len(said) == SAID_CHARS
    assert said.endswith("\u2026")


def test_a_split_line_is_quoted_from_its_head() -> None:
    words = LastWords()
    full = "z" * MAX_LINE_BYTES
    # One long line in three pieces, then a second long line in two.
    words.heard("stderr", ["BOOM " + full[5:]], split=True)
    words.heard("stderr", [full], split=True)
    words.heard("stderr", ["tail of the first"], split=True)
    assert (words.said() or "").startswith("BOOM zzz")
    words.heard("stderr", ["SECOND " + full[7:]], split=True)
    words.heard("stderr", ["end"], split=True)
    assert (words.said() or "").startswith("SECOND zzz")
    # A whole line after it is the last line.
    words.heard("stderr", ["done"])
    assert words.said() == "done"


# --------------------------------------------------------------------------- the quote


FAILED = StageResult.checked("exit_code", False, "exited with code 1", 1)
ONLINE = Stage("implement", "agent")


def diagnosis(evidence: str | None) -> dict[str, Any]:
    return {"classification": "unknown", "evidence": evidence, "vendor": "codex"}


def test_the_quote_follows_the_rule_and_a_diagnosis_takes_its_place() -> None:
    said = FAILED.saying(FAILED_LINE)
    assert said.reason == f"exited with code 1: {FAILED_LINE}"
    assert "said" not in said.to_row()  # the reason carries it; nothing more is stored
    # The CLI's own words, read by the classifier, are quoted instead: once.
    quoted = diagnosed(said, ONLINE, diagnosis("Missing OPENAI_API_KEY"))
    assert quoted.reason == "exited with code 1; codex said: Missing OPENAI_API_KEY"
    # The same line read by both is quoted once.
    same = diagnosed(said, ONLINE, diagnosis(FAILED_LINE))
    assert same.reason == f"exited with code 1; codex said: {FAILED_LINE}"
    # No evidence: the child's last line stays.
    assert diagnosed(said, ONLINE, diagnosis(None)).reason == said.reason
    # Something appended after the quote stays when the quote goes.
    refused = said.but(reason=f"{said.reason}; the agent's CLI refused tools: Bash")
    assert refused.unsaid().reason == "exited with code 1; the agent's CLI refused tools: Bash"
    # An abort's reason over it is not a quote of the child.
    assert FAILED.saying(FAILED_LINE).failed("aborted by the operator").said is None
    assert FAILED.saying(None) == FAILED


# --------------------------------------------------------------------------- run reasons

PANEL = Stage(
    "review",
    "agent",
    result_check="panel",
    quorum=2,
    reviewers=(Reviewer("claude", ("a",)), Reviewer("codex", ("b",))),
)


def seat(index: int, target: str, verdict: str | None, reason: str | None) -> dict[str, Any]:
    return {"reviewer": index, "target": target, "verdict": verdict, "reason": reason}


def test_a_failed_panel_names_its_failing_seats_as_show_numbers_them() -> None:
    seats = {
        0: seat(0, "claude", "pass", "fine"),
        1: seat(1, "codex", "fail", "answer.txt must say WANT=Z1a2b"),
    }
    assert panel_reason(PANEL, seats, passed=False) == (
        "1 of 2 reviewers passed (quorum 2): seat 1 (codex): fail: answer.txt must say WANT=Z1a2b"
    )
    # A passing panel states its rule only.
    assert panel_reason(PANEL, seats, passed=True) == "1 of 2 reviewers passed (quorum 2)"


def test_a_panels_reason_is_bounded_whatever_its_seats_wrote() -> None:
    many = replace(PANEL, reviewers=tuple(Reviewer(f"t{n}", ("c",)) for n in range(6)))
    seats = {n: seat(n, f"t{n}", "fail", "\x1b[31mno\x1b[0m\n" + "z" * 5000) for n in range(6)}
    seats[5]["reason"] = None  # a seat that never reported
    reason = panel_reason(many, seats, passed=False)
    assert reason.startswith("0 of 6 reviewers passed (quorum 2): seat 0 (t0): fail: no z")
    assert not {"\x1b", "\n"} & set(reason)
    assert reason.endswith("\u2026 and 3 more")
    assert len(reason) < 4 * QUOTED_REASON_CHARS


def walked(stage: Stage, **facts: Any) -> Walk:
    execution = Execution(stage=stage, attempt=1, started_at_ms=0, passed=False, **facts)
    return Walk(flow=None, executions=[execution])  # type: ignore[arg-type]


def test_the_run_reason_quotes_a_panels_failing_seat() -> None:
    state = walked(
        PANEL,
        verdict_source="panel",
        reason="1 of 2 reviewers passed (quorum 2)",  # as rows before 0.9.0 stored it
        seats={
            0: seat(0, "claude", "pass", "fine"),
            1: seat(1, "codex", "fail", "answer.txt must say WANT=Z1a2b"),
        },
    )
    assert run_reason(state, "failed", "fail_action", "sloop/x") == (
        "stage 'review' failed on execution 1: 1 of 2 reviewers passed (quorum 2): "
        "seat 1 (codex): fail: answer.txt must say WANT=Z1a2b"
    )


def test_the_run_reason_quotes_a_reported_fail() -> None:
    review = Stage("review", "agent", result_check="reported")
    state = walked(review, verdict_source="reported", reason="answer.txt must say WANT=Z1a2b")
    assert run_reason(state, "failed", "fail_action", "sloop/x") == (
        "stage 'review' failed on execution 1: "
        "its worker reported fail: answer.txt must say WANT=Z1a2b"
    )
    bare = walked(review, verdict_source="reported", reason=None)
    assert run_reason(bare, "failed", "fail_action", "sloop/x") == (
        "stage 'review' failed on execution 1: its worker reported fail"
    )


def test_the_run_reason_keeps_a_childs_quoted_line_and_a_conflicts_paths() -> None:
    test = Stage("test", "command", return_to="implement", returns=2)
    state = walked(
        test, verdict_source="exit_code", exit_code=1, reason=f"exited with code 1: {FAILED_LINE}"
    )
    assert run_reason(state, "failed", "return_budget_exhausted", "sloop/x") == (
        f"stage 'test' failed on execution 1 (exited with code 1: {FAILED_LINE}) "
        "and its return_to 'implement' budget of 2 is spent"
    )
    sync = Stage("sync", "sync")
    conflict = "merge conflicts in: a.txt, b.txt, c.txt \u2026 and 4 more"
    state = walked(sync, verdict_source="git", reason=conflict, paths=["a.txt", "b.txt"])
    assert run_reason(state, "failed", "fail_action", "sloop/x") == (
        f"stage 'sync' failed on execution 1: {conflict}"
    )


# --------------------------------------------------------------------------- the record

ABORT = "aborted by the operator: wrong ticket"
RESTART = "interrupted: the daemon restarted"
BEFORE = "interrupted before it finished"
ENDS = [
    (StageResult(passed=True), False, "passed"),
    (FAILED.saying(FAILED_LINE), False, f"failed: exited with code 1: {FAILED_LINE}"),
    (FAILED.failed(ABORT), True, ABORT),
    (FAILED.failed("the daemon is stopping"), True, "aborted: the daemon is stopping"),
    (StageResult.interrupted(RESTART), False, RESTART),
    (StageResult.interrupted(BEFORE), False, BEFORE),
    (StageResult.rebuilt("main moved", None), False, "rebuilt: main moved"),
    (StageResult(passed=False, ended_by=ENDED_BY_INTERRUPTED), False, "interrupted"),
]


@pytest.mark.parametrize(("result", "aborted", "words"), ENDS)
def test_an_executions_record_says_what_ended_it(
    result: StageResult, aborted: bool, words: str
) -> None:
    assert ended_words(result, aborted=aborted) == words
