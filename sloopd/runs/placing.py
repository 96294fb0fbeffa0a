"""Where one child of a stage runs: ``[executor]``, the stage's own, the seat's own.

The seat's ``backend`` and ``resources`` win over the stage's, which win over
``[executor]``'s, key by key (sloopd.flows.placement); a child placed on Ray gets
a ``stage_io.Placement`` that tells the remote executor where its work is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from sloopd.flows.flow import Stage
from sloopd.flows.placement import Resources
from sloopd.proc.stage_io import Placement
from sloopd.runs.runstate import ActiveRun, RunFacts


@dataclass(frozen=True, slots=True)
class Work:
    """Where a remote child's work is recorded: the run's base, the execution's ref,
    the identity and message of ``commit = "auto"`` (None: leftovers only reported)."""

    base: str
    ref: str
    identity: tuple[str, str]
    auto_commit: str | None = None


def placement(
    active: ActiveRun, facts: RunFacts, stage: Stage, seat: int | None, work: Work | None
) -> Placement | None:
    """What a remote executor needs beyond the launch; None for a child on this host."""
    backend, resources = placed(active, stage, seat)
    if backend != "ray" or work is None:
        return None
    return Placement(
        base=work.base,
        branch=facts.branch,
        ref=work.ref,
        identity=work.identity,
        auto_commit=work.auto_commit,
        resources=resources.request(),
        max_bundle=active.config.executor.max_bundle,
    )


def placed(active: ActiveRun, stage: Stage, seat: int | None) -> tuple[str, Resources]:
    """(backend, resources) of one child."""
    executor = active.config.executor
    backend, resources = executor.backend, executor.resources
    # The seat's own over the stage's over [executor]'s, key by key.
    own = [stage.placement, stage.reviewers[seat].placement if seat is not None else None]
    for chosen in own:
        if chosen is not None:
            backend = chosen.backend or backend
            resources = chosen.resources.over(resources)
    return backend, resources
