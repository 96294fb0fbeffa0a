"""A run's stored facts and its stage log, shared by the driver, the stages and the worker.

The run driver, the stage executor and the worker verbs all read a run's row
and replay its stage log, and all append to it; this one object does both, so
none of them needs the others (or the whole run manager) to do it.  Settling
lives here too: it is one transaction over the run, its ticket and its event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from sloopd.core.logsink import LogSink
from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.explain import agent_exit_code, ended_words, run_diagnosis, run_reason
from sloopd.flows.flow import Stage
from sloopd.flows.results import StageResult
from sloopd.flows.stagelog import append_step, flow_of, read_log, replay_run
from sloopd.runs.runstate import RunFacts
from sloopd.store import Store, StoreUnavailable
from sloopd.util import quoting
from sloopd.util.clock import now_ms

log = logging.getLogger(__name__)

T = TypeVar("T")

# Backoff between attempts at a write the store refused (full disk, a held lock).
RETRY_FIRST_SECONDS = 0.1
RETRY_MAX_SECONDS = 5.0
# Once the daemon stops, how long a refused write is retried before it is left to the
# next start's recovery (which settles from the stage log and git).
RETRY_WHEN_STOPPING_SECONDS = 10.0


class RunRecords:
    def __init__(self, daemon: Daemon, sink: LogSink) -> None:
        self.daemon = daemon
        self.sink = sink
        self.stopping = False
        self._settle_waiters: dict[str, list[asyncio.Future[None]]] = {}

    async def until_settled(self, run_id: str, timeout_s: float) -> None:
        """Return once ``run_id`` settles or ``timeout_s`` passes (the caller re-reads)."""
        waiter = asyncio.get_running_loop().create_future()
        waiters = self._settle_waiters.setdefault(run_id, [])
        waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._settle_waiters.pop(run_id, None)

    def _wake_settle_waiters(self, run_id: str) -> None:
        for waiter in self._settle_waiters.pop(run_id, []):
            if not waiter.done():
                waiter.set_result(None)

    async def durably(self, write: Callable[[], T], what: str) -> T:
        """``write()``, retried with backoff while the store refuses it.

        A run's facts cannot be skipped (a stage's result, its settle): the run waits
        for the store instead.  Each attempt is one whole transaction, so a retry never
        doubles a row.  A stopping daemon gives up after a while and leaves the run to
        the next start's recovery.
        """
        delay, waited = RETRY_FIRST_SECONDS, 0.0
        while True:
            try:
                return write()
            except StoreUnavailable as exc:
                if self.stopping and waited >= RETRY_WHEN_STOPPING_SECONDS:
                    raise
                if waited == 0:
                    log.warning("%s waits for the store: %s", what, exc)
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    def read_log(self, run_id: str) -> list[walk.LogRow]:
        return read_log(self.store, run_id)

    def replay(self, facts: RunFacts) -> walk.Walk:
        """Where the run's walk stands (``stagelog.replay_run`` over its facts' flow)."""
        return replay_run(self.store, facts.run_id, facts.flow)

    def append_steps(
        self,
        run_id: str,
        kind: str,
        stage: str | None = None,
        attempt: int | None = None,
        seat: int | None = None,
        data: dict[str, Any] | None = None,
        at_ms: int | None = None,
    ) -> None:
        with self.store.writer.transaction() as tx:
            append_step(tx, run_id, kind, stage, attempt, seat, data, at_ms)

    async def append_steps_durably(
        self,
        run_id: str,
        kind: str,
        stage: str,
        attempt: int,
        seat: int | None,
        data: dict[str, Any],
    ) -> None:
        """A step that records what already happened (a seat ran): wait for the store."""
        await self.durably(
            lambda: self.append_steps(run_id, kind, stage, attempt, seat, data),
            f"{run_id}: {kind} of '{stage}' execution {attempt}",
        )

    @property
    def store(self) -> Store:
        return self.daemon.require_store()

    def facts(self, run_id: str) -> RunFacts:
        run = self.store.run_by_id(run_id)
        assert run is not None
        ticket = self.store.ticket_by_id(run.ticket)
        assert ticket is not None
        worktree = run.worktree or str(self.daemon.layout.state_dir / "checkouts" / run_id)
        return RunFacts(
            run_id=run_id,
            ticket=run.ticket,
            ticket_name=ticket.name,
            attempt=run.attempt,
            branch=run.branch,
            worktree=Path(worktree),
            flow=flow_of(run),
        )

    def finish(
        self,
        run_id: str,
        stage: Stage,
        attempt: int,
        result: StageResult,
        started_ms: int | None = None,
        *,
        aborted: bool = False,
    ) -> None:
        """The stage_finished row, the stage's duration metric and its system record.

        ``aborted``: an abort (or a stopping daemon) cut the execution short; its row
        stays failed for v1 clients (``ended_by`` is derived on the wire), and its
        record says ``aborted``.
        """
        self.append_steps(run_id, walk.STAGE_FINISHED, stage.name, attempt, data=result.to_row())
        verdict = "passed" if result.passed else "failed"
        metrics = self.daemon.metrics
        if metrics is not None:
            run = self.store.run_by_id(run_id)
            flow_name = run.flow if run else "?"
            started = started_ms or now_ms()
            metrics.stage_duration.labels(flow_name, stage.name, verdict).observe(
                max(0, now_ms() - started) / 1000
            )
        self.sink.append(
            run_id,
            stage.name,
            attempt,
            "system",
            f"stage '{stage.name}' execution {attempt} {ended_words(result, aborted=aborted)}",
        )

    async def settle_durably(
        self, run_id: str, outcome: str, halt: str | None, reason: str | None, **options: Any
    ) -> None:
        """``settle``, waiting for the store: a run never stays in flight after its end."""
        await self.durably(
            lambda: self.settle(run_id, outcome, halt, reason, **options), f"settling {run_id}"
        )

    def settle(
        self,
        run_id: str,
        outcome: str,
        halt: str | None,
        reason: str | None,
        *,
        requeue: bool = False,
        state: walk.Walk | None = None,
        requeue_at_ms: int | None = None,
        diagnosis: dict[str, Any] | None = None,
    ) -> None:
        """End the run: its halted row, its row, its ticket and its event, atomically.

        ``diagnosis``: the run's classification when no stage's explains its end (a
        checkout the disk had no room for: sloopd.runs.disk_full)."""
        facts = self.facts(run_id)
        if state is None:
            state = self.replay(facts)
        if outcome != "merged" and reason is None:
            reason = run_reason(state, outcome, halt, facts.branch)
        if reason is not None:
            # Every run row, event and notification carries it: bounded whatever a
            # stage's reason quoted of what an agent printed or named.
            reason = quoting.clip(reason, quoting.REASON_CHARS)
        if diagnosis is None and outcome != "merged":
            diagnosis = run_diagnosis(state)
        now = now_ms()
        with self.store.writer.transaction() as tx:
            append_step(
                tx, run_id, walk.HALTED, data={"state": outcome, "halt": halt, "reason": reason}
            )
            tx.run(
                "run_settle",
                {
                    "id": run_id,
                    "state": outcome,
                    "now": now,
                    "halt": halt,
                    "reason": reason,
                    "agent_exit_code": agent_exit_code(state),
                    "classification": orjson.dumps(diagnosis).decode() if diagnosis else None,
                },
            )
            ticket_state = outcome
            # Queued again: after a restart or a stop now, after a vendor limit when it lifts.
            requeue_due = now if outcome == "aborted" and requeue else requeue_at_ms
            if outcome == "aborted":
                ticket_state = "ready" if requeue else "held"
            if requeue_at_ms is not None:
                ticket_state = "ready"
            if (
                requeue_due is not None
                and tx.one("trigger_queued_for_ticket", (facts.ticket,)) is None
            ):
                tx.one("trigger_insert", {"ticket": facts.ticket, "due": requeue_due, "now": now})
            tx.run("ticket_set_state", {"id": facts.ticket, "state": ticket_state, "now": now})
            # In the same transaction: a settle is whole or absent, never half-recorded.
            self.daemon.append_event(
                "run_aborted" if outcome == "aborted" else "run_finished",
                ticket=facts.ticket,
                run=run_id,
                data={"state": outcome, "halt": halt, "reason": reason},
            )
        # Before anything yields: held logs requests and the feeds' run cache see the settle.
        self.daemon.feed_notices.run_settled(run_id)
        # Tagged with the last execution, so every record belongs to a stage.
        last = state.executions[-1] if state.executions else None
        self.sink.append(
            run_id,
            last.stage.name if last else facts.flow.stages[0].name,
            last.attempt if last else 1,
            "system",
            f"run settled {outcome}" + (f": {reason}" if reason else ""),
        )
        if self.daemon.metrics is not None:
            self.daemon.metrics.runs_finished.labels(outcome).inc()
        self._wake_settle_waiters(run_id)
