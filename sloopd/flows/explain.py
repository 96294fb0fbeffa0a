"""Why a run ended where it did, derived from stored stage rows only.

A run's ``reason`` is never taken from what an agent said of its own work: it
names the last halting failure from the replayed stage log (an advisory
failure is never the cause: the walk provably continued past it).
"""

from __future__ import annotations

from typing import Any

from sloopd.flows.walk import Execution, Walk


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
        return "its worker reported fail"
    if source == "missing":
        return "no verdict was reported before the worker exited"
    if source == "panel":
        return "the panel did not reach its quorum"
    if execution.reason:
        return execution.reason
    if execution.exit_code is not None:
        return f"exited with code {execution.exit_code}"
    return "failed"


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
