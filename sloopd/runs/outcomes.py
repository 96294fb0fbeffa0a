"""What a stage's end makes of its facts: small pure shapings of ``StageResult``.

Split from ``sloopd.runs.execute`` by concern: a lost node, what a reviewer left,
an agent's uncommitted work, a panel seat's end, an exit code's words, git's
outcome as a stage result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sloopd.flows.results import (
    NODE_LOST,
    NODE_LOST_REASON,
    UNCOMMITTED_CHANGES,
    StageResult,
    daemon_diagnosis,
)
from sloopd.git import ops as gitops
from sloopd.proc.stage_io import Collected, Lost
from sloopd.runs.spawning import NotStarted, Ran
from sloopd.util import quoting
from sloopd.vendor.usage import Usage


def discarded_row(collected: Collected, pinned: str, seat: int | None) -> dict[str, Any] | None:
    """The stage row's ``discarded`` entry for what a reviewing child committed or left
    on its pinned commit (recorded, never merged), or None when it left nothing: the
    paths as many as the cap keeps (a reviewer chooses how many it leaves),
    ``paths_omitted`` counting the rest."""
    left = collected.discarded(pinned)
    if left is None:
        return None
    commit, paths = left
    listed, omitted = quoting.listed_paths(paths)
    entry: dict[str, Any] = {"commit": commit, "paths": list(listed)}
    if omitted:
        entry["paths_omitted"] = omitted
    if seat is not None:
        entry["reviewer"] = seat
    return entry


def left_uncommitted(result: StageResult, dirty: tuple[str, ...]) -> StageResult:
    """A passing agent that left work uncommitted fails, saying where (``commit = "auto"``
    is the other way out)."""
    # The first few paths quoted, the rest counted: an agent chooses how many files it
    # leaves and how long their names are, and every client reads this reason.
    reason = (
        "the agent left uncommitted changes in: "
        + quoting.quote_names(dirty)
        + ' (commit them, or set commit = "auto" on the stage)'
    )
    # Sloop found the cause itself: the diagnosis says so, and the vendor classifier
    # (which would answer "unknown") is not asked.
    return result.but(
        passed=False, reason=reason, diagnosis=daemon_diagnosis(UNCOMMITTED_CHANGES, reason)
    ).naming(list(dirty))


@dataclass(frozen=True, slots=True)
class SeatEnd:
    """How one panel seat's child ended, as its ``seat_finished`` row records it."""

    exit_code: int | None  # None: it never ran, or its node was lost
    error: str | None = None
    node: Mapping[str, str] | None = None
    usage: Usage | None = None
    lost: str | None = None  # why its node was lost
    cluster_down: bool = False

    @classmethod
    def of(cls, ran: Ran | NotStarted) -> SeatEnd:
        if isinstance(ran, NotStarted):
            return cls(None, error=ran.reason)
        end = ran.end
        if isinstance(end, Lost):
            return cls(
                None,
                error=f"{NODE_LOST_REASON}: {end.reason}",
                node=end.node,
                usage=ran.usage,
                lost=end.reason,
                cluster_down=end.cluster_down,
            )
        return cls(end.exit_code, node=end.node, usage=ran.usage)

    def failing(self, error: str | None) -> SeatEnd:
        """Its own clock stopped it: the error is the timeout's."""
        return replace(self, error=error)

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"exit_code": self.exit_code}
        if self.error is not None:
            row["error"] = self.error
        if self.node is not None:
            row["node"] = dict(self.node)
        if self.usage is not None:
            row["usage"] = self.usage.row()
        return row


def lost(reason: str, node: Mapping[str, str] | None, cluster_down: bool = False) -> StageResult:
    """A child whose Ray node (or actor) was lost: failed, transient (queued again)."""
    detail = f"{NODE_LOST_REASON}: {reason}"
    result = StageResult.checked("exit_code", False, detail)
    if node is not None:
        result = result.but(node=dict(node))
    return result.but(diagnosis=lost_diagnosis(detail, cluster_down))


def lost_diagnosis(detail: str, cluster_down: bool) -> dict[str, Any]:
    """``node_lost``; ``cluster_down`` when the whole cluster could not be reached then
    (sloopd.runs.retries: the ticket is queued again without spending a retry)."""
    diagnosis = daemon_diagnosis(NODE_LOST, detail)
    return {**diagnosis, "cluster_down": True} if cluster_down else diagnosis


def exit_reason(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code}"
    return f"exited with code {code}"


def git_result(outcome: gitops.GitResult) -> StageResult:
    return StageResult(
        passed=outcome.ok,
        exit_code=None,
        verdict_source="git",
        reason=outcome.reason,
        final=bool(outcome.final),
    ).naming(outcome.paths or ())
