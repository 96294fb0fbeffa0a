"""A panel stage's keys: its reviewer seats (``reviewers``) and its ``quorum``.

Split from ``sloopd.flows.flow`` by concern: a seat is a command or a preset, with its
own stream and placement, validated as strictly as a stage.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sloopd.flows import placement
from sloopd.flows.agent_settings import FlowError, argv, preset_named, stream
from sloopd.flows.placement import Placement


@dataclass(frozen=True, slots=True)
class Reviewer:
    target: str
    command: tuple[str, ...]
    stream: str | None = None  # None: the stage's (else the agent's) stream
    # Variables the seat's preset passes through by name, beside agent.env.
    env: tuple[str, ...] = ()
    # The seat's preset's login files (``~/...``), read-only in its HOME when present.
    logins: tuple[str, ...] = ()
    # Its own backend and resources (sloopd.flows.placement); None: the stage's.
    placement: Placement | None = None


def _reviewer(key: str, entry: dict[str, Any], target: str, seat_stream: str | None) -> Reviewer:
    """A seat runs its ``command``, or its preset's (``agent = "gemini"``)."""
    if "agent" in entry:
        if "command" in entry:
            raise FlowError(f"set '{key}.agent' or '{key}.command', not both")
        chosen = preset_named(entry["agent"], f"{key}.agent")
        return Reviewer(
            target, chosen.command, seat_stream or chosen.stream, chosen.env, chosen.logins
        )
    return Reviewer(target, argv(entry.get("command"), f"{key}.command"), seat_stream)


def panel(where: str, raw: dict[str, Any], check: str) -> tuple[tuple[Reviewer, ...], int]:
    if check != "panel":
        for key in ("reviewers", "quorum"):
            if key in raw:
                raise FlowError(f"'{where}.{key}' is only for result_check = \"panel\"")
        return (), 0
    listed = raw.get("reviewers")
    if not isinstance(listed, list) or not listed:
        raise FlowError(f"'{where}.reviewers': a panel needs at least one reviewer")
    reviewers = []
    for index, entry in enumerate(listed):
        key = f"{where}.reviewers[{index}]"
        seat_keys = {"target", "command", "agent", "stream", "backend", "resources"}
        if not isinstance(entry, dict) or set(entry) - seat_keys:
            raise FlowError(
                f"'{key}' must be a table with 'target' and 'command' or 'agent' (and 'stream')"
            )
        target = entry.get("target")
        if not isinstance(target, str) or not target:
            raise FlowError(f"'{key}.target' must be a non-empty string")
        seat_stream = stream(entry["stream"], f"{key}.stream") if "stream" in entry else None
        placed = placement.of(entry, key)
        reviewers.append(replace(_reviewer(key, entry, target, seat_stream), placement=placed))
    quorum = raw.get("quorum", len(reviewers))
    if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= len(reviewers):
        raise FlowError(f"'{where}.quorum' must be between 1 and {len(reviewers)}")
    return tuple(reviewers), quorum
