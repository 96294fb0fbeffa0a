"""Where a flow lands: its ``sync`` → gate stages → ``ff_only`` spans (DESIGN rule 9).

A *landing* is a ``sync`` and the first ``ff_only`` after it with no other ``sync``
between, and at least one stage between them: its *gate*.  A run whose walk reaches a
landing's ``sync`` joins the merge queue (``sloopd.landing``): its ``sync`` builds a
candidate on the candidate ahead, its gate stages run on that candidate and never move
it, and its ``ff_only`` lands it in queue order.  A flow without a landing walks as it
did before the queue: a ``sync`` right before its ``ff_only`` (the default flow) needs
no queue, since nothing runs between them: the two are one step under main's slot
(sloopd.landing.merge_slot), so main cannot move between the merge and the merge.

Pure functions over the stages' actions, so the flow, the walk and the queue all ask
the same question the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class _Staged(Protocol):
    @property
    def action(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Span:
    """One landing: the flow positions of its ``sync`` and its ``ff_only``."""

    sync: int
    ff_only: int

    def holds(self, index: int) -> bool:
        """``index`` is this landing's sync, one of its gate stages or its ff_only."""
        return self.sync <= index <= self.ff_only

    def gates(self, index: int) -> bool:
        """``index`` is one of this landing's gate stages."""
        return self.sync < index < self.ff_only


def spans(stages: Sequence[_Staged]) -> tuple[Span, ...]:
    found: list[Span] = []
    sync: int | None = None
    for index, stage in enumerate(stages):
        if stage.action == "sync":
            sync = index  # a later sync starts the landing afresh
        elif stage.action == "ff_only" and sync is not None:
            if index > sync + 1:  # a gate between them; else sync and merge are one step
                found.append(Span(sync, index))
            sync = None
    return tuple(found)


def span_at(stages: Sequence[_Staged], index: int) -> Span | None:
    """The landing that position ``index`` belongs to, if any."""
    return next((span for span in spans(stages) if span.holds(index)), None)


def gate_positions(stages: Sequence[_Staged]) -> frozenset[int]:
    return frozenset(i for span in spans(stages) for i in range(span.sync + 1, span.ff_only))
