"""The daemon's shared state: what every verb handler reads and writes through.

It names what it holds by narrow interfaces (``LiveRun``), never by the layers
that fill it in, so every layer above can import it and it imports none of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from sloopd.core import executor_config, hardening
from sloopd.core.changelog import ChangeLog
from sloopd.core.config import Config
from sloopd.core.logcache import LogCache
from sloopd.core.longpoll import FeedNotices
from sloopd.core.model import ReadModel
from sloopd.core.paths import Layout
from sloopd.core.rows import Gate, QueueFacts
from sloopd.ops.metrics import Metrics
from sloopd.store import Store, StoreFault, TriggerRow
from sloopd.util.clock import now_ms
from sloopd.wire import api


class LiveRun(Protocol):
    """What the read side asks of a run in flight (the runs layer keeps the rest)."""

    # The configuration the run was admitted with (its sandbox mode, for one).
    config: Config

    def silent_for_ms(self) -> int | None: ...

    def stall(self) -> dict[str, Any] | None: ...

    def usage_total(self) -> dict[str, Any] | None: ...

    def live_usage(self) -> dict[str, Any] | None: ...

    def live_node(self) -> dict[str, Any] | None: ...


class QueueView(Protocol):
    """The merge queue as the read side sees it (sloopd.landing.queue.MergeQueue)."""

    @property
    def window(self) -> int: ...

    def rows(self) -> list[dict[str, Any]]: ...

    def row_of(self, run_id: str) -> dict[str, Any] | None: ...


def _nothing() -> None:
    pass


@dataclass
class Daemon:
    layout: Layout
    config: Config
    store: Store | None
    # Why the store is not served (a store newer than this binary); None when healthy.
    refused: str | None = None
    started_at_ms: int = field(default_factory=now_ms)
    gate: Gate = field(default_factory=Gate)
    # Probes in a row that met a vendor limit with no named reset again
    # (sloopd.queue.gate): each doubles the next wait.  Not stored: a restart starts over.
    limit_probes: int = 0
    # Runs in flight: the registry the RunManager adds to and drops from, passed to
    # both at construction; read by show for live fields.
    active_runs: Mapping[str, LiveRun] = field(default_factory=dict)
    metrics: Metrics | None = None
    # The merge queue (0.9), set by the composition root; None until the runs exist.
    merge_queue: QueueView | None = None
    # Why a sandbox cannot start on this host (the last probe), None when it can.
    sandbox_problem: str | None = None
    # (0.9.0) Whether stages start in copy-on-write checkouts, and why not when they do
    # not (the probe's sentence, or the configuration's choice): sandbox.workspaces.
    layered_checkouts: bool = False
    checkouts_reason: str | None = None
    # The configured presets whose CLI the sandbox would not find (sloopd.core.cli_sight),
    # checked at start and on each reload: daemon.sandbox.clis.
    unseen_clis: list[dict[str, Any]] = field(default_factory=list)
    # The Ray cluster as the executor's driver last reported it (sloopd.remote.
    # cluster_gate): None until it reported; "" once reachable, else why not.
    executor_problem: str | None = None
    # The read model (None until derived after recovery, and on a refused store) and
    # its epoch, which every ``show`` reply carries.
    model: ReadModel | None = None
    changes: ChangeLog = field(init=False)
    # The listeners connect() wires (nothing until then; a refused store never does).
    _poke: Callable[[], None] = field(init=False, repr=False)
    _events_appended: Callable[[], None] = field(init=False, repr=False)
    _connected: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.changes = ChangeLog(self.started_at_ms)
        self.log_cache = LogCache(lambda: self.config.repo.log_cache)
        # Set here, not as field defaults: a function as a class attribute would bind.
        self._poke = self._events_appended = _nothing

    def connect(self, *, poke: Callable[[], None], events_appended: Callable[[], None]) -> None:
        """The one late step of wiring: the listeners that are built on the daemon.

        The scheduler and the notices both read the daemon, so they are built after
        it and cannot be passed to it; the composition root connects them here,
        once, before recovery settles anything (so those settles are told too).
        Until then a poke and an event's wake-up reach nobody, which is what a
        daemon that is not serving yet wants.
        """
        if self._connected:
            raise RuntimeError("the daemon's listeners are connected once")
        self._poke, self._events_appended = poke, events_appended
        self._connected = True

    def poke(self) -> None:
        """Tell the scheduler that work may have become claimable."""
        self._poke()

    # Held logs and events requests (long-poll), and the wake-ups writers send them.
    feed_notices: FeedNotices = field(default_factory=FeedNotices)
    # Log records readers asked for, in memory (the log sink appends to it); its bound
    # is read from the config at each fill, so a reload applies.
    log_cache: LogCache = field(init=False, repr=False)

    def stalled_runs(self) -> int:
        return sum(1 for run in self.active_runs.values() if run.stall() is not None)

    def held_requests(self) -> int:
        return self.feed_notices.held

    def log_cache_bytes(self) -> int:
        return self.log_cache.size

    def gate_state(self) -> tuple[str, int | None]:
        """The gate's state and, in cooldown, when it ends (metrics read this)."""
        until = self.gate.until_ms if self.gate.state == "cooldown" else None
        return self.gate.state, until

    def require_store(self) -> Store:
        """The store, or the refusal every verb but ``show`` answers with."""
        if self.store is None:
            raise api.ProtocolError(
                api.ErrorCode.DAEMON_UNAVAILABLE,
                f"the daemon is running but serves only 'show': {self.refused}",
                {"reason": self.refused},
            )
        return self.store

    def info(self) -> dict[str, Any]:
        now = now_ms()
        return {
            "version": api.SOFTWARE_VERSION,
            "protocol": api.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "repo": str(self.layout.repo),
            "state_dir": str(self.layout.state_dir),
            "socket": str(self.layout.operator_socket),
            "started_at_ms": self.started_at_ms,
            "uptime_ms": now - self.started_at_ms,
            "store": "refused" if self.refused else "ok",
            "schema_version": self.store.schema_version if self.store else None,
            "reason": self.refused,
            "sandbox": self.sandbox_info(),
            # Additive in 0.6.0: the store refuses writes (full disk, a held lock) since
            # when; null while writes succeed.
            "store_fault": fault.row() if (fault := self.store_fault()) else None,
            "executor": self.executor_info(),
            # Additive in 0.9.0: whether the service manager's hardening is in force.
            "service": hardening.this_daemon(),
        }

    def executor_info(self) -> dict[str, Any]:
        """Additive in 0.8.0: where stages run, and whether the Ray cluster is reachable."""
        executor = self.config.executor
        if not executor_config.uses_ray(executor, self.config.flows.values()):
            return {"backend": executor.backend, "address": None, "reachable": None, "reason": None}
        problem = self.executor_problem
        return {
            "backend": executor.backend,
            "address": executor.address,
            "reachable": None if problem is None else problem == "",
            "reason": problem or None,
        }

    def store_fault(self) -> StoreFault | None:
        return self.store.fault if self.store is not None else None

    def sandbox_info(self) -> dict[str, Any]:
        """Additive in 0.5.0: how children run, flagged when it is unsafe or impossible."""
        mode = self.config.sandbox
        if mode == "none":
            warning: str | None = 'sandbox = "none": agents run unsandboxed, as this daemon\'s user'
        elif self.sandbox_problem is not None:
            warning = f"no stage can start: {self.sandbox_problem}"
        else:
            warning = None
        return {
            "mode": mode,
            "available": self.sandbox_problem is None,
            "warning": warning,
            # Additive in 0.9.0: copy-on-write checkouts, or whole ones and why.
            "workspaces": {
                "mode": "layered" if self.layered_checkouts else "whole",
                "reason": None if self.layered_checkouts else self.checkouts_reason,
            },
            # Additive in 0.8.0: each configured preset whose CLI the sandbox cannot see.
            "clis": list(self.unseen_clis),
        }

    def queue_facts(self, queued: list[TriggerRow] | None = None) -> QueueFacts:
        """``queued``: the triggers_queued rows, when the caller already read them."""
        store = self.require_store()
        if queued is None:
            queued = store.rows(TriggerRow, "triggers_queued")
        first_by_ticket: dict[str, TriggerRow] = {}
        for trigger in queued:
            first_by_ticket.setdefault(trigger.ticket, trigger)
        count = store.scalar("runs_in_flight_count")
        return QueueFacts(
            now_ms=now_ms(),
            gate=self.gate,
            parallel=self.config.repo.parallel,
            in_flight=int(count or 0),
            triggers_by_ticket=first_by_ticket,
            flows=frozenset(self.config.flows),
        )

    def append_event(
        self,
        kind: str,
        *,
        ticket: str | None = None,
        run: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        store = self.require_store()
        with store.writer.transaction() as tx:
            tx.run(
                "event_insert",
                {
                    "kind": kind,
                    "at": now_ms(),
                    "ticket": ticket,
                    "run": run,
                    "data": orjson.dumps(data or {}).decode(),
                },
            )
        # Inside an enclosing transaction too: a woken request reads on a later
        # turn of the loop, after the (synchronous) commit.
        self.feed_notices.event_appended(ticket, run)
        if self.metrics is not None:
            self.metrics.events.inc()
        # Only a wake-up: the insert may belong to an enclosing transaction not yet
        # committed, so the reader looks at the committed feed later, on the loop.
        self._events_appended()  # sloopd.core.notices reads the committed feed
