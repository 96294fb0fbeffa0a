"""One run in the merge queue, and the answers the queue gives its driver.

``Entry`` is the queue's whole knowledge of a run: where its candidate stands and
why it waits.  ``row`` is its wire shape (the dashboard's ``queue`` entries and a run
detail's ``queue``, additive in 0.9.0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sloopd.util.clock import now_ms

# waiting: joined, its turn to build not come (the window, or the candidate ahead);
# building: its sync makes its candidate; gating: its gate stages run on it; held: a
# gate (or its sync) failed while runs ahead in its candidate may still leave; passed:
# every gate passed, it waits for the runs ahead to land; landing: its ff_only runs.
EntryState = Literal["waiting", "building", "gating", "held", "passed", "landing"]
GATES_PASSED: frozenset[str] = frozenset({"passed", "landing"})


@dataclass(frozen=True, slots=True)
class Go:
    """Go on with the stage (a sync: build on ``onto``)."""

    onto: str = ""
    ahead: tuple[str, ...] = ()  # branches of the runs whose work ``onto`` holds


@dataclass(frozen=True, slots=True)
class Rebuild:
    """The run's candidate is stale: back to the landing's sync, spending no returns."""

    cause: str


@dataclass(frozen=True, slots=True)
class Stands:
    """The failure is the run's own: every run ahead in its candidate passed its gates."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The run was stopped (an abort, a stopping daemon) while it waited."""


Turn = Go | Rebuild | Stopped
Judgement = Stands | Rebuild | Stopped


@dataclass(slots=True)
class Entry:
    run_id: str
    alias: str
    ticket: str
    branch: str
    joined_at_ms: int = field(default_factory=now_ms)
    state: EntryState = "waiting"
    # The runs (ids, in queue order) whose work the candidate holds besides main's, and
    # the commit it was built on: main's tip or the candidate of the nearest run ahead.
    onto_runs: tuple[str, ...] = ()
    onto_branches: tuple[str, ...] = ()
    onto_commit: str | None = None
    candidate: str | None = None
    # Why the candidate must be rebuilt, once it must; cleared when its sync starts again.
    stale: str | None = None
    # Its sync failed (a conflict with the work ahead): it has no candidate, so those
    # behind build past it, on the candidate ahead of it, until it leaves or rebuilds.
    conflicted: bool = False
    builds: int = 0
    gate_executions: int = 0

    @property
    def rebuilds(self) -> int:
        return max(0, self.builds - 1)

    def row(self, position: int, window: int, ahead: list[Entry]) -> dict[str, Any]:
        """The wire entry; ``ahead``: the entries in front of it, in queue order."""
        return {
            "run": self.run_id,
            "alias": self.alias,
            "ticket": self.ticket,
            "position": position,
            "state": self.state,
            "candidate": self.candidate,
            "onto": list(self.onto_runs),
            "onto_commit": self.onto_commit,
            "waiting_for": self._waiting_for(position, window, ahead),
            "joined_at_ms": self.joined_at_ms,
            "rebuilds": self.rebuilds,
            # Why its candidate is to be rebuilt (null: it is current), and the window
            # it is counted against (the run detail carries no dashboard beside it).
            "stale": self.stale,
            "merge_window": window,
        }

    def _waiting_for(self, position: int, window: int, ahead: list[Entry]) -> dict[str, Any] | None:
        if self.state == "waiting":
            if position > window:
                return {
                    "reason": "window",
                    "message": f"a place in the merge window ({position} in the queue, "
                    f"window {window})",
                    "runs": [],
                }
            nearest = ahead[-1] if ahead else None
            runs = [nearest.run_id] if nearest is not None else []
            return {
                "reason": "candidate_ahead",
                "message": f"the candidate of {nearest.run_id} to be built"
                if nearest is not None
                else "its turn to build",
                "runs": runs,
            }
        if self.state == "held":
            pending = [
                e.run_id
                for e in ahead
                if e.run_id in self.onto_runs and e.state not in GATES_PASSED
            ]
            return {
                "reason": "runs_ahead_gates",
                "message": "its gate failed on a candidate holding "
                + ", ".join(pending)
                + ": the failure is its own only once their gates pass",
                "runs": pending,
            }
        if self.state == "passed" and ahead:
            runs = [e.run_id for e in ahead]
            return {
                "reason": "runs_ahead",
                "message": f"{', '.join(runs)} to land first",
                "runs": runs,
            }
        return None
