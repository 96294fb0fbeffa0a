"""A stage's outcome: the one value its stage_finished row is written from.

The executor, the run driver, crash recovery and the budget all shape a stage's
outcome (a check's verdict, then an abort, a timeout or a spent budget over it);
one frozen value keeps them to the same keys, and ``to_row`` is the only place
that decides which keys the stored row carries.  ``walk.replay`` reads the row
back by key, so an absent key and a null one replay alike, but the row keeps
today's keys exactly: a key written only when it says something stays so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from sloopd.flows.walk import ENDED_BY_INTERRUPTED, ENDED_BY_REBUILT
from sloopd.util import quoting

UNCOMMITTED_CHANGES: Final = "uncommitted_changes"
"""The classification of an agent stage that exited 0 leaving changes uncommitted
(``commit = "manual"``): the daemon's own finding, no vendor's."""


NODE_LOST: Final = "node_lost"
"""The classification of a child whose Ray node (or its actor) was lost mid-stage: a
transient failure, so the ticket is queued again and no return_to is spent."""
NODE_LOST_REASON: Final = "the Ray node running the stage was lost"

DISK_FULL: Final = "disk_full"
"""The classification of a stage whose checkout or bring-back failed for want of space
(``sloopd.runs.disk_full``): a transient failure, so the ticket is queued again and no
return_to is spent."""


def daemon_diagnosis(classification: str, detail: str) -> dict[str, Any]:
    """A diagnosis the daemon made itself (it stopped the child, saw it silent, or
    found the cause in the checkout).

    The vendor's own (``vendor.classify``) has the first four keys; the daemon has
    no output line to show, so ``evidence`` is null and ``detail`` says why.  Key
    order is the stored and wire order of every such diagnosis.
    """
    return {
        "classification": classification,
        "evidence": None,
        "vendor": None,
        "reset_at_ms": None,
        "detail": detail,
    }


@dataclass(frozen=True, slots=True)
class StageResult:
    passed: bool
    reason: str | None = None
    exit_code: int | None = None
    # None when no check ran (an interrupted stage): then neither it nor exit_code
    # is written, as the interrupted rows always were.
    verdict_source: str | None = None
    # Written with a reported verdict only (null when the worker gave none).
    confidence: str | None = None
    # Bounded (quoting.listed_paths: an agent chooses how many and how long);
    # paths_omitted counts the ones left out.
    paths: tuple[str, ...] = ()
    paths_omitted: int = 0
    # Failed for a reason no return can mend: the run ends failed.
    final: bool = False
    # Recovery only: git could not tell whether main moved.
    undetermined: bool = False
    commit: str | None = None
    discarded: tuple[dict[str, Any], ...] = ()
    usage: dict[str, Any] | None = None
    diagnosis: dict[str, Any] | None = None
    # Where a remote executor ran the child ({"id", "host"}); None on the daemon's host.
    node: dict[str, Any] | None = None
    # Why it ended before its check decided (walk.ENDED_BY_*); None: it was decided.
    ended_by: str | None = None
    # Interrupted by a clean stop of the daemon (SIGTERM), which the bound on continuing
    # a run does not count (walk.Walk.interrupted_in_a_row): only crashes do.
    clean: bool = False
    # A merge-queue sync: the runs whose work its candidate holds besides main's.
    onto: tuple[str, ...] | None = None
    # A sync conflict's marked regions (sloopd.git.conflicts: bounded, escapes removed),
    # and whether some were left out; told to the stage it sends back.
    hunks: tuple[str, ...] = ()
    hunks_clipped: bool = False
    # The child's last line that ``reason`` quotes after its rule (``exited with code
    # 1: <said>``), so that a diagnosis quoting the CLI's own words can take its place
    # (sloopd.flows.diagnosed).  Not stored: the reason carries it.
    said: str | None = None

    @classmethod
    def interrupted(cls, reason: str) -> StageResult:
        """A stage that never finished its check: failed, with only why."""
        return cls(passed=False, reason=reason, ended_by=ENDED_BY_INTERRUPTED)

    @classmethod
    def rebuilt(cls, cause: str, commit: str | None) -> StageResult:
        """A landing stage cut short because the merge queue rebuilds the run's candidate:
        failed for v1 clients, no failure of the run's (no returns spent)."""
        return cls(
            passed=False, reason=f"rebuilt: {cause}", commit=commit, ended_by=ENDED_BY_REBUILT
        )

    @classmethod
    def checked(
        cls, verdict_source: str, passed: bool, reason: str | None, exit_code: int | None = None
    ) -> StageResult:
        return cls(passed=passed, reason=reason, exit_code=exit_code, verdict_source=verdict_source)

    def failed(self, reason: str | None) -> StageResult:
        """The same facts, failed with ``reason`` (an abort, a timeout over the check)."""
        return replace(self, passed=False, reason=reason, said=None)

    def saying(self, said: str | None) -> StageResult:
        """The same result, its reason quoting ``said`` (the child's last line) after
        the rule it states: ``exited with code 1: FAILED: answer.txt …``."""
        if said is None or self.reason is None:
            return self
        return replace(self, reason=f"{self.reason}: {said}", said=said)

    def unsaid(self) -> StageResult:
        """The same result without the quote ``saying`` added: a cause found in the
        output (a CLI's own error, a program the sandbox hid) takes its place."""
        if self.said is None or self.reason is None:
            return self
        # The first ": <said>" is the quote: the rule before it holds no colon.
        return replace(self, reason=self.reason.replace(f": {self.said}", "", 1), said=None)

    def but(self, **changes: Any) -> StageResult:
        return replace(self, **changes)

    def naming(self, paths: Sequence[str]) -> StageResult:
        """The same result listing ``paths``, as many as the cap keeps, the rest counted."""
        kept, omitted = quoting.listed_paths(paths)
        return replace(self, paths=kept, paths_omitted=omitted)

    def to_row(self) -> dict[str, Any]:  # noqa: C901 - one flat if per optional key
        """The stage_finished row's data: optional keys only when they carry a fact."""
        row: dict[str, Any] = {"passed": self.passed}
        if self.verdict_source is not None:
            row["exit_code"] = self.exit_code
            row["verdict_source"] = self.verdict_source
        row["reason"] = self.reason
        if self.verdict_source == "reported":
            row["confidence"] = self.confidence
        if self.paths:
            row["paths"] = list(self.paths)
        if self.paths_omitted:
            row["paths_omitted"] = self.paths_omitted
        if self.final:
            row["final"] = True
        if self.undetermined:
            row["undetermined"] = True
        if self.commit is not None:
            row["commit"] = self.commit
        if self.discarded:
            row["discarded"] = list(self.discarded)
        if self.usage is not None:
            row["usage"] = self.usage
        if self.diagnosis is not None:
            row["diagnosis"] = self.diagnosis
        if self.node is not None:
            row["node"] = self.node
        if self.ended_by is not None:
            row["ended_by"] = self.ended_by
        if self.clean:
            row["clean"] = True
        if self.onto is not None:
            row["onto"] = list(self.onto)
        if self.hunks:
            row["hunks"] = list(self.hunks)
        if self.hunks_clipped:
            row["hunks_clipped"] = True
        return row
