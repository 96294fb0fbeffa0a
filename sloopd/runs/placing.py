"""Where one child of a stage runs, decided once: ``[executor]``, the stage's own, the seat's own.

The seat's ``backend`` and ``resources`` win over the stage's, which win over
``[executor]``'s, key by key (sloopd.flows.placement).  The answer is a
``stage_io.Placement`` carried on the child's launch: its ``where`` picks the
launcher (sloopd.runs.spawning) and the workspace (sloopd.runs.execute), and its
``ref``, ``auto_commit``, ``listing`` and ``advance`` say what is taken back after
the child, wherever it ran.  Nothing else asks where a child runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sloopd.flows.flow import Stage
from sloopd.flows.placement import Resources
from sloopd.proc.stage_io import Placement
from sloopd.runs.runstate import ActiveRun, RunFacts


@dataclass(frozen=True, slots=True)
class Work:
    """What is taken back after a child: the run's base, the execution's ref, the
    identity and message of ``commit = "auto"`` (None: leftovers only listed), whether
    leftovers are listed at all, and whether the run's branch moves to the work."""

    base: str
    ref: str
    identity: tuple[str, str]
    auto_commit: str | None = None
    listing: bool = True
    advance: bool = False


def placement(
    active: ActiveRun, facts: RunFacts, stage: Stage, seat: int | None, work: Work
) -> Placement:
    """The plan of one child: where it runs, with what, and what is taken back."""
    backend, resources = placed(active, stage, seat)
    return Placement(
        # On this host, the sandbox mode the run was admitted with; else the executor.
        where=active.config.sandbox if backend == "local" else backend,
        backend=backend,
        base=work.base,
        branch=facts.branch,
        ref=work.ref,
        identity=work.identity,
        auto_commit=work.auto_commit,
        listing=work.listing,
        advance=work.advance,
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
