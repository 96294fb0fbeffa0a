"""What a failed agent stage's reason says once its output is classified.

A stage's reason is written from stored facts (``exited with code 1``); the
classification reads the CLI's own words.  Two things follow, as pure functions
of the result, the stage and the diagnosis (pinned by tests/unit/test_stop.py):

* **The CLI's words are quoted.**  When the classifier read an error event (Codex's
  ``turn.failed``, Claude Code's ``result`` with ``is_error``, Gemini CLI's error
  ``result``) or recognised an output line, the stage's reason quotes it: a person
  reading ``show`` sees ``Missing environment variable: `OPENAI_API_KEY`.`` without
  opening the log, also when the class is ``unknown``.
* **A stage without network cannot reach its vendor by its own configuration.**  A
  ``network`` failure of a stage that sets ``network = false`` is no transient
  outage: retrying runs the same futile child again.  Its reason names the setting,
  and the failure is final (no ``return_to`` re-runs it, no transient retry queues
  it again: ``is_transient``).
"""

from __future__ import annotations

from typing import Any, Final

from sloopd.flows.flow import Stage
from sloopd.flows.results import StageResult

# node_lost: the Ray node running the child died (sloopd.remote), nothing of the stage's;
# disk_full: its checkout or bring-back found no room (sloopd.runs.disk_full).
TRANSIENT_CLASSES: Final = frozenset({"overloaded", "network", "node_lost", "disk_full"})
OFFLINE_DETAIL: Final = (
    "the stage sets network = false, so its agent cannot reach its vendor's API "
    "(the sandbox has only a loopback of its own); not retried: remove network = false "
    "from the stage to let its agent reach its vendor"
)


def offline(stage: Stage, diagnosis: dict[str, Any] | None) -> bool:
    """Whether a network failure is the stage's own ``network = false``."""
    return (
        diagnosis is not None and diagnosis.get("classification") == "network" and not stage.network
    )


def is_transient(stage: Stage, diagnosis: dict[str, Any] | None) -> bool:
    """Whether the failure may pass by itself, so the ticket is queued again later."""
    if diagnosis is None or diagnosis.get("classification") not in TRANSIENT_CLASSES:
        return False
    return not stage.advisory and not offline(stage, diagnosis)


def diagnosed(result: StageResult, stage: Stage, diagnosis: dict[str, Any]) -> StageResult:
    """A failed agent stage's result with its diagnosis, its reason saying what it read."""
    reason = result.reason
    evidence = diagnosis.get("evidence")
    if evidence:
        who = diagnosis.get("vendor") or "the agent"
        reason = _joined(reason, f"{who} said: {evidence}")
    if offline(stage, diagnosis):
        diagnosis = {**diagnosis, "detail": OFFLINE_DETAIL}
        return result.but(reason=_joined(reason, OFFLINE_DETAIL), diagnosis=diagnosis, final=True)
    return result.but(reason=reason, diagnosis=diagnosis)


def _joined(reason: str | None, more: str) -> str:
    return f"{reason}; {more}" if reason else more
