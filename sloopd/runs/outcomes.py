"""What a stage's end makes of its facts: small pure shapings of ``StageResult``.

Split from ``sloopd.runs.execute`` by concern: a lost node, a reviewer's leftovers
shipped back, an exit code's words, git's outcome as a stage result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sloopd.flows.results import NODE_LOST, NODE_LOST_REASON, StageResult, daemon_diagnosis
from sloopd.git import ops as gitops
from sloopd.proc.stage_io import StageEnd
from sloopd.runs.branch import Discarded


def shipped_leftovers(end: StageEnd, pinned: str) -> Discarded | None:
    """What a reviewing child on a node committed or left (recorded, never merged)."""
    if end.commit == pinned and not end.uncommitted:
        return None
    return Discarded(end.commit if end.commit != pinned else None, end.uncommitted)


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
