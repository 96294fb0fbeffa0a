"""Why a run ended where it did, derived from stored stage rows only.

A run's ``reason`` names the last halting failure from the replayed stage log (an
advisory failure is never the cause: the walk provably continued past it): the rule
that failed, then its cause.  What it quotes of an agent is said as such and bounded
(``its worker reported fail: …``, a panel's failing seats with their reasons; a
child's last line arrives in its stage's reason), never taken as the daemon's word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sloopd.flows.flow import Stage
from sloopd.flows.results import StageResult
from sloopd.flows.walk import ENDED_BY_ABORTED, Execution, Walk
from sloopd.util import quoting

# A panel's reason names this many failing seats (the rest counted); a quoted reason,
# a seat's or a reported verdict's, is cut to this many characters on one line.
QUOTED_SEATS: Final = 3
QUOTED_REASON_CHARS: Final = 200


def run_diagnosis(state: Walk) -> dict[str, Any] | None:
    """The classified output of the failure that ended the run, if an agent's."""
    failure = _last_halting_failure(state)
    if failure is None or failure.diagnosis is None:
        return None
    return failure.diagnosis


def run_reason(state: Walk, outcome: str, halt: str | None, branch: str) -> str | None:
    if outcome == "merged":
        return None
    diagnosis = run_diagnosis(state)
    if diagnosis is not None and diagnosis.get("classification") not in (None, "unknown"):
        failure = _last_halting_failure(state)
        assert failure is not None
        # Both when both were stored: the CLI's words and the daemon's finding on them
        # (a network failure of a stage that sets network = false).
        detail = "; ".join(d for d in (diagnosis.get("evidence"), diagnosis.get("detail")) if d)
        return (
            f"stage '{failure.stage.name}' failed on execution {failure.attempt}: "
            f"{diagnosis['classification']}" + (f" ({detail})" if detail else "")
        )
    if halt == "corrupt_log":
        return f"the stage log does not replay against the run's flow: {state.corrupt}"
    failure = _last_halting_failure(state)
    if halt == "return_budget_exhausted" and failure is not None:
        stage = failure.stage
        return (
            f"stage '{stage.name}' failed on execution {failure.attempt} "
            f"({_cause(failure)}) and its return_to '{stage.return_to}' budget of "
            f"{stage.returns} is spent"
        )
    if halt == "fail_action" and failure is not None:
        return (
            f"stage '{failure.stage.name}' failed on execution {failure.attempt}: {_cause(failure)}"
        )
    if outcome == "needs_review":
        return f"the flow has no merge stage that advanced main; branch {branch} awaits review"
    if failure is not None:
        return (
            f"stage '{failure.stage.name}' failed on execution {failure.attempt}: {_cause(failure)}"
        )
    return f"the run ended {outcome}"


def _last_halting_failure(state: Walk) -> Execution | None:
    for execution in reversed(state.executions):
        if execution.passed is False and not execution.stage.advisory:
            return execution
    return None


def _cause(execution: Execution) -> str:
    """The stored fact behind a failure, in the check's own terms."""
    source = execution.verdict_source
    if source == "reported":
        said = _quoted(execution.reason)
        return "its worker reported fail" + (f": {said}" if said else "")
    if source == "missing":
        return "no verdict was reported before the worker exited"
    if source == "panel":
        # From the seats, not the stored reason: rows before 0.9.0 stored the rule alone.
        return panel_reason(execution.stage, execution.seats, passed=False)
    if execution.reason:
        return execution.reason
    if execution.exit_code is not None:
        return f"exited with code {execution.exit_code}"
    return "failed"


def panel_reason(stage: Stage, seats: Mapping[int, Mapping[str, Any]], *, passed: bool) -> str:
    """``1 of 2 reviewers passed (quorum 2)``, then, when the panel failed, its failing
    seats with their reasons: ``: seat 1 (codex): fail: answer.txt must say …``.

    Seats are numbered by their index, as ``show`` names them (``reviewers[].reviewer``).
    """
    passes = sum(1 for seat in seats.values() if seat.get("verdict") == "pass")
    rule = f"{passes} of {len(stage.reviewers)} reviewers passed (quorum {stage.quorum})"
    failing = [
        _seat_cause(index, seat)
        for index, seat in sorted(seats.items())
        if seat.get("verdict") != "pass"
    ]
    if passed or not failing:
        return rule
    rest = len(failing) - QUOTED_SEATS
    more = f" {quoting.ELLIPSIS} and {rest:,} more" if rest > 0 else ""
    return f"{rule}: " + "; ".join(failing[:QUOTED_SEATS]) + more


def _seat_cause(index: int, seat: Mapping[str, Any]) -> str:
    target = seat.get("target")
    named = f" ({quoting.clip_middle(quoting.one_line(target))})" if target else ""
    who = f"seat {index}{named}"
    said = _quoted(seat.get("reason"))
    # A seat that never reported is the fail its quorum counted, with no reason.
    return f"{who}: {seat.get('verdict') or 'fail'}: " + (said or "no verdict was reported")


def _quoted(reason: Any) -> str | None:
    """What an agent wrote, on one line without escapes, cut: None when blank."""
    if not isinstance(reason, str):
        return None
    said = quoting.without_escapes(reason[: QUOTED_REASON_CHARS * 4]).strip()
    return quoting.clip(said, QUOTED_REASON_CHARS) if said else None


def agent_exit_code(state: Walk) -> int | None:
    """The exit code of the last finished agent-stage execution (not a panel seat)."""
    for execution in reversed(state.executions):
        if (
            execution.stage.action == "agent"
            and execution.stage.result_check != "panel"
            and not execution.running
        ):
            return execution.exit_code
    return None


def ended_words(result: StageResult, *, aborted: bool = False) -> str:
    """How an execution's record says it ended: ``passed``, ``failed: <reason>``, or
    what cut it short (``aborted``, ``interrupted``, ``rebuilt``), which a reason
    already starting with that word is not made to repeat (``aborted by the
    operator: wrong ticket``, ``rebuilt: <cause>``)."""
    cut = ENDED_BY_ABORTED if aborted else result.ended_by
    word = cut or ("passed" if result.passed else "failed")
    reason = result.reason
    if not reason:
        return word
    if cut is not None and reason.startswith((f"{word} ", f"{word}:")):
        return reason
    return f"{word}: {reason}"
