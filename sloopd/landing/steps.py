"""A run's driver at its landing: what it asks the merge queue, and when.

``before`` is asked before every stage of a landing (sloopd.flows.landings): before
the ``sync`` the run joins the queue and waits for its turn to build; before a gate
stage or the ``ff_only`` a stale candidate sends the walk back to the sync (a
``rebuilt`` row, no returns spent); before the ``ff_only`` the run waits for the
runs ahead to land.  ``after`` takes each landing stage's result: a failure is held
while a run ahead in its candidate may still leave, and becomes ``ended_by:
"rebuilt"`` if one does.  The queue decides; this module writes what it decided
into the run's stage log, which stays the run's one source of truth.

The run driver (sloopd.runs.runner) calls it; it names what it gets from the runs
layer by the narrow protocols below (``InFlight``, ``Facts``, ``StageLogs``), so this
layer imports nothing of ``runs``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from sloopd.core.logsink import LogSink
from sloopd.flows import walk
from sloopd.flows.flow import Flow, Stage
from sloopd.flows.results import StageResult
from sloopd.flows.stagelog import replay_run
from sloopd.landing.entry import Rebuild, Stands, Stopped
from sloopd.landing.queue import MergeQueue
from sloopd.store import Store


class InFlight(Protocol):
    """A run in flight, as its driver holds it (``sloopd.runs.runstate.ActiveRun``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def interrupt(self) -> asyncio.Event: ...
    def rebuild(self, cause: str) -> None:
        """Stop the executing child: its stage ends ``rebuilt``."""

    def aborted(self) -> str | None:
        """The abort's reason while the run is cancelled, else None."""

    def continues(self) -> bool:
        """The daemon stops and the run stays in flight (it continues at the next start)."""


class Facts(Protocol):
    """A run's stored facts (``sloopd.runs.runstate.RunFacts``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def ticket(self) -> str: ...
    @property
    def ticket_name(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def branch(self) -> str: ...
    @property
    def flow(self) -> Flow: ...


class StageLogs(Protocol):
    """Where a run's stage log and output go (``sloopd.runs.records.RunRecords``)."""

    @property
    def store(self) -> Store: ...
    @property
    def sink(self) -> LogSink: ...
    def append_steps(
        self,
        run_id: str,
        kind: str,
        stage: str | None = None,
        attempt: int | None = None,
        seat: int | None = None,
        data: dict[str, Any] | None = None,
        at_ms: int | None = None,
    ) -> None: ...


class LandingSteps:
    def __init__(
        self, queue: MergeQueue, records: StageLogs, active: Mapping[str, InFlight]
    ) -> None:
        self.queue = queue
        self.records = records
        self.sink: LogSink = records.sink
        self.active = active
        # Runs executing a gate stage now: only their child is stopped by a rebuild (a
        # stop set between stages would fall on the next stage, the sync).
        self._gating: set[str] = set()

    def stale(self, run_id: str, cause: str) -> None:
        """The queue's word that ``run_id``'s candidate is stale: a gate child running
        on it is stopped now (its row ends ``rebuilt``), not left to finish in vain."""
        active = self.active.get(run_id)
        if active is not None and run_id in self._gating:
            active.rebuild(cause)

    async def before(self, active: InFlight, facts: Facts, stage: Stage) -> bool:
        """True: execute ``stage`` now.  False: a rebuild was written, or the run was
        stopped while it waited; the driver takes its next step from the log."""
        span = facts.flow.landing(stage.name)
        if span is None:
            return True
        run_id = facts.run_id
        index = facts.flow.index(stage.name)
        if index == span.sync:
            alias = f"{facts.ticket_name}#{facts.attempt}"
            self.queue.join(run_id, alias, facts.ticket, facts.branch)
            turn = await self.queue.build_turn(run_id, active.interrupt)
            # Rebuild here: main names nothing; the sync itself fails saying so.
            return not isinstance(turn, Stopped)
        cause = self.queue.stale_cause(run_id)
        if cause is None and index == span.ff_only:
            landing = await self.queue.landing_turn(run_id, active.interrupt)
            if isinstance(landing, Stopped):
                return False
            if isinstance(landing, Rebuild):
                cause = landing.cause
        if cause is not None:
            self._rebuild(facts, stage.name, None, cause)
            return False
        if span.gates(index):
            self._gating.add(run_id)
            self.queue.gate_started(run_id)
        return True

    def rebuild_after(self, facts: Facts, stage: Stage, attempt: int, reason: str | None) -> None:
        """The walk waits for a ``rebuilt`` row after an execution cut short."""
        cause = (reason or "").removeprefix("rebuilt: ") or "the candidate went stale"
        self._rebuild(facts, stage.name, attempt, cause)

    def _rebuild(self, facts: Facts, stage: str, attempt: int | None, cause: str) -> None:
        self.records.append_steps(facts.run_id, walk.REBUILT, stage, attempt, data={"cause": cause})
        state = replay_run(self.records.store, facts.run_id, facts.flow)
        last = state.executions[-1] if state.executions else None
        if last is not None:
            self.sink.append(
                facts.run_id,
                last.stage.name,
                last.attempt,
                "system",
                f"rebuilding the merge-queue candidate: {cause}",
            )

    async def after(
        self, active: InFlight, facts: Facts, stage: Stage, result: StageResult
    ) -> StageResult:
        """A landing stage's result, as the queue lets it count."""
        span = facts.flow.landing(stage.name)
        if span is None:
            return result
        run_id = facts.run_id
        index = facts.flow.index(stage.name)
        self._gating.discard(run_id)
        if active.aborted() is not None or result.ended_by is not None:
            return result  # an abort leaves the queue as the run settles (``ended``)
        if index == span.ff_only:
            return await self._after_landing(facts, stage, result)
        if result.passed:
            if index == span.sync and result.commit is not None:
                self.queue.built(run_id, result.commit)
                entry = self.queue.entry(run_id)
                return result.but(onto=entry.onto_runs if entry is not None else ())
            return result
        if stage.advisory:
            return result
        if index == span.sync:
            self.queue.build_failed(run_id)
        judged = await self.queue.judge_failure(run_id, active.interrupt)
        if isinstance(judged, Rebuild):
            return StageResult.rebuilt(judged.cause, result.commit).but(usage=result.usage)
        if isinstance(judged, Stands):
            kind = "left_conflict" if index == span.sync else "left_failed"
            self.queue.leave(run_id, f"stage '{stage.name}' failed", kind)
        return result

    async def _after_landing(self, facts: Facts, stage: Stage, result: StageResult) -> StageResult:
        run_id = facts.run_id
        if result.passed:
            self.queue.landed(run_id, result.commit or "")
            return result
        judged = Stands() if result.final else await self.queue.landing_failed(run_id)
        if isinstance(judged, Rebuild):
            return StageResult.rebuilt(judged.cause, result.commit)
        self.queue.leave(run_id, f"stage '{stage.name}' failed", "left_other")
        return result

    def ended(self, active: InFlight) -> None:
        """The run's driver ends: a run still queued leaves (an abort, a stop, a crash of
        its driver), and those behind it are rebuilt without its work, unless the
        daemon stops with the run in flight (issue 38: it continues at the next start)."""
        self._gating.discard(active.run_id)
        aborted = active.aborted()
        if aborted is not None:
            self.queue.leave(active.run_id, f"aborted: {aborted}", "left_aborted")
        elif active.continues():
            # The daemon stops: the queue goes with it, and the next start builds every
            # candidate again in the old order (sloopd.resume.landing_order).  No run
            # ahead left for good, so none behind is rebuilt for it now.
            self.queue.leave(active.run_id, "the daemon stopped", "left_other", behind=False)
        else:
            self.queue.leave(active.run_id, "the run ended", "left_other")
