"""What to type after a run went wrong, as ``gh run view`` prints ``--log-failed``.

A pure function of the run's view: the commands name the run by its id and the
failing execution by ``stage#attempt``, which ``sloopctl logs --stage`` takes, so
each one is a command that works as printed (tests/integration/test_terminal_details.py
runs them; ``resolve``'s ``--merged|--dismissed`` is the one choice left to the
reader).  Nothing is suggested for a run in flight or a merged one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sloopctl.layout import text


def _failed_execution(run: Mapping[str, Any]) -> str | None:
    """``stage#attempt`` of the execution that ended the run: its last failed row, a
    gating one before an advisory one (an advisory failure never ends a walk)."""
    failed = [
        row
        for row in run.get("stages") or []
        if isinstance(row, dict)
        and row.get("state") == "failed"
        and row.get("ended_by") != "rebuilt"  # a rebuild is no failure of the run's
        and isinstance(row.get("attempt"), int)
        and row["attempt"] > 0
    ]
    gating = [row for row in failed if not row.get("advisory")] or failed
    if not gating:
        return None
    last = gating[-1]
    return f"{text(last.get('stage'))}#{last['attempt']}"


def next_commands(run: Mapping[str, Any], *, details: bool) -> list[str]:
    """The commands worth running next for a settled, unmerged run; ``details`` adds
    ``sloopctl show RUN`` (the follow view, which shows less than ``show`` does)."""
    if run.get("terminal") is not True or run.get("state") == "merged":
        return []
    run_id = text(run.get("id"))
    failed = _failed_execution(run)
    commands = [f"sloopctl logs {run_id} --stage {failed}" if failed else f"sloopctl logs {run_id}"]
    if details:
        commands.append(f"sloopctl show {run_id}")
    follower = run.get("followed_by")
    if isinstance(follower, dict) and isinstance(follower.get("id"), str):
        commands.append(f"sloopctl show {follower['id']} --follow")
        return commands
    commands.append(f"sloopctl diff {run_id}")
    # The ways out (0.9) of a run that left its ticket waiting for a person, unless a
    # person already resolved it: resolve it (needs_review), or run the ticket again.
    resolved = isinstance(run.get("resolution"), dict)
    if run.get("state") == "needs_review" and not resolved:
        commands.append(f"sloopctl resolve {run_id} --merged|--dismissed")
    if run.get("state") in ("failed", "needs_review") and not resolved and run.get("ticket"):
        commands.append(f"sloopctl run {text(run.get('ticket'))}")
    return commands


def next_lines(run: Mapping[str, Any], *, details: bool) -> list[str]:
    """``next: <command>`` lines, one per command."""
    return [f"next: {command}" for command in next_commands(run, details=details)]
