"""What a failed agent stage's reason says once its output is classified.

A stage's reason is written from stored facts (``exited with code 1``); the
classification reads the CLI's own words.  Two things follow, as pure functions
of the result, the stage and the diagnosis (pinned by tests/unit/test_stop.py):

* **The CLI's words are quoted.**  When the classifier read an error event (Codex's
  ``turn.failed``, Claude Code's ``result`` with ``is_error``, Gemini CLI's error
  ``result``) or recognised an output line, the stage's reason quotes it: a person
  reading ``show`` sees ``Missing environment variable: `OPENAI_API_KEY`.`` without
  opening the log, also when the class is ``unknown``.  It takes the place of the
  child's last line the executor quoted (``StageResult.said``): the cause is quoted
  once, in the words that name it.
* **A stage without network cannot reach its vendor by its own configuration.**  A
  ``network`` failure of a stage that sets ``network = false`` is no transient
  outage: retrying runs the same futile child again.  Its reason names the setting,
  and the failure is final (no ``return_to`` re-runs it, no transient retry queues
  it again: ``is_transient``).
* **A session its CLI says failed did not pass.**  Gemini CLI ends a session whose
  model stream broke off with a ``result`` of status ``"error"`` and exits 0: the
  stage fails all the same (``failed_session``), and the classification reads the
  error event's words (a stream with no finish reason is ``overloaded``: queued again).
* **Sloop's own refusal is the reason.**  A preset that will not start its CLI in the
  checkout (``sloop: not starting Gemini CLI: the checkout holds .env, …``) is
  classified ``refused``, and its sentence is the stage's reason: nobody else spoke.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from sloopd.flows.flow import Stage
from sloopd.flows.results import StageResult
from sloopd.vendor.structured import session_error

# node_lost: the Ray node running the child died (sloopd.remote), nothing of the stage's;
# disk_full: its checkout or bring-back found no room (sloopd.runs.disk_full).
TRANSIENT_CLASSES: Final = frozenset({"overloaded", "network", "node_lost", "disk_full"})
REFUSED: Final = "refused"  # a preset's own check would not start its CLI (sloopd.flows.presets)
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


def failed_session(result: StageResult, stream: str, output: Iterable[str]) -> StageResult:
    """An agent stage that passed by its exit status, failed when its CLI's stream ends
    saying the session failed (``stream``: the stream the stage prints)."""
    if not result.passed or result.verdict_source != "exit_code":
        return result
    said = session_error(stream, output)
    if said is None:
        return result
    return result.failed(f"exited with code 0, but the CLI's stream ends in {said}")


def diagnosed(result: StageResult, stage: Stage, diagnosis: dict[str, Any]) -> StageResult:
    """A failed agent stage's result with its diagnosis, its reason saying what it read."""
    evidence = diagnosis.get("evidence")
    if evidence and diagnosis.get("classification") == REFUSED:
        # Sloop's own words (a preset's check), not the agent's: they are the reason.
        return result.but(reason=evidence, diagnosis=diagnosis)
    if evidence:
        # The CLI's own words, as the classifier read them, take the place of the
        # child's last line: one quote of the cause, the one that names it.
        result = result.unsaid()
    reason = result.reason
    if evidence:
        who = diagnosis.get("vendor") or "the agent"
        reason = _joined(reason, f"{who} said: {evidence}")
    if offline(stage, diagnosis):
        diagnosis = {**diagnosis, "detail": OFFLINE_DETAIL}
        return result.but(reason=_joined(reason, OFFLINE_DETAIL), diagnosis=diagnosis, final=True)
    return result.but(reason=reason, diagnosis=diagnosis)


def _joined(reason: str | None, more: str) -> str:
    return f"{reason}; {more}" if reason else more
